"""The SQLite one-hop adapter (`store/sqlite/sqlite_hops.py`) fails soft: when SQLAlchemy's or
aiosqlite's private classes are missing or renamed, or `$CONTEXTFOLD_SQLITE_ONE_HOP=0` turns
it off, every connection keeps SQLAlchemy's ordinary cursor, one log line says why, and the
store works the same. `make test` also runs the store suite once with it off."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_connection

from contextfold.core.values.messages import text_message
from contextfold.store import open_store
from contextfold.store.sql_store import SqlSessionStore
from contextfold.store.sqlite import sqlite_hops


@pytest.fixture
def fresh_adapter() -> Iterator[None]:
    """The adapter built again for the test, and again after it (it is built once a process)."""
    sqlite_hops.adapter.cache_clear()
    sqlite_hops._told_off.cache_clear()
    yield
    sqlite_hops.adapter.cache_clear()
    sqlite_hops._told_off.cache_clear()


async def connection_class(store: SqlSessionStore) -> type:
    async with store.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        return type(raw.dbapi_connection)


async def round_trip(store: SqlSessionStore) -> list[str]:
    """A session written and read back through the paths the adapter changes: a write
    transaction, a remembered append (`single_write`) and point reads (`single_read`)."""
    sid = (await store.create_session(title="s")).id
    for i in range(3):
        await store.append(sid, text_message("user", f"question {i}"))
        await store.append(sid, text_message("assistant", f"answer {i}"))
    branch = await store.load_branch(sid)
    return [node.payload.parts[0].text for node in branch.nodes]  # type: ignore[union-attr]


EXPECTED = [f"{who} {i}" for i in range(3) for who in ("question", "answer")]


async def test_the_fast_path_is_on_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              fresh_adapter: None) -> None:
    # What the fallback tests compare with: here the installed versions fit the adapter.
    monkeypatch.delenv(sqlite_hops.ENV_VAR, raising=False)
    if sqlite_hops.adapter() is None:
        pytest.skip("the installed SQLAlchemy / aiosqlite do not fit the adapter")
    store = await open_store(f"sqlite:///{tmp_path / 'on.db'}")
    try:
        assert await connection_class(store) is sqlite_hops.adapter().connection
        assert await round_trip(store) == EXPECTED
    finally:
        await store.close()


async def test_the_environment_variable_turns_it_off_with_one_log_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        fresh_adapter: None) -> None:
    monkeypatch.setenv(sqlite_hops.ENV_VAR, "0")
    caplog.set_level(logging.INFO, logger=sqlite_hops.__name__)
    store = await open_store(f"sqlite:///{tmp_path / 'off.db'}")
    try:
        assert await connection_class(store) is AsyncAdapt_aiosqlite_connection
        assert await round_trip(store) == EXPECTED
    finally:
        await store.close()
    said = [r.getMessage() for r in caplog.records if r.name == sqlite_hops.__name__]
    assert len(said) == 1 and sqlite_hops.ENV_VAR in said[0]


async def test_renamed_internals_fall_back_with_one_log_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        fresh_adapter: None) -> None:
    # A SQLAlchemy release whose aiosqlite dialect renamed its cursor class.
    real = sys.modules["sqlalchemy.dialects.sqlite.aiosqlite"]
    renamed = types.ModuleType(real.__name__)
    renamed.AsyncAdapt_aiosqlite_connection = AsyncAdapt_aiosqlite_connection  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, real.__name__, renamed)
    monkeypatch.delenv(sqlite_hops.ENV_VAR, raising=False)
    caplog.set_level(logging.INFO, logger=sqlite_hops.__name__)
    assert sqlite_hops.adapter() is None and not sqlite_hops.enabled()
    monkeypatch.setitem(sys.modules, real.__name__, real)  # the engine needs the real dialect
    store = await open_store(f"sqlite:///{tmp_path / 'renamed.db'}")
    try:
        assert await connection_class(store) is AsyncAdapt_aiosqlite_connection
        assert await round_trip(store) == EXPECTED
    finally:
        await store.close()
    said = [r for r in caplog.records if r.name == sqlite_hops.__name__]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "AsyncAdapt_aiosqlite_cursor" in said[0].getMessage()


async def test_changed_driver_internals_fall_back(
        monkeypatch: pytest.MonkeyPatch, fresh_adapter: None) -> None:
    # An aiosqlite release without the `_execute` hand-off the adapter calls.
    import aiosqlite

    monkeypatch.delattr(aiosqlite.Connection, "_execute")
    assert sqlite_hops.adapter() is None
