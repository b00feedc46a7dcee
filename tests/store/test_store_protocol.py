"""`SessionStore` is the store's whole surface: `SqlSessionStore` implements it signature for
signature, the CLI's snapshot its read-only part (`SessionReader`), replay's in-memory store
what the compaction path needs (`CompactionStore`); every method of it has a caller outside
the store or is documented (docs/store.md): no dead surface."""

from __future__ import annotations

import ast
import functools
import inspect
import re
import types
import typing
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, Self, Union, get_args, get_origin

import pytest

import contextfold
from contextfold.core.planning.plan import Plan
from contextfold.core.recall.recall_text import SearchQuery
from contextfold.store import SessionStore, SqlSessionStore, open_store
from contextfold.store.memory import MemoryStore
from contextfold.store.protocol import BranchReader, CompactionStore, SessionReader
from contextfold.store.snapshot import SnapshotReader
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

PACKAGE = Path(contextfold.__file__).parent
DOCS = PACKAGE.parent.parent / "docs" / "store.md"
# Names the store modules import only for type checkers.
HINT_NAMES = {"Plan": Plan, "SearchQuery": SearchQuery, "Self": Self}
# A context manager made by `asynccontextmanager` is annotated with its generator's type;
# what it returns is checked on a real store below instead.
CONTEXT_MANAGERS = {"compaction_lease"}


def members(protocol: type) -> list[str]:
    """The methods a protocol declares, its protocol bases' included."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (Protocol, typing.Generic, object) or not getattr(cls, "_is_protocol", False):
            continue
        names.update(n for n in vars(cls) if not n.startswith("_"))
    return sorted(names)


def _alternatives(hint: Any) -> tuple[Any, ...]:
    return get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)


def covers(wide: Any, narrow: Any) -> bool:
    """Every type `narrow` admits, `wide` admits (unions by their members, classes by
    subclassing, anything else by equality)."""
    return all(any(n == w or (isinstance(n, type) and isinstance(w, type) and issubclass(n, w))
                   for w in _alternatives(wide)) for n in _alternatives(narrow))


def mismatches(impl: type, protocol: type) -> list[str]:
    """How `impl` fails to implement `protocol`: missing methods, sync/async, parameter
    names, kinds, defaults and types (an argument the protocol allows must be accepted),
    return types (what the implementation returns must be what the protocol promises)."""
    problems: list[str] = []
    for name in members(protocol):
        expected, actual = getattr(protocol, name), getattr(impl, name, None)
        if actual is None:
            problems.append(f"{name}: missing")
            continue
        if inspect.iscoroutinefunction(expected) != inspect.iscoroutinefunction(actual):
            problems.append(f"{name}: async in one, not in the other")
        want, got = inspect.signature(expected), inspect.signature(actual)
        want_hints = typing.get_type_hints(expected, localns=HINT_NAMES)
        got_hints = typing.get_type_hints(actual, localns=HINT_NAMES)
        for param in list(want.parameters.values())[1:]:
            other = got.parameters.get(param.name)
            if other is None:
                problems.append(f"{name}({param.name}): missing")
                continue
            if other.kind != param.kind:
                problems.append(f"{name}({param.name}): {other.kind}, not {param.kind}")
            if param.default is not param.empty and other.default != param.default:
                problems.append(f"{name}({param.name}): default {other.default!r}, not "
                                f"{param.default!r}")
            if not covers(got_hints[param.name], want_hints[param.name]):
                problems.append(f"{name}({param.name}): takes {got_hints[param.name]}, not "
                                f"all of {want_hints[param.name]}")
        for other in list(got.parameters.values())[1:]:
            if other.name not in want.parameters and other.default is other.empty and \
                    other.kind not in (other.VAR_POSITIONAL, other.VAR_KEYWORD):
                problems.append(f"{name}({other.name}): required, unknown to the protocol")
        if name not in CONTEXT_MANAGERS and \
                not covers(want_hints["return"], got_hints["return"]):
            problems.append(f"{name}: returns {got_hints['return']}, not "
                            f"{want_hints['return']}")
    return problems


def test_the_checker_finds_what_breaks_a_protocol() -> None:
    # The check can fail: a missing method, a renamed or extra required parameter, a
    # narrower argument type and a wider return are each reported.
    class Reads(Protocol):
        async def get(self, key: str, *, limit: int = 10) -> int | None: ...
        async def gone(self) -> None: ...

    class Wrong:
        async def get(self, name: str | bytes, extra: int, *, limit: int = 5) -> int | str:
            return 0

    found = mismatches(Wrong, Reads)
    assert "gone: missing" in found
    assert "get(key): missing" in found and "get(limit): default 5, not 10" in found
    assert "get(extra): required, unknown to the protocol" in found
    assert any(p.startswith("get: returns") for p in found)

    class Right:
        async def get(self, key: str | bytes, *, limit: int = 10, more: bool = False) -> int:
            return 0

        async def gone(self) -> None:
            return None

    assert mismatches(Right, Reads) == []


def test_the_sql_store_implements_the_protocol() -> None:
    assert mismatches(SqlSessionStore, SessionStore) == []


def test_the_snapshot_implements_the_read_only_protocol() -> None:
    # `contextfold sessions`, `show` and `project` run their reads on either (store.md).
    assert mismatches(SnapshotReader, SessionReader) == []
    assert set(members(SessionReader)) < set(members(SessionStore))


def test_the_memory_store_implements_the_compaction_path() -> None:  # C1-C3
    # Replay runs the one compaction path over it (runtime.compaction, store/memory.py).
    assert mismatches(MemoryStore, CompactionStore) == []
    assert set(members(BranchReader)) < set(members(CompactionStore)) < set(
        members(SessionStore))


async def test_an_open_store_is_a_session_store_and_leases_as_one(db_url) -> None:  # noqa: F811
    # U4 across processes: the lease is an async context manager on either database.
    async with await open_store(db_url) as store:
        assert isinstance(store, SessionStore) and isinstance(store, SessionReader)
        assert isinstance(store.for_tenant("t1"), SessionStore)
        session = await store.create_session(title="leased")
        lease = store.compaction_lease(session.id, ttl=5)
        assert isinstance(lease, AbstractAsyncContextManager)
        async with lease:
            assert await store.lease_holder(session.id) is not None
        assert await store.lease_holder(session.id) is None


@functools.cache
def _attributes_used_outside_the_store() -> set[str]:
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
    return used


@pytest.mark.parametrize("name", members(SessionStore))
def test_every_protocol_method_is_used_or_documented(name: str) -> None:
    documented = set(re.findall(r"`(?:store\.)?(\w+)\(", DOCS.read_text(encoding="utf-8")))
    assert name in _attributes_used_outside_the_store() or name in documented, (
        f"SessionStore.{name} has no caller outside the store and is not in docs/store.md")
