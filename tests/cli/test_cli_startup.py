"""Every command starts quickly because it loads only what it uses (issue 9), and what the
real sessions in tests/fixtures showed: Pi ids that share a long head, a session whose
branch after a compaction holds no reply yet.

Start-up *times* are measured by `bench/startup_bench.py` (docs/benchmarks.md), never
asserted here; these tests assert what is loaded, through `sys.modules`, which does not
depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.cli.render import short_ids

FIXTURES = Path(__file__).parents[1] / "fixtures"
CC_SHORT = FIXTURES / "claude-code/short.jsonl"
PI = FIXTURES / "pi-mono/large-session.jsonl"
# What no command's --help may load: SDKs, the database stack, plotting, servers.
HEAVY = ("openai", "anthropic", "sqlalchemy", "alembic", "matplotlib", "aiosqlite", "psycopg",
         "starlette", "uvicorn", "httpx", "fastapi", "langchain_core", "agents", "pydantic_ai")


def loaded_after(args: list[str], env: dict[str, str] | None = None,
                 watch: tuple[str, ...] = HEAVY) -> tuple[list[str], str]:
    """Run `contextfold ARGS` in a fresh interpreter; which of `watch` it imported."""
    code = ("import sys\nfrom contextfold.cli import app\n"
            f"sys.argv = ['contextfold', *{args!r}]\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in {watch!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("LOADED "), proc.stdout + proc.stderr
    return json.loads(last[len("LOADED "):].replace("'", "\"")), proc.stdout


def registered_commands() -> list[str]:
    import typer

    from contextfold.cli import app

    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_the_bench_times_the_same_commands_the_cli_registers():
    from bench.startup_bench import registered_commands as benched

    assert benched() == registered_commands()
    assert {"import", "sessions", "show", "project", "compact"} <= set(registered_commands())


@pytest.mark.parametrize("command", registered_commands())
def test_every_commands_help_loads_no_sdk_database_or_server(command):
    """A command module registered in cli/ imports its heavy dependencies when it runs, so
    `contextfold COMMAND --help` (and every other command's start) stays light."""
    loaded, out = loaded_after([command, "--help"])
    assert "Usage" in out
    assert loaded == [], f"`contextfold {command} --help` imported {loaded}"


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "CONTEXTFOLD_DB": str(tmp_path / "cf.db"), "COLUMNS": "200"}


def cf(env: dict[str, str], *args: str, expect: int = 0) -> str:
    proc = subprocess.run([sys.executable, "-m", "contextfold", *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


@pytest.mark.parametrize("command", ["project", "show", "sessions"])
def test_read_commands_load_no_importer_summariser_or_second_dialect(env, command):
    """`project`, `show` and `sessions` read and print: the file importers, the offline
    summariser (only a command that compacts checks the window against it), the search-text
    indexer, the planner and the PostgreSQL dialect stay unloaded on SQLite."""
    sid = json.loads(cf(env, "import", str(CC_SHORT), "--json"))["session_id"]
    watch = ("contextfold.formats.pi", "contextfold.formats.claude_code",
             "contextfold.summarize.extractive", "sqlalchemy.dialects.postgresql",
             "contextfold.store.recall.recall_index", "contextfold.core.recall.recall_text",
             "contextfold.core.planning.plan", "alembic")
    loaded, out = loaded_after([command, *([] if command == "sessions" else [sid])], env, watch)
    assert {"project": "tokens of", "show": "durable history", "sessions": sid}[command] in out
    assert loaded == []


def test_short_ids_are_git_like_unique_prefixes():
    pi_like = [f"d703a1a9-1b7b-4fb1-b512-c9738b1fe617-{n}" for n in (9, 10, 11, 944)]
    uuids = ["01a22fe1-e160-729e", "01a22fe1-aa6a-7456", "fac177dd-0000"]
    short = short_ids([*pi_like, *uuids])
    assert len(set(short.values())) == len(short)  # distinct on every row
    assert short["fac177dd-0000"] == "fac177dd"  # no longer than needed (8 at least)
    assert short["01a22fe1-e160-729e"] == "01a22fe1-e"
    for full, cut in short.items():
        head, _, tail = cut.partition("…")
        assert full.startswith(head) and full.endswith(tail) and len(head) >= 8
    # Pi's ids share 37 characters: the head and the distinct tail, short enough for 80
    # columns (issue 25 item 10)
    assert short[pi_like[0]] == "d703a1a9…-9" and short[pi_like[-1]] == "d703a1a9…-944"
    assert all(len(short[p]) <= 16 for p in pi_like)
    assert short_ids(["a", "ab"]) == {"a": "a", "ab": "ab"}  # shorter than 8: whole


def test_show_of_a_pi_session_prints_distinct_ids(env):
    """Pi v1 ids are `<session uuid>-<line>`: a fixed 8-character cut printed the same id on
    every row of `show` (seen on the real pi-mono session)."""
    sid = json.loads(cf(env, "import", str(PI), "--json"))["session_id"]
    nodes = json.loads(cf(env, "show", sid, "--tail", "30", "--json"))["nodes"]
    human = cf(env, "show", sid, "--tail", "30").splitlines()
    rows = [line.split()[0] for line in human if line.startswith("d703a1a9")]
    assert len(rows) >= 29 and len(set(rows)) == len(rows)
    labels = [r.partition("…") for r in rows]  # head…tail where the common head is long
    assert all(any(n["id"].startswith(h) and n["id"].endswith(t) for n in nodes)
               for h, _, t in labels)


def test_after_a_compaction_project_keeps_the_sessions_model(env):
    """Compacting the short Claude Code session keeps only its last user message: the
    branch then holds no assistant reply, and `project` fell back to the default model's
    window; it must use the model the checkpoint was fitted to (the session's)."""
    sid = json.loads(cf(env, "import", str(CC_SHORT), "--json"))["session_id"]
    first = json.loads(cf(env, "compact", sid, "--json"))
    assert first["status"] == "compacted" and first["model"] == "claude-opus-4-6"
    request = json.loads(cf(env, "project", sid, "--json"))
    assert not any(m["role"] == "assistant" for m in request["messages"])
    assert request["model"] == "claude-opus-4-6"
    row = json.loads(cf(env, "sessions", "--json"))["sessions"][0]
    assert row["model"] == "claude-opus-4-6"
    (line,) = [x for x in cf(env, "sessions").splitlines() if x.startswith(sid)]
    assert line.split()[5:7] == ["4", "1"]  # messages, checkpoints (the table's columns)
