"""The store side of the content mirror (SPEC Y1): look a content-hash chain up, and extend a
session's tree with the messages after the longest stored prefix, in one transaction.

The hashes themselves are computed by `contextfold.runtime.mirror`; the store only keeps
`mirror_index` rows (prefix hash → node) next to the nodes they point at, written in the
same transaction, so a crash never leaves a node without its index row or the reverse.

`Mirroring` is a part of `contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.content_chain import message_key  # the chain's one definition
from contextfold.core.values.messages import Message, Node, utc_now
from contextfold.ids import new_id

from ..errors import InvalidOperationError
from ..inputs import as_message
from ..values import MirrorHit, MirrorWrite
from . import queries
from .access import SqlAccess
from .engine import read_connection
from .schema import mirror_index, response_ids, sessions

_CHUNK = 400  # parameters per IN (...) query: far below SQLite's limit
_CHECKS = 8  # index rows tried (and non-message nodes walked) before starting afresh
log = logging.getLogger("contextfold.store")


async def _lookup(conn: AsyncConnection, hashes: Sequence[str],
                  tree_id: str | None) -> dict[str, MirrorHit]:
    found: dict[str, MirrorHit] = {}
    unique = list(dict.fromkeys(hashes))
    for start in range(0, len(unique), _CHUNK):
        stmt = select(mirror_index).where(
            mirror_index.c.prefix_hash.in_(unique[start:start + _CHUNK]))
        if tree_id is not None:
            # Served by the (prefix_hash, tree_id) index (migration 0007).
            stmt = stmt.where(mirror_index.c.tree_id == tree_id)
        for row in (await conn.execute(stmt)).mappings():
            old = found.get(row["prefix_hash"])
            if old is None or row["depth"] > old.depth:
                found[row["prefix_hash"]] = MirrorHit(row["prefix_hash"], row["tree_id"],
                                                      row["node_id"], row["depth"],
                                                      row["message_id"])
    return found


async def _verified(conn: AsyncConnection, tree_id: str, hashes: Sequence[str],
                    msgs: Sequence[Message], found: dict[str, MirrorHit], n: int,
                    db: SqlAccess) -> int:
    """How many leading messages really are stored: the index row where the conversation
    would continue is checked against the nodes (its message node holds the client's
    message, its node follows that message), and a row that disagrees is not trusted (the
    conversation continues from the last one that agrees; issue 24 item 12)."""
    for _ in range(_CHECKS):
        if n == 0:
            return 0
        hit = found.get(hashes[n - 1])
        if hit is None:
            return n  # known from this store's own earlier write (`known`)
        seen = (tree_id, hit.prefix_hash, hit.node_id, hit.message_id)
        if db.memo.hits.get(seen):
            return n  # written or checked by this instance (index rows never change)
        loaded = await queries.walk_up(conn, tree_id, hit.message_id, hit.message_id)
        node = loaded.get(hit.message_id)
        if isinstance(node, Node) and node.message is not None and \
                message_key(node.message) == message_key(msgs[n - 1]) and \
                await _follows(conn, tree_id, hit.node_id, hit.message_id, db):
            db.after_commit(conn, lambda seen=seen: db.memo.hits.put(seen, True))
            return n
        log.warning("mirror_index row %s of tree %s disagrees with its node: not used "
                    "(run `contextfold verify`)", hit.node_id, tree_id)
        n -= 1
    return 0


async def _follows(conn: AsyncConnection, tree_id: str, node_id: str, message_id: str,
                   db: SqlAccess) -> bool:
    """`node_id` is the message itself, or a checkpoint or pin event after it."""
    current: str | None = node_id
    for _ in range(_CHECKS):
        if current == message_id:
            return True
        meta = await db.node_meta(conn, tree_id, current) if current else None
        if meta is None or meta["kind"] == "message":
            return False
        current = meta["parent_id"]
    return False


def longest(hashes: Sequence[str], found: dict[str, MirrorHit]) -> int:
    """How many leading hashes of the chain are stored (a chain is stored prefix-closed)."""
    n = 0
    while n < len(hashes) and hashes[n] in found:
        n += 1
    return n


class Mirroring:
    """The content mirror's look-ups and writes, and the Responses ids it keeps."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def mirror_lookup(self, hashes: Sequence[str], *,
                            tree_id: str | None = None) -> dict[str, MirrorHit]:
        """The stored hits among `hashes` (optionally only in `tree_id`), deepest per hash."""
        async with read_connection(self.access.engine) as conn:
            return await _lookup(conn, hashes, tree_id)

    async def mirror_session_of_tree(self, tree_id: str) -> str | None:
        """The oldest session of a tree (the one a mirror created with it)."""
        async with read_connection(self.access.engine) as conn:
            # Scoped (SPEC W1): a tenant's store never finds another tenant's session.
            stmt = (self.access.scoped(select(sessions.c.id).where(sessions.c.tree_id == tree_id))
                    .order_by(sessions.c.created_at, sessions.c.id).limit(1))
            return (await conn.execute(stmt)).scalar()

    async def mirror_node_hash(self, session_id: str, node_id: str) -> str | None:
        """The chain hash a mirror stored `node_id` under (None: not a mirrored node)."""
        async with read_connection(self.access.engine) as conn:
            row = await self.access.session_row(conn, session_id)
            stmt = select(mirror_index.c.prefix_hash).where(
                mirror_index.c.tree_id == row["tree_id"], mirror_index.c.node_id == node_id)
            return (await conn.execute(stmt)).scalar()

    async def mirror_index_node(self, session_id: str, prefix_hash: str, node_id: str,
                                message_id: str) -> None:
        """Index a node written outside `mirror_extend` (a checkpoint the mirror committed
        right after `message_id`, the message whose chain is `prefix_hash`)."""

        async def op(conn: AsyncConnection) -> None:
            row = await self.access.session_row(conn, session_id)
            meta = await queries.node_meta(conn, row["tree_id"], node_id)
            if meta is None:
                raise InvalidOperationError(f"node {node_id!r} is not in session "
                                            f"{session_id!r}'s tree")
            exists = (await conn.execute(select(mirror_index.c.node_id).where(
                mirror_index.c.tree_id == row["tree_id"], mirror_index.c.node_id == node_id))
            ).first()
            if exists is None:
                await conn.execute(insert(mirror_index).values(
                    tree_id=row["tree_id"], node_id=node_id, prefix_hash=prefix_hash,
                    depth=meta["depth"], message_id=message_id))

        await self.access.write(op)

    async def record_response(self, session_id: str, owner: str, response_id: str,
                              node_id: str) -> None:
        """Keep a Responses API response id answered for `owner` (SPEC Y12: the tenant and
        the client key's fingerprint) with the reply node it continues from (idempotent:
        an id kept once keeps its first node)."""

        async def op(conn: AsyncConnection) -> None:
            row = await self.access.session_row(conn, session_id)
            if await queries.node_meta(conn, row["tree_id"], node_id) is None:
                raise InvalidOperationError(f"node {node_id!r} is not in session "
                                            f"{session_id!r}'s tree")
            taken = (await conn.execute(select(response_ids.c.node_id).where(
                response_ids.c.owner == owner, response_ids.c.response_id == response_id))
            ).first()
            if taken is None:
                await conn.execute(insert(response_ids).values(
                    owner=owner, response_id=response_id, tree_id=row["tree_id"],
                    session_id=session_id, node_id=node_id, created_at=utc_now()))

        await self.access.write(op)

    async def find_response(self, owner: str, response_id: str) -> tuple[str, str] | None:
        """(session id, reply node id) of a response id kept for `owner`: one primary-key
        look-up (migration 0008). None for an id never kept, or kept for another owner or
        in another tenant's session (SPEC Y12, W1: as if it did not exist)."""
        async with read_connection(self.access.engine) as conn:
            stmt = self.access.scoped(
                select(response_ids.c.session_id, response_ids.c.node_id)
                .join(sessions, sessions.c.id == response_ids.c.session_id)
                .where(response_ids.c.owner == owner,
                       response_ids.c.response_id == response_id))
            found = (await conn.execute(stmt)).first()
            return None if found is None else (found[0], found[1])

    async def mirror_extend(self, session_id: str, hashes: Sequence[str],
                            messages: Sequence[Message], *,
                            hold_last: bool = False, known: Sequence[str] = (),
                            new_ids: Mapping[str, str] | None = None) -> MirrorWrite:
        """Make the session's branch hold `messages` (whose chain hashes are `hashes`).

        Under the session lock: find the longest stored prefix in the session's tree (again,
        so concurrent writers never store a message twice), continue from the session's leaf
        when the leaf holds that prefix (checkpoints and pin events after it stay on the
        branch), else from the deepest node holding it, write the rest with their index rows
        and move the leaf to the last message. Nothing is written when all are stored.
        `hold_last`: when the last message is not stored yet, stop before it (the caller
        sizes the request with it as a draft first, then calls again).
        `known`: the message node ids of leading hashes, as an earlier call for this session
        returned them (`node_ids`). Nothing leaves a tree, so only the last of them is looked
        up again (where to continue), not the whole resent list; when it is not that node of
        this tree after all, every hash is looked up.
        `new_ids`: the node id to give the message of a hash when it is written here (the
        mirror names a message it sends before storing it, `Mirror(defer=True)`); a message
        found stored keeps its node.
        """
        if len(hashes) != len(messages):
            raise InvalidOperationError("one hash per message")
        # A resent list is all messages already (the mirror built them): checked in one
        # pass rather than converted one by one on every request (issue 26).
        msgs = messages if set(map(type, messages)) <= {Message} else \
            [as_message(m) for m in messages]

        async def op(conn: AsyncConnection) -> MirrorWrite:
            row = await self.access.lock_session(conn, session_id, known=True)
            await self.access.check_writable(conn, row)
            tree_id = row["tree_id"]
            skip = max(0, min(len(known), len(hashes)) - 1)
            found = await _lookup(conn, hashes[skip:], tree_id)
            hit = found.get(hashes[skip])
            if skip and (hit is None or hit.message_id != known[skip]):
                skip = 0
                found = await _lookup(conn, hashes, tree_id)
            n = await _verified(conn, tree_id, hashes, msgs, found,
                                skip + longest(hashes[skip:], found), self.access)
            if skip and n <= skip:  # not even where `known` ends agrees: look all up
                skip = 0
                found = await _lookup(conn, hashes, tree_id)
                n = await _verified(conn, tree_id, hashes, msgs, found, longest(hashes, found),
                                    self.access)
            parent = await self._continue_from(conn, row, hashes[n - 1] if n else None, found)
            stamp = utc_now()
            held = hold_last and n < len(msgs)
            chain: list[Node] = []
            named = new_ids or {}
            for h, msg in zip(hashes[n:], msgs[n:len(msgs) - 1 if held else len(msgs)],
                              strict=False):
                chain.append(Node(id=named.get(h) or new_id(),
                                  parent_id=parent if not chain else chain[-1].id,
                                  created_at=stamp, payload=msg))
            ids = [*known[:skip], *(found[h].message_id for h in hashes[skip:n])]
            if chain:
                # With their index rows and the leaf move; one node (a steady turn: the
                # new user message, or the reply) in one statement with its move.
                moved = "append" if parent == row["leaf_id"] else "branch"
                await self.access.insert_chain(conn, row, chain, hashes[n:], move_op=moved)
                written = [(tree_id, h, node.id, node.id)
                           for node, h in zip(chain, hashes[n:], strict=False)]
                self.access.after_commit(conn, lambda: [self.access.memo.hits.put(w, True)
                                                  for w in written])
                return MirrorWrite(tuple(chain), (*ids, *(c.id for c in chain)),
                                   chain[-1].id, moved, row["leaf_id"], held)
            if parent != row["leaf_id"]:
                info = await self.access.move_leaf(conn, row, parent, op="switch")
                return MirrorWrite((), tuple(ids), info.leaf_id, "switch", row["leaf_id"], held)
            await self.access.prove_known(conn, row)  # nothing moves: the guess needs a read
            return MirrorWrite((), tuple(ids), row["leaf_id"], None, row["leaf_id"], held)

        return await self.access.write(op)

    async def _continue_from(self, conn: AsyncConnection, row: object, last_hash: str | None,
                             found: dict[str, MirrorHit]) -> str | None:
        """Where the rest goes: the leaf when it holds the matched prefix (only checkpoints
        or pin events after the matched message), else the deepest node holding it."""
        if last_hash is None:
            return None
        hit = found[last_hash]
        leaf = row["leaf_id"]  # type: ignore[index]
        node = leaf
        while node is not None:
            if node in (hit.node_id, hit.message_id):
                return leaf
            meta = await self.access.node_meta(conn, row["tree_id"], node)  # type: ignore[index]
            if meta is None or meta["kind"] == "message":
                break
            node = meta["parent_id"]
        return hit.node_id
