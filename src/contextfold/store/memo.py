"""What one store instance already knows, so that a steady append reads nothing again
(issue 26): the bookkeeping columns of nodes, their recall places, the session rows as last
read or written here, and the mirror index rows already checked against their nodes.

Nodes, recall rows and index rows are never updated (append-only, enforced by triggers), so
what was read or written once stays true. A session row is different: another writer may
move its leaf. A remembered row is therefore only a guess, and every write that starts from
one proves it in the statement that moves the leaf (guarded by the remembered leaf,
revision and read-only flag); when the guard fails, the transaction is rolled back and run
again from the real row (`StaleMemo`). Bounded LRU maps: a long-running worker does not grow.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
_SIZE = 4096


class StaleMemo(Exception):
    """A remembered session row was not the stored one (another writer moved the leaf):
    the write is rolled back and run again from the real row."""


class Lru(Generic[K, V]):
    """A small bounded map, least recently used first out."""

    def __init__(self, size: int = _SIZE) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._size = size

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)


class KnownRow(dict[str, Any]):
    """A session row taken from the memo rather than read under the lock: the leaf move
    that ends the write must prove it (see `StoreBase._move_leaf`)."""


# The columns of a node that an append needs from its parent (no payload).
NODE_META = ("id", "parent_id", "kind", "role", "depth", "latest_checkpoint_id",
             "first_kept_id", "content_hash", "chain_hash")


class WriteMemo:
    """The memo maps of one store instance (shared by its tenant-scoped copies)."""

    def __init__(self) -> None:
        self.nodes: Lru[tuple[str, str], dict[str, Any]] = Lru()
        self.places: Lru[tuple[str, str], Any] = Lru()  # recall_index.Place
        self.rows: Lru[str, dict[str, Any]] = Lru()
        self.hits: Lru[tuple[str, str, str, str], bool] = Lru()  # (tree, hash, node, message)

    def remember_node(self, tree_id: str, meta: Mapping[str, Any]) -> None:
        self.nodes.put((tree_id, meta["id"]), {k: meta[k] for k in NODE_META if k in meta})

    def remember_row(self, row: Mapping[str, Any]) -> None:
        """Keep the session row as just read or written (without any extra columns)."""
        from .schema import sessions

        self.rows.put(row["id"], {c.name: row[c.name] for c in sessions.c})

    def known_row(self, session_id: str, tenant: str | None) -> KnownRow | None:
        """The remembered row of a writable session of `tenant` (None: read it)."""
        row = self.rows.get(session_id)
        if row is None or row["read_only"] or (tenant is not None and
                                               row["tenant_id"] != tenant):
            return None
        return KnownRow(row)
