"""The command line's read-only `sqlite3` snapshot (store/snapshot.py, issue 9's start-up).

`sessions`, `show` and `project` read an embedded SQLite store without importing
SQLAlchemy. They must print exactly what the full store path prints, on every kind of
session (imported Claude Code and Pi files, checkpoints, forks, pins, learned model limits,
damage), and give way to the full store on any state they were not built for (an older
schema, a hand-edited one, PostgreSQL, a missing file, an unknown session), whose output
and errors are then unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import contextfold.store as store_pkg
from contextfold.cli.app import app
from contextfold.core.values.messages import PinEvent
from contextfold.formats import import_file
from contextfold.store import open_store
from contextfold.store.snapshot import (
    SCHEMA_NAMES,
    SCHEMA_REVISION,
    SnapshotReader,
    SnapshotUnusable,
    sqlite_file,
)
from contextfold.store.sql.head import shipped_head
from contextfold.store.sql.rows import content_hash
from tests.builders import user
from tests.cli.test_cli_startup import loaded_after
from tests.store_fixtures import (
    checkpoint_for,
    drop_pg_schema,
    manual_plan,
    new_pg_schema,
    seed_session,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
IMPORTS = {
    "cc_short": FIXTURES / "claude-code/short.jsonl",
    "cc_tools": FIXTURES / "claude-code/tool_heavy.jsonl",
    "cc_after_compaction": FIXTURES / "claude-code-derived/after_compaction.jsonl",
    "pi": FIXTURES / "pi-mono/large-session.jsonl",
}
FORGED = '{"kind":"message","parts":[{"text":"forged","type":"text"}],"role":"user"}'


# ---------------------------------------------------------------------- the database


async def _build(path: Path) -> dict[str, str]:
    """One database holding every kind of session the reading commands must print."""
    store = await open_store(str(path))
    ids: dict[str, str] = {}
    try:
        for label, file in IMPORTS.items():
            result = import_file(file)
            info = await store.import_tree(result.nodes, result.leaf_id, title=file.name,
                                           metadata=result.metadata)
            ids[label] = info.id
        # A checkpoint with history before it, a pin after it, a fork off the branch and
        # the limits the chat learns (session metadata).
        sid = await seed_session(store, turns=5, tools=1)
        branch = await store.load_branch(sid)
        plan = manual_plan(branch)
        assert (await store.commit_checkpoint(plan, checkpoint_for(plan), session_id=sid)
                ).committed
        await store.append(sid, user("after the checkpoint"))
        await store.append_pin_event(sid, PinEvent(action="pin", pin_id="p1",
                                                   text="keep the port number 8080"))
        await store.update_session_metadata(sid, {"learned_context_windows": {"gpt-4o": 16000},
                                                  "model": "gpt-4o"})
        ids["checkpointed"] = sid
        full = await store.load_full_branch(sid)
        reply = next(n for n in full.nodes
                     if n.message is not None and n.message.role == "assistant"
                     and not n.message.tool_calls)
        fork = await store.fork(sid, reply.id, title="a fork")
        await store.append(fork.id, user("on the fork"))
        ids["fork"] = fork.id
        ids["empty"] = (await store.create_session(title="nothing yet")).id
        ids["damaged_history"] = await seed_session(store, turns=4, tools=0)
        branch = await store.load_branch(ids["damaged_history"])
        plan = manual_plan(branch)
        await store.commit_checkpoint(plan, checkpoint_for(plan),
                                      session_id=ids["damaged_history"])
        await store.append(ids["damaged_history"], user("after"))
        ids["damaged_tail"] = await seed_session(store, turns=2, tools=0)
    finally:
        await store.close()
    # Damage as an outsider makes it (raw SQL), the guard trigger put back afterwards so
    # the schema is the shipped one: a summarised node and a leaf rewritten.
    with sqlite3.connect(path) as raw:
        (guard,) = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'nodes_no_update'"
                               ).fetchone()
        raw.execute("DROP TRIGGER nodes_no_update")
        for label, pick in (("damaged_history", "first"), ("damaged_tail", "leaf")):
            tree, leaf = raw.execute("SELECT tree_id, leaf_id FROM sessions WHERE id = ?",
                                     (ids[label],)).fetchone()
            if pick == "leaf":
                node = leaf
            else:
                node = raw.execute("SELECT id FROM nodes WHERE tree_id = ? AND depth = 1",
                                   (tree,)).fetchone()[0]
            raw.execute("UPDATE nodes SET payload = ? WHERE tree_id = ? AND id = ?",
                        (FORGED, tree, node))
        raw.execute(guard)
    return ids


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("snapshot") / "cf.db"
    return path, asyncio.run(_build(path))


def invoke(args: list[str], db: Path | str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args, env={"CONTEXTFOLD_DB": str(db), "COLUMNS": "120"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def spy_on_open_store(patch: pytest.MonkeyPatch) -> list[str | None]:
    """Record the URL of every opening of the full store (the path the snapshot gives
    way to) while `patch` is active."""
    calls: list[str | None] = []
    real = store_pkg.open_store

    async def spy(url: str | None = None, **kwargs: Any) -> Any:
        calls.append(url)
        return await real(url, **kwargs)

    patch.setattr(store_pkg, "open_store", spy)
    return calls


def refuse(cls: Any, url: str | None) -> SnapshotReader:
    raise SnapshotUnusable("forced by the test: the full store reads")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    return spy_on_open_store(monkeypatch)


def both_ways(args: list[str], db: Path | str, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[tuple[int, str, str], tuple[int, str, str], int]:
    """(the result as shipped, the result with the snapshot refused, how often the run as
    shipped opened the full store)."""
    with monkeypatch.context() as patch:
        calls = spy_on_open_store(patch)
        enabled = invoke(args, db)
    with monkeypatch.context() as patch:
        patch.setattr(SnapshotReader, "open", classmethod(refuse))
        full = invoke(args, db)
    return enabled, full, len(calls)


# ---------------------------------------------------------------------- equivalence

SESSION_COMMANDS = [
    ["show", "{sid}"], ["show", "{sid}", "--json"], ["show", "{sid}", "--tail", "3"],
    ["show", "{sid}", "--tail", "2", "--json"], ["show", "{sid}", "--tail", "0"],
    ["project", "{sid}"], ["project", "{sid}", "--json"],
    ["project", "{sid}", "--format", "anthropic", "--json"],
    ["project", "{sid}", "--context-window", "1000", "--json"],
    ["project", "{sid}", "--model", "gpt-4o"],
]
LABELS = [*IMPORTS, "checkpointed", "fork", "empty", "damaged_history", "damaged_tail"]


@pytest.mark.parametrize("label", LABELS)
def test_show_and_project_print_what_the_full_store_prints(database, label, monkeypatch):
    path, ids = database
    for template in SESSION_COMMANDS:
        args = [part.format(sid=ids[label]) for part in template]
        enabled, full, opens = both_ways(args, path, monkeypatch)
        assert enabled == full, args
        assert opens == 0, f"{args}: the snapshot gave way to the full store"


def test_sessions_prints_what_the_full_store_prints(database, monkeypatch):
    path, ids = database
    for args in (["sessions"], ["sessions", "--json"], ["sessions", "--limit", "3"],
                 ["sessions", "--limit", "3", "--json"], ["sessions", "--limit", "0"]):
        enabled, full, opens = both_ways(args, path, monkeypatch)
        assert enabled == full and opens == 0
    listed = json.loads(invoke(["sessions", "--json"], path)[1])["sessions"]
    assert {row["session_id"] for row in listed} == set(ids.values())
    by_id = {row["session_id"]: row for row in listed}
    assert by_id[ids["damaged_history"]]["read_only"] is True  # D2 seen by the snapshot too
    assert by_id[ids["checkpointed"]]["checkpoints"] == 1


def test_sessions_reads_only_the_newest_page(database, monkeypatch):
    """`contextfold sessions --limit N`: the newest N, listed oldest first as the whole list
    is, with `more` saying that older ones were left out; damage still seen (D2)."""
    path, ids = database
    every = json.loads(invoke(["sessions", "--limit", "0", "--json"], path)[1])
    assert every["more"] is False and len(every["sessions"]) == len(ids)
    created = [row["created_at"] for row in every["sessions"]]
    assert created == sorted(created)
    page = json.loads(invoke(["sessions", "--limit", "3", "--json"], path)[1])
    assert page["more"] is True
    assert page["sessions"] == every["sessions"][-3:]
    whole = json.loads(invoke(["sessions", "--limit", str(len(ids)), "--json"], path)[1])
    assert whole == every
    text = invoke(["sessions", "--limit", "3"], path)[1]
    assert "--limit 0" in text  # says how to see the rest


def test_the_database_covers_what_the_commands_compute(database):
    """The fixture is worth comparing on: pages, forks, pins, a checkpoint, damage."""
    path, ids = database
    shown = json.loads(invoke(["show", ids["checkpointed"], "--tail", "3", "--json"], path)[1])
    assert shown["page"] == {"last": 3, "complete": False}
    assert any(n["kind"] == "pin" for n in shown["nodes"])
    forked = json.loads(invoke(["show", ids["fork"], "--tail", "3", "--json"], path)[1])
    assert any(not n["on_branch"] for n in forked["nodes"])  # another line starts on the page
    project = json.loads(invoke(["project", ids["checkpointed"], "--json"], path)[1])
    assert "8080" in json.dumps(project["messages"])  # the pin reaches the model
    assert invoke(["project", ids["damaged_tail"], "--json"], path)[0] == 2
    damaged = json.loads(invoke(["show", ids["damaged_history"], "--json"], path)[1])
    assert damaged["read_only"] and damaged["problems"]


# ---------------------------------------------------------------------- giving way


def _copy(database: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    with sqlite3.connect(database[0]) as source, sqlite3.connect(target) as dest:
        source.backup(dest)
    return target


@pytest.mark.parametrize("edit", [
    "DROP TRIGGER nodes_no_delete",
    "DROP TABLE mirror_index",
    "CREATE INDEX ix_extra ON nodes (kind)",
    "DROP TABLE nodes",
    "UPDATE alembic_version SET version_num = 'ffff'",
])
def test_a_hand_edited_database_is_read_by_the_full_store(database, tmp_path, edit,
                                                          monkeypatch):
    path = _copy(database, tmp_path)
    sid = database[1]["cc_short"]
    with sqlite3.connect(path) as raw:
        raw.execute(edit)
    with pytest.raises(SnapshotUnusable):
        SnapshotReader.open(str(path))
    for args in (["project", sid, "--json"], ["show", sid], ["sessions"]):
        enabled, full, opens = both_ways(args, path, monkeypatch)
        assert enabled == full, args  # the full store's output and errors, unchanged
        assert opens == 1


def test_an_older_schema_is_migrated_by_the_full_store(database, tmp_path, opened):
    from contextfold.store.sql.engine import create_engine
    from contextfold.store.sql.migrate import downgrade

    path = _copy(database, tmp_path)
    sid = database[1]["cc_short"]
    expected = invoke(["project", sid, "--json"], database[0])

    async def step_back() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        await downgrade(engine, "0004")
        await engine.dispose()

    asyncio.run(step_back())
    with pytest.raises(SnapshotUnusable, match="0004"):
        SnapshotReader.open(str(path))
    assert invoke(["project", sid, "--json"], path) == expected
    assert opened == [str(path)]
    with sqlite3.connect(path) as raw:  # the full store migrated it, as always
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (SCHEMA_REVISION,)]
    assert invoke(["project", sid, "--json"], path) == expected
    assert opened == [str(path)]  # now at head: the snapshot serves it


def test_an_unknown_session_gets_the_full_stores_error(database, monkeypatch):
    path, _ = database
    for args in (["project", "no-such-session"], ["show", "no-such", "--json"]):
        enabled, full, opens = both_ways(args, path, monkeypatch)
        assert enabled == full and enabled[0] == 2 and opens == 1
    assert "contextfold sessions" in invoke(["project", "nope"], path)[2]


def test_a_missing_file_is_created_by_the_full_store(tmp_path, opened):
    path = tmp_path / "new.db"
    assert invoke(["sessions", "--json"], path) == (0, '{"sessions": [], "more": false}\n', "")
    assert opened == [str(path)] and path.is_file()


def test_postgresql_is_read_by_the_full_store(monkeypatch):
    url = new_pg_schema()
    try:
        assert sqlite_file(url) is None
        enabled, full, opens = both_ways(["sessions", "--json"], url, monkeypatch)
        assert enabled == full == (0, '{"sessions": [], "more": false}\n', "") and opens == 1
        unreachable = "postgresql://postgres@127.0.0.1:1/test"
        enabled, full, opens = both_ways(["sessions"], unreachable, monkeypatch)
        assert enabled == full and enabled[0] == 2 and opens == 1
        assert "cannot open the database" in enabled[2]
    finally:
        drop_pg_schema(url)


@pytest.mark.parametrize(("url", "path"), [
    ("/tmp/x/cf.db", Path("/tmp/x/cf.db")),
    ("sqlite:////tmp/x/cf.db", Path("/tmp/x/cf.db")),
    ("sqlite:///tmp/x/cf.db?mode=ro", None),
    ("sqlite+aiosqlite:////tmp/x/cf.db", None),
    ("sqlite:///:memory:", Path(":memory:").resolve()),
    ("postgresql://u:secret@h/db", None),
])
def test_only_plain_sqlite_files_are_snapshotted(url, path):
    assert sqlite_file(url) == path


# ---------------------------------------------------------------------- guarantees


def test_the_pinned_schema_is_what_the_migrations_create(tmp_path):
    """A new migration must update the snapshot's schema (else it gives way everywhere)."""
    path = tmp_path / "fresh.db"
    assert invoke(["sessions"], path)[0] == 0
    with sqlite3.connect(path) as raw:
        names = {tuple(r) for r in raw.execute("SELECT type, name FROM sqlite_master")}
    assert names == SCHEMA_NAMES
    assert shipped_head() == SCHEMA_REVISION


def test_the_snapshot_cannot_write(database):
    reader = SnapshotReader.open(str(database[0]))
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader._conn.execute("DELETE FROM compaction_leases")
    finally:
        reader.close()


def test_the_snapshot_checks_hashes_like_the_store(database):
    """The loading rules are shared: a row whose content hash does not match is damage."""
    path, ids = database
    reader = SnapshotReader.open(str(path))
    try:
        branch = asyncio.run(reader.load_branch(ids["damaged_tail"]))
        row = reader._all("SELECT * FROM nodes WHERE payload = ?", (FORGED,))[0]
    finally:
        reader.close()
    assert not hasattr(branch, "nodes") and branch.problems
    assert content_hash(row["id"], row["parent_id"], row["created_at"], FORGED) != \
        row["content_hash"]


@pytest.mark.parametrize("command", ["project", "show", "sessions"])
def test_reading_commands_on_sqlite_never_import_sqlalchemy(tmp_path, command):
    """Nor asyncio: the snapshot's reads finish without an event loop (issue 9, start-up)."""
    import os

    env = {**os.environ, "CONTEXTFOLD_DB": str(tmp_path / "cf.db")}
    loaded, out = loaded_after(["import", str(IMPORTS["cc_short"]), "--json"], env,
                               ("sqlalchemy",))
    sid = json.loads(out.splitlines()[0])["session_id"]
    args = [command] if command == "sessions" else [command, sid]
    loaded, out = loaded_after(args, env, ("sqlalchemy", "aiosqlite", "alembic", "psycopg",
                                           "asyncio"))
    assert {"project": "tokens of", "show": "durable history", "sessions": sid}[command] in out
    assert loaded == [], f"`contextfold {command}` imported {loaded}"


def test_reads_run_without_an_event_loop_and_give_way_when_they_wait(database, opened):
    """The snapshot's reads finish in one step (no event loop); reads that await anything
    else are not half-served: the full store runs them again, under asyncio."""
    from contextfold.store.snapshot import read_only_store

    path, ids = database
    sid = ids["cc_short"]
    seen: list[str] = []

    async def plain(store: Any) -> int:
        seen.append(type(store).__name__)
        return len((await store.load_full_branch(sid)).nodes)

    async def waits(store: Any) -> int:
        seen.append(type(store).__name__)
        await asyncio.sleep(0)  # a step that yields: only an event loop may run it
        return len((await store.load_full_branch(sid)).nodes)

    async def needs_a_loop(store: Any) -> int:
        seen.append(type(store).__name__)
        await asyncio.sleep(0.001)  # asks for the running loop: none in the first step
        return len((await store.load_full_branch(sid)).nodes)

    count = read_only_store(str(path), plain)
    assert seen == ["SnapshotReader"] and opened == []
    for reads in (waits, needs_a_loop):
        seen.clear()
        opened.clear()
        assert read_only_store(str(path), reads) == count > 0
        assert seen[0] == "SnapshotReader" and seen[1] != "SnapshotReader" and len(seen) == 2
        assert opened == [str(path)]
