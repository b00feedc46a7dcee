"""The CLI against hostile or careless input (issue 10): exit 2 with a clear message, no
traceback, no password in any message, nothing stored changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import contextfold.cli.session_cmds as session_cmds
from contextfold.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
PI_FILE = ROOT / "tests" / "fixtures" / "pi-mono" / "large-session.jsonl"


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exc_info is None or result.exc_info[0] is SystemExit, result.exc_info
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("url", [
    "mysql://alice:s3cr3t-pw@db.example/x",
    "postgresql://alice:s3cr3t-pw@db.example:notaport/x",
    "postgresql://alice:s3cr3t-pw@127.0.0.1:1/x",  # nothing listens: connection refused
])
def test_database_urls_never_leak_the_password(url):  # issue 10
    code, out = run("sessions", "--db", url)
    assert code == 2 and "s3cr3t-pw" not in json.dumps(out)
    assert "***" in out["error"]


def test_db_pointing_at_a_directory_or_another_file(tmp_path):  # issue 10
    code, out = run("sessions", "--db", str(tmp_path))
    assert code == 2 and "is a directory" in out["error"]
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    code, out = run("sessions", "--db", str(other))
    assert code == 2 and "not a SQLite database" in out["error"]
    assert other.read_text() == "my notes\n"
    code, out = run("sessions", "--db", f"sqlite:///{tmp_path}/missing-dir/x.db")
    assert code == 2 and "does not exist" in out["error"]


def test_only_regular_files_within_the_limit_are_read(tmp_path):  # issue 10
    db = str(tmp_path / "x.db")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    code, out = run("import", str(fifo), "--db", db)
    assert code == 2 and "FIFO" in out["error"]
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    code, out = run("import", str(link), "--db", db)
    assert code == 2 and "device" in out["error"]
    size = PI_FILE.stat().st_size
    code, out = run("import", str(PI_FILE), "--db", db, "--max-bytes", str(size - 1))
    assert code == 2 and "--max-bytes" in out["error"] and "over the import limit" in out["error"]
    code, out = run("import", str(PI_FILE), "--db", db, "--max-bytes", str(size))
    assert code == 0 and out["format"] == "pi"


def test_memory_error_is_exit_2(tmp_path, monkeypatch):  # issue 10
    def explode(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(session_cmds, "import_file", explode)
    code, out = run("import", str(PI_FILE), "--db", str(tmp_path / "x.db"))
    assert code == 2 and "out of memory" in out["error"]


def test_nested_line_reason_is_reported(tmp_path):  # issue 10
    path = tmp_path / "nested.jsonl"
    path.write_text('{"type":"session","version":3,"id":"s","cwd":"/"}\n'
                    '{"type":"message","id":"a","message":' + "[" * 100_000 + "]" * 100_000
                    + "}\n")
    code, out = run("import", str(path), "--db", str(tmp_path / "x.db"))
    assert code == 2 and "line 2: JSON nested too deeply" in out["error"]


def test_llm_summariser_with_a_rejected_key_says_why(tmp_path):  # issue 10
    from tests.fakeserver import fake_server

    db = str(tmp_path / "x.db")
    code, imported = run("import", str(PI_FILE), "--db", db)
    assert code == 0
    with fake_server(api_key="the-right-key") as server:
        result = CliRunner().invoke(app, [
            "compact", imported["session_id"], "--json", "--db", db, "--summarizer", "llm",
            "--summarizer-model", "fake-summariser", "--base-url", server.openai_url])
        assert any(r.outcome == "auth" for r in server.requests)  # the key was refused
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["summarizer"] == "extractive-fallback"
    assert "rejected the API key" in payload["fallback_reason"]
    assert "LLM summariser was not used" in result.stderr
