"""What a new user hits first with the `contextfold` command (issue 9): quick start, exact
errors with the right exit codes, output that shows what matters, a busy session that says so.

Every command runs in a subprocess, as a user runs it, on a fresh SQLite file per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
CC_LONG = FIXTURES / "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl"
CC_SHORT = FIXTURES / "claude-code/short.jsonl"
CC_AFTER_COMPACTION = FIXTURES / "claude-code-derived/after_compaction.jsonl"
HEAVY = ("openai", "anthropic", "sqlalchemy", "alembic", "matplotlib", "aiosqlite", "psycopg")


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "CONTEXTFOLD_DB": str(tmp_path / "cf.db"), "COLUMNS": "200"}


@pytest.fixture
def cf(env):
    def run(*args: str, expect: int | None = 0, extra_env: dict | None = None
            ) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "contextfold", *args], capture_output=True,
                              text=True, env={**env, **(extra_env or {})}, timeout=300)
        if expect is not None:
            assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


def as_json(proc: subprocess.CompletedProcess) -> dict:
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


# ------------------------------------------------------------------ start-up


def test_help_imports_no_provider_sdk_database_or_plotting_library():
    code = ("import sys\nfrom contextfold.cli import app\nsys.argv = ['contextfold', '--help']\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "Usage" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []", proc.stdout


@pytest.mark.parametrize(("command", "loaded"), [
    ("project", "[]"),  # the read-only sqlite3 snapshot (docs/store.md)
    ("verify", "['aiosqlite', 'sqlalchemy']"),  # the full store, without Alembic
])
def test_reads_on_an_up_to_date_database_need_no_alembic_or_sdk(cf, env, command, loaded):
    sid = _imported(cf, CC_SHORT)
    code = ("import sys\nfrom contextfold.cli import app\n"
            f"sys.argv = ['contextfold', {command!r}, {sid!r}]\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.stdout.strip().splitlines()[-1] == f"LOADED {loaded}", \
        proc.stdout + proc.stderr


def test_the_quick_migration_check_agrees_with_alembic():
    from contextfold.store.sql.migrate import head_revision, shipped_head

    assert shipped_head() == head_revision()


def test_every_command_has_help_without_the_extras(cf):
    for command in ("import", "sessions", "compact", "project", "show", "replay", "demo",
                    "chat"):
        assert "Usage" in cf(command, "--help").stdout


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("window", ["0", "300", "1000"])
def test_too_small_context_window_is_bad_input_naming_the_smallest(cf, window):
    proc = cf("replay", str(CC_SHORT), "--context-window", window, "--json", expect=2)
    error = as_json(proc)["error"]
    assert "smallest window that works is" in error or "positive" in error
    assert "pydantic" not in error and "validation error" not in error
    human = cf("replay", str(CC_SHORT), "--context-window", window, expect=2)
    assert human.stderr.startswith("error: ") and "Traceback" not in human.stderr


def test_the_smallest_window_named_works_and_one_less_does_not(cf):
    error = as_json(cf("replay", str(CC_SHORT), "--context-window", "1000", "--json",
                       expect=2))["error"]
    smallest = int(error.split("smallest window that works is ")[1].split()[0]
                   .replace(",", ""))
    ok = as_json(cf("replay", str(CC_SHORT), "--context-window", str(smallest), "--overhead",
                    "0", "--json"))
    assert ok["invalid_tool_sequences"] == 0 and ok["dropped_messages"] == 0
    cf("replay", str(CC_SHORT), "--context-window", str(smallest - 1), expect=2)
    # A long history on a tiny window: it fits, or it is bad input saying what to change;
    # never an internal error (exit 1).
    tight = cf("replay", str(CC_LONG), "--context-window", str(smallest), "--overhead", "0",
               "--json", expect=None)
    assert tight.returncode in (0, 2), tight.stdout
    if tight.returncode == 2:
        assert "--context-window" in as_json(tight)["error"]
    else:
        assert as_json(tight)["invalid_tool_sequences"] == 0


def test_plot_to_a_missing_folder_fails_before_replaying(cf, tmp_path):
    # The session file does not exist either: the plot target is checked first.
    proc = cf("replay", str(tmp_path / "no-such.jsonl"), "--plot",
              str(tmp_path / "missing" / "r.png"), "--json", expect=2)
    assert "--plot" in as_json(proc)["error"] and "does not exist" in as_json(proc)["error"]


def test_db_before_the_command_works_like_after_it(cf, env, tmp_path):
    """`contextfold --db X sessions` (like `git -C`) was "No such option: --db"; the
    command's own --db still wins over it."""
    other = str(tmp_path / "other.db")
    sid = as_json(cf("--db", other, "import", str(CC_SHORT), "--json"))["session_id"]
    listed = as_json(cf("--db", other, "sessions", "--json"))["sessions"]
    assert [s["session_id"] for s in listed] == [sid]
    assert as_json(cf("sessions", "--json"))["sessions"] == []  # $CONTEXTFOLD_DB untouched
    assert as_json(cf("--db", other, "sessions", "--db", env["CONTEXTFOLD_DB"], "--json")
                   )["sessions"] == []
    error = as_json(cf("--db", str(tmp_path), "sessions", "--json", expect=2))["error"]
    assert "is a directory" in error


def test_unknown_session_names_the_id_the_database_and_how_to_list(cf, env):  # D2
    """The same text serves the CLI and the library: the id, which database was searched
    (users with two databases pick the wrong one), the command that lists it, and that an
    id may be shortened; no Python call in a command-line message (issue 41)."""
    for command in ("show", "project", "compact", "context"):
        error = as_json(cf(command, "no-such-session", "--json", expect=2))["error"]
        assert "'no-such-session'" in error and env["CONTEXTFOLD_DB"] in error
        assert f"`contextfold sessions --db {env['CONTEXTFOLD_DB']}`" in error
        assert "unique prefix" in error and "latest" in error
        assert "Python" not in error and "await" not in error
    human = cf("project", "no-such-session", expect=2)
    assert human.stderr.startswith("error: no session 'no-such-session' in the database ")


# ------------------------------------------------------------------ replay


def test_replay_of_a_file_beginning_with_a_recorded_compaction_starts_from_its_summary(cf):
    report = as_json(cf("replay", str(CC_AFTER_COMPACTION), "--json"))
    assert report["started_from_checkpoint"] is True
    assert report["invalid_tool_sequences"] == 0 and report["invalid_requests"] == []
    assert report["dropped_messages"] == 0 and report["requests"] > 40


def test_replay_counts_the_agents_fixed_overhead(cf):
    derived = as_json(cf("replay", str(CC_LONG), "--context-window", "60000", "--json"))
    # Claude Code's system prompt and tools: tens of thousands of tokens.
    assert derived["overhead_source"] == "first recorded usage"
    assert 10_000 < derived["overhead_tokens"] < 40_000
    assert derived["over_limit_requests"] == 0 and derived["invalid_tool_sequences"] == 0
    given = as_json(cf("replay", str(CC_LONG), "--context-window", "60000", "--overhead",
                       "5000", "--json"))
    assert given["overhead_source"] == "--overhead" and given["overhead_tokens"] == 5000
    # More overhead leaves less room for the session: it must compact more often.
    assert derived["compactions"] > given["compactions"]
    assert derived["max_projected_tokens"] <= derived["safe_input_limit"]


def test_replay_human_output_explains_overhead_estimate_and_invalid_requests(cf):
    out = cf("replay", str(CC_AFTER_COMPACTION)).stdout
    assert "starting checkpoint" in out
    assert "fixed overhead" in out and "first recorded usage" in out
    assert "1.00 = exact" in out and "estimate was low in" in out


def test_replay_compaction_table_says_its_tokens_exclude_the_overhead(cf):
    """The headline's max projected tokens include the agent's fixed overhead; the
    compaction rows count messages only (seen on a real Claude Code session at 64k, where
    "28,974 → 5,478" sat under a 48,000 safe limit and read as a needless compaction)."""
    out = " ".join(cf("replay", str(CC_LONG), "--context-window", "64000").stdout.split())
    assert "compactions: what stayed raw (message tokens, without the" in out
    assert "-token overhead)" in out


def test_long_replay_shows_progress_on_stderr_of_a_terminal(cf):
    proc = cf("replay", str(CC_LONG), "--json",
              extra_env={"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"})
    assert "replaying" in proc.stderr
    assert as_json(proc)["requests"] > 0  # stdout still holds exactly the JSON document
    quiet = cf("replay", str(CC_LONG), "--json")  # not a terminal: quiet
    assert quiet.stderr == ""


# ------------------------------------------------------------------ human output


def _imported(cf, path: Path = CC_LONG) -> str:
    return as_json(cf("import", str(path), "--json"))["session_id"]


def test_compact_says_model_window_and_why_nothing_stayed_raw(cf, tmp_path):  # K3
    long_reply = " ".join(f"finding{i}" for i in range(3000))  # larger than the tail budget
    chat = [{"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": long_reply}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat))
    sid = as_json(cf("import", str(path), "--json"))["session_id"]
    done = as_json(cf("compact", sid, "--model", "gpt-4o", "--context-window", "16000",
                      "--json"))
    assert done["status"] == "compacted"
    assert done["model"] == "gpt-4o" and done["context_window"] == 16000
    assert done["kept_messages"] == 0 and "tail budget" in done["why_none_kept"]
    human = cf("compact", _imported(cf, CC_SHORT), "--model", "gpt-4o", "--context-window",
               "16000").stdout
    assert "gpt-4o (16,000-token window)" in human
    # The sizes are numbers, never an unformatted template.
    assert "{" not in human and re.search(r"~[\d,]+ → ~[\d,]+ tokens", human), human


def test_sessions_show_dates_message_counts_and_model(cf):
    sid = _imported(cf)
    row = as_json(cf("sessions", "--json"))["sessions"][0]
    assert row["session_id"] == sid
    assert row["messages"] == 306 and row["checkpoints"] == 1
    assert row["model"] == "claude-opus-4-6"
    assert row["first_message_at"].startswith("2026-") and \
        row["first_message_at"] < row["last_message_at"]
    human = cf("sessions").stdout
    (line,) = [x for x in human.splitlines() if x.startswith(sid)]
    assert " 306 " in line and "claude-opus-4-6" in line
    assert row["first_message_at"][:16].replace("T", " ") in line
    assert row["last_message_at"][:16].replace("T", " ") in line


def test_project_prints_the_whole_checkpoint(cf):
    sid = _imported(cf)
    cf("compact", sid)
    request = as_json(cf("project", sid, "--json"))
    summary = request["messages"][0]["content"]
    assert "## Critical Context" in summary
    human = cf("project", sid).stdout
    for line in summary.splitlines():
        assert line in human


def test_show_prints_the_newest_nodes_by_default(cf):
    sid = _imported(cf)
    nodes = as_json(cf("show", sid, "--json"))["nodes"]
    human = cf("show", sid, "--tail", "5").stdout
    assert nodes[-1]["id"][:8] in human and nodes[0]["id"][:8] not in human
    assert "older nodes not shown" in human
    everything = cf("show", sid, "--last", "0").stdout
    assert nodes[0]["id"][:8] in everything and "older nodes" not in everything


def test_tool_call_only_messages_show_their_calls(cf):
    sid = _imported(cf)
    human = cf("project", sid).stdout
    assert "assistant None" not in human and "→ " in human


def test_a_blank_text_before_tool_calls_shows_the_calls():
    """Claude Code writes "\n\n" as the text of a message that thinks and calls tools:
    `show` printed an empty line for it."""
    from contextfold.cli.render import preview
    from contextfold.core.values.messages import (
        Message,
        Node,
        ReasoningPart,
        TextPart,
        ToolCallPart,
    )

    msg = Message(role="assistant", parts=(
        TextPart(text="\n\n"), ReasoningPart(text="look at the file"),
        ToolCallPart(id="c1", name="Read", input={"file_path": "assets/js/app.js"})))
    line = preview(Node(id="n1", payload=msg)).plain
    assert line.startswith("assistant Read(") and "assets/js/app.js" in line


# ------------------------------------------------------------------ busy


def test_second_compact_while_another_compacts_is_busy_then_waits(cf, env):  # U4
    from contextfold.store import open_store

    sid = _imported(cf)

    async def scenario() -> None:
        store = await open_store(env["CONTEXTFOLD_DB"])
        try:
            async with store.compaction_lease(sid):
                busy = cf("compact", sid, "--json", expect=3)
                assert as_json(busy)["status"] == "busy" and as_json(busy)["reason"]
                waiting = subprocess.Popen(
                    [sys.executable, "-m", "contextfold", "compact", sid, "--wait", "--json"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                await asyncio.sleep(3)
                assert waiting.poll() is None  # still waiting for the lease
            out, err = waiting.communicate(timeout=120)
            assert waiting.returncode == 0, err
            assert json.loads(out)["status"] == "compacted"
        finally:
            await store.close()

    started = time.monotonic()
    asyncio.run(scenario())
    assert time.monotonic() - started < 200
