"""The `contextfold` command end to end, in subprocesses, on a fresh SQLite file per test.

Checks the JSON contract of every command, the exit codes (0 ok / no-op, 2 bad input,
1 other failure) and the unhappy paths a user will hit with real files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.core.render.validity import anthropic_problems, openai_problems

FIXTURES = Path(__file__).parents[1] / "fixtures"
CC_LONG = FIXTURES / "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
CC_SHORT = FIXTURES / "claude-code/short.jsonl"
PI = FIXTURES / "pi-mono/large-session.jsonl"


@pytest.fixture
def cli(tmp_path):
    db = tmp_path / "cf.db"
    env = {**os.environ, "CONTEXTFOLD_DB": str(db), "COLUMNS": "120"}

    def run(*args: str, expect: int = 0) -> dict:
        proc = subprocess.run([sys.executable, "-m", "contextfold", *args, "--json"],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1, proc.stdout  # exactly one JSON document on stdout
        return json.loads(lines[0])

    return run


def test_import_compact_project_show(cli):  # M1 M2 M3 T1 T3 C6
    imported = cli("import", str(CC_LONG))
    assert set(imported) == {"session_id", "format", "nodes", "messages", "checkpoints", "skipped",
                             "warnings"}
    assert imported["format"] == "claude-code" and imported["checkpoints"] == 1
    assert imported["skipped"].get("progress", 0) > 0
    sid = imported["session_id"]

    before = cli("project", sid)
    assert set(before) >= {"model", "estimated_tokens", "safe_input_limit", "messages"}
    assert openai_problems(before["messages"]) == []

    done = cli("compact", sid, "--instructions", "keep all file paths")
    assert set(done) >= {"status", "reason", "checkpoint_id", "first_kept_id", "tokens_before",
                         "tokens_after", "summarized_messages", "kept_messages"}
    assert done["status"] == "compacted"
    assert done["summarized_messages"] > 0
    assert done["tokens_after"] < done["tokens_before"]
    # Issue 40 (Q2): the compaction explained: the user asked, before → after as measured,
    # the saving it is expected to make and its break-even request (the model is priced).
    why = done["explanation"]
    assert why["trigger"] == "manual" and why["unit"] == "usd"
    assert (why["tokens_before"], why["tokens_after"]) == (done["tokens_before"],
                                                           done["tokens_after"])
    assert why["expected_saving"] == pytest.approx(why["carry"] - why["compact"], abs=1e-5)
    assert why["break_even"] is None or why["break_even"] >= 1
    assert why["realised"] is None  # no request has followed it yet

    again = cli("compact", sid)  # M3: the checkpoint is the leaf: a successful no-op
    assert again["status"] == "noop" and again["reason"]

    after = cli("project", sid, "--format", "anthropic")
    assert anthropic_problems(after["messages"]) == []
    first = after["messages"][0]["content"][0]["text"]
    assert first.startswith("[contextfold checkpoint]")
    assert after["estimated_tokens"] < before["estimated_tokens"]

    shown = cli("show", sid)
    kinds = [n["kind"] for n in shown["nodes"]]
    assert kinds.count("checkpoint") == 2  # the imported one and ours; nothing was rewritten
    assert len(shown["nodes"]) == imported["nodes"] + 1
    assert shown["leaf_id"] == done["checkpoint_id"]

    listed = cli("sessions")
    assert [s["session_id"] for s in listed["sessions"]] == [sid]
    # Issue 40: the session's bill has each checkpoint's realised saving; none followed ours.
    assert listed["sessions"][0]["cost"]["checkpoints"][done["checkpoint_id"]] == {
        "usd": None, "tokens": 0, "requests": 0}


def test_replay_real_session_is_clean(cli, tmp_path):  # P1 P2 P3 A1 A4
    plot = tmp_path / "replay.png"
    report = cli("replay", str(CC_LONG), "--context-window", "64000", "--model", "small-64k",
                 "--plot", str(plot))
    assert report["invalid_tool_sequences"] == 0
    assert report["dropped_messages"] == 0
    assert report["max_projected_tokens"] <= report["safe_input_limit"]
    assert report["compactions"] >= 1 and report["requests"] > 100
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Issue 40: every compaction explained (the column of `replay`): a model nobody priced
    # is forecast in tokens, and each realised saving counts the requests after it.
    log = report["compaction_log"]
    assert all(c["explanation"]["trigger"] in {"threshold", "cost", "overflow"} for c in log)
    assert all(c["explanation"]["unit"] == "tokens" for c in log)
    after = [c["before_request"] for c in log[1:]] + [report["requests"]]
    for c, end in zip(log, after, strict=True):
        assert c["explanation"]["realised"]["requests"] == end - c["before_request"]


def test_demo_runs_offline_and_stores_the_session(cli):  # A1 P2 T4
    report = cli("demo")
    assert report["compactions"] >= 3
    assert report["invalid_tool_sequences"] == 0 and report["dropped_messages"] == 0
    assert report["max_projected_tokens"] <= report["safe_input_limit"]
    shown = cli("show", report["session_id"])
    assert sum(n["kind"] == "checkpoint" for n in shown["nodes"]) == report["compactions"]


def test_bad_files_are_clear_errors_and_write_nothing(cli, tmp_path):  # D3
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 40)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hello": "world"}))
    for path in (empty, garbage, wrong, tmp_path / "missing.jsonl"):
        error = cli("import", str(path), expect=2)
        assert error["error"]
    assert cli("sessions")["sessions"] == []


def test_truncated_file_imports_what_is_readable(cli, tmp_path):  # D1
    lines = CC_SHORT.read_text().splitlines()
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    imported = cli("import", str(truncated))
    assert imported["skipped"].get("unreadable_line") == 1
    assert imported["messages"] > 0


def test_unknown_session_and_model_are_bad_input(cli):
    assert "no session" in cli("project", "nope", expect=2)["error"]
    sid = cli("import", str(CC_SHORT))["session_id"]
    error = cli("project", sid, "--model", "no-such-model-anywhere", expect=2)
    assert "no-such-model-anywhere" in error["error"]
    error = cli("compact", sid, "--summarizer", "magic", expect=2)
    assert "summarizer" in error["error"]


def test_import_pi_session(cli):
    imported = cli("import", str(PI))
    assert imported["format"] == "pi"
    assert imported["messages"] == 914
    assert imported["skipped"]  # thinking-level and model changes are counted, not lost


def test_demo_twice_and_reimport_on_one_database(cli):  # T1 D3
    first, second = cli("demo", "--turns", "12"), cli("demo", "--turns", "12")
    assert first["session_id"] != second["session_id"]
    cli("import", str(CC_SHORT))
    error = cli("import", str(CC_SHORT), expect=2)  # the same history twice: refused, clearly
    assert "already stored in session" in error["error"]  # names where it is (issue 25)
    assert len(cli("sessions")["sessions"]) == 3  # nothing half-written by the refusal
