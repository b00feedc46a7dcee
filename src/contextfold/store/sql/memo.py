"""What one store instance already knows, so that a steady append reads nothing again
(issue 26): the bookkeeping columns of nodes, their recall places, the session rows as last
read or written here, and the mirror index rows already checked against their nodes.

Nodes, recall rows and index rows are never updated (append-only, enforced by triggers), so
what was read or written once stays true. A session row is different: another writer may
move its leaf. A remembered row is therefore only a guess, and every write that starts from
one proves it in the statement that moves the leaf (guarded by the remembered leaf,
revision and read-only flag); when the guard fails, the transaction is rolled back and run
again from the real row (`StaleMemo`).

The memos live in a `Held` cache (SPEC Y14: bounded by their estimated bytes, least
recently used out), the store's own of `MEMO_BYTES`, or the process's one cache when the
face serving conversations hands it over (`SqlSessionStore.hold_memos_in`): a long-running worker
does not grow with the sessions it has written, and what it forgets it reads again.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

from ...core.values.held import Held, text_bytes

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
# A store's memos when no process cache is handed over: about what 4,096 entries of each
# kind held before they were bounded by bytes.
MEMO_BYTES = 16 << 20


class StaleMemo(Exception):
    """A remembered session row was not the stored one (another writer moved the leaf):
    the write is rolled back and run again from the real row."""


class MemoMap(Generic[K, V]):
    """One kind of a store's memos, kept in a `Held` cache under its own namespace (the
    store instance's and the kind's), each entry sized by `text_bytes` of key and value."""

    def __init__(self, held: Held, namespace: tuple[object, str]) -> None:
        self._held = held
        self._namespace = namespace

    def get(self, key: K) -> V | None:
        """The value remembered under `key` (None: not known), now the most recently used."""
        return self._held.get((self._namespace, key))  # type: ignore[no-any-return]

    def put(self, key: K, value: V) -> None:
        """Remember `value` under `key` (least recently used memos out, to the bound)."""
        self._held.put((self._namespace, key), value, text_bytes(key) + text_bytes(value))

    def pop(self, key: K) -> None:
        """Forget `key` (nothing if it is not remembered)."""
        self._held.pop((self._namespace, key))

    def __contains__(self, key: object) -> bool:
        return (self._namespace, key) in self._held


class KnownRow(dict[str, Any]):
    """A session row taken from the memo rather than read under the lock: the leaf move
    that ends the write must prove it (see `SqlAccess.move_leaf`)."""


# The columns of a node that an append needs from its parent (no payload).
NODE_META = ("id", "parent_id", "kind", "role", "depth", "latest_checkpoint_id",
             "first_kept_id", "content_hash", "chain_hash")


class WriteMemo:
    """The memo maps of one store instance (shared by its tenant-scoped copies), in `held`
    (a cache of `MEMO_BYTES` of its own when not given)."""

    def __init__(self, held: Held | None = None) -> None:
        self.use(held if held is not None else Held(MEMO_BYTES))

    def use(self, held: Held) -> None:
        """Keep the memos in `held` from now on (what was remembered is forgotten: memos
        only). In place, so the tenant-scoped copies sharing this memo follow."""
        self.held = held
        ns = object()  # this memo's own keys, whatever else shares the cache
        self.nodes: MemoMap[tuple[str, str], dict[str, Any]] = MemoMap(held, (ns, "nodes"))
        # recall_index.Place
        self.places: MemoMap[tuple[str, str], Any] = MemoMap(held, (ns, "places"))
        self.rows: MemoMap[str, dict[str, Any]] = MemoMap(held, (ns, "rows"))
        # (tree, hash, node, message)
        self.hits: MemoMap[tuple[str, str, str, str], bool] = MemoMap(held, (ns, "hits"))
        # (tree_id, node_id) whose O(tail) branch this instance verified healthy.
        self.sound: MemoMap[tuple[str, str], bool] = MemoMap(held, (ns, "sound"))

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
