"""Recall that comes by itself (SPEC L5), kept between checkpoints (SPEC Q5): the edge.

`AutoRecall.apply` takes the projection of the next request, once it has been made to fit
(`runtime.fitting`), and returns it with the recall blocks of the turns since the
checkpoint (`core.recall.auto_recall` chooses and words them): a turn's user message is searched
in the session's own branch (the store's full-text index, SPEC L1, L4: never another
branch, session or tenant), only when a checkpoint folded something. Every face that sends
requests calls it: `Conversation`, the mirror (the proxy and the framework integrations)
and replay (`replay.ManagedSession`, over the in-memory store's search).

SPEC Q5: a turn is decided once, at its first request under the checkpoint, and its block
(or the absence of one) is then sent byte for byte, right before its user message, by every
later request until the next checkpoint: the blocks accumulate, within the recall budget
and the room the fitted request leaves. A turn that finds the budget spent gets no block,
and the session's check after the turn takes the full blocks as a reason to compact
(`full`, `core.sizing.fit.recall_compaction_due`).

Where the decisions live, and why they are stored rather than recomputed: several
processes may serve one session (issue 38: proxies on one database), and the next request
of a turn may reach another process than the first. A block cannot be recomputed there
byte for byte: it depends on the store's ranking of the matches (SQLite's bm25 weighs
every message of the database, so a later write re-ranks), on the room the request had and
on the tool calls pending then. So the decisions of the current checkpoint are written to
the session's metadata (`RECALL_KEY`, `RecallTurns.to_json`, a few kilobytes at most: the
recall budget bounds the blocks), a write per user turn and none inside a tool loop, and a
process that meets a turn it has not seen reads them back before deciding. No migration, no
new table: metadata is not history (no revision, no node) and is copied nowhere else. Two
requests of one session racing on the same new turn in two processes could both decide
it; the store keeps the later write, and the loser's next request reads it: one prefix
break, not a wrong request. A store without metadata (an embedder's) keeps them in this
process only.

The decisions and the store's matches are memos of this process, bounded by bytes
(`runtime.held.Held`): matches per (session, checkpoint, query), since in a tool loop every
request of the turn asks the same and the folded part only changes with a new checkpoint.
A store that cannot search (one an embedder brings without `search_history`) or a search
that fails leaves the turn undecided and without a block: recall helps a request, it never
stops one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from ..core.recall.auto_recall import (
    SEARCH_LIMIT,
    Candidate,
    RecallTurns,
    candidates_bytes,
    choose_block,
    held_blocks,
    identifier_query,
    known_text,
    latest_request,
    latest_user_index,
    recall_query,
    smallest_block,
    undecided_needs_search,
    within,
)
from ..core.recall.recall_text import SearchQuery, message_text
from ..core.sizing.fit import recall_room
from ..core.values.messages import Message
from ..core.view.projection import Projection, RecallBlock
from ..store.errors import StoreError
from ..store.protocol import CompactionStore
from ..store.values import RecallHit
from .held import Held, text_bytes
from .sizing import Sizer

log = logging.getLogger("contextfold.recall")

RECALL_KEY = "recall_turns"  # session metadata: the current checkpoint's `RecallTurns`
MEMO_BYTES = 16 << 20  # this process's memos of matches and decisions


class AutoRecall:
    """The automatic recall blocks for the sessions of one store (SPEC L5, Q5)."""

    def __init__(self, store: CompactionStore, *, memo_bytes: int = MEMO_BYTES) -> None:
        self.store = store
        # ("hits", session, checkpoint, query) -> the store's matches;
        # ("turns", session) -> the `RecallTurns` of its current checkpoint;
        # ("known", checkpoint) -> its text as blocks compare with it (`known_text`).
        self._memo = Held(memo_bytes)
        self.searches = 0  # store searches run (the rest came from the memo)
        self.reads = 0  # decisions read back from the store (another process's turns)

    def full(self, session_id: str, checkpoint_id: str | None) -> bool:
        """SPEC Q5: did a turn since `checkpoint_id` find the recall blocks full (a reason
        for the check after the turn to compact)? False when nothing is known of it."""
        turns = self._memo.get(("turns", session_id))
        return turns is not None and checkpoint_id is not None and \
            turns.checkpoint_id == checkpoint_id and turns.full

    def held(self, session_id: str, projection: Projection) -> tuple[RecallBlock, ...]:
        """The recall blocks this process last sent with `projection`'s turns (SPEC Q5),
        for a compaction whose summariser starts with the session's prefix (Q3)."""
        turns = self._memo.get(("turns", session_id))
        if turns is None or projection.checkpoint is None or \
                turns.checkpoint_id != projection.checkpoint.id:
            return ()
        return held_blocks(turns, projection)

    async def apply(self, session_id: str, projection: Projection, sizer: Sizer,
                    pending: Sequence[Message] = (), *, hypothetical: bool = False
                    ) -> Projection:
        """`projection` with the recall blocks of its turns since the checkpoint: those
        decided earlier, byte for byte, and the latest turn's when it is new (none when
        recall is off, nothing is folded, nothing new matches or no room is left).
        `hypothetical`: a request that is never sent (an evaluation's probe question):
        its turn is decided for it alone, neither kept nor stored."""
        budget = sizer.budget.recall_budget
        if budget <= 0 or projection.checkpoint is None or projection.recalled:
            return projection
        checkpoint = projection.checkpoint.id
        at = latest_user_index(projection)
        user_id = projection.messages[at].id if at is not None else None
        turns = await self._turns(session_id, checkpoint, user_id)
        held = held_blocks(turns, projection)
        if user_id is not None and not turns.decided(user_id):
            # Only a new turn needs its request's texts (a tool loop's requests do not).
            request = latest_request(projection)
            assert request is not None and request[0] == user_id
            decided = await self._decide(session_id, projection, held, sizer, pending,
                                         request, turns)
            if decided is not None:
                turns = decided
                if not hypothetical:
                    await self._keep(session_id, turns)
                held = held_blocks(turns, projection)
        if not held:
            return projection
        # The hard bound (SPEC P1): every block was chosen in the room its request left,
        # but the history grew since. Cut at the end, the earlier requests' prefixes stay.
        limit = sizer.budget.safe_input_limit
        # Measured here, the request's estimate is the one the face asks next (the sizer
        # keeps its last): checking the bound adds no walk of the history to a request.
        out, estimate = sizer.with_recalled(projection, held, pending)
        if estimate.tokens > limit:
            base = sizer.estimate(projection, pending).tokens
            out, _ = sizer.with_recalled(projection, within(held, max(0, limit - base)),
                                         pending)
            if not turns.full and not hypothetical:
                self._memo.put(("turns", session_id), replace(turns, full=True),
                               text_bytes(turns.to_json(), 6))
        return out

    async def _decide(self, session_id: str, projection: Projection,
                      held: tuple[RecallBlock, ...], sizer: Sizer,
                      pending: Sequence[Message], request: tuple[str, str, str],
                      turns: RecallTurns) -> RecallTurns | None:
        """`turns` with the latest turn decided, in the request `projection` with the
        blocks `held` (None: the store could not search; the turn stays undecided and its
        next request tries again)."""
        budget = sizer.budget.recall_budget
        count = sizer.costs.text_tokens
        projection, estimate = sizer.with_recalled(projection, held, pending)
        used = projection.recall_tokens
        query = recall_query(request[1], request[2])
        room = recall_room(estimate.tokens, sizer.budget.safe_input_limit, budget - used)
        decided = undecided_needs_search(turns, request[0], query, used, budget, room,
                                         smallest_block(count))
        if decided is not None or query is None:
            return decided
        # Searched in parts, each memoised: the request's identifiers, the pending calls'
        # identifiers, and all the request's terms (see `identifier_query`).
        parts = (identifier_query(recall_query(request[1])) if request[1] else None,
                 identifier_query(recall_query("", request[2])) if request[2] else None,
                 recall_query(request[1]) if request[1] else None)
        assert projection.checkpoint is not None
        found = await self._candidates(session_id, projection.checkpoint.id,
                                       [part for part in parts if part is not None])
        if found is None:
            return None
        candidates: list[Candidate] = []
        for hits in found:
            candidates += [c for c in hits if all(c.node_id != o.node_id for o in candidates)]
        block = choose_block(candidates, projection, query, room, count=count,
                             known=self._known(projection))
        return turns.with_turn(request[0], block)

    def _known(self, projection: Projection) -> str:
        """`known_text` of `projection`, memoised per checkpoint: rendering and folding
        the checkpoint's text is most of a new turn's block, and every turn under one
        checkpoint compares with the same text (issue 40)."""
        assert projection.checkpoint is not None
        key = ("known", projection.checkpoint.id)
        known: str | None = self._memo.get(key)
        if known is None:
            known = known_text(projection)
            self._memo.put(key, known, text_bytes(known))
        return known

    async def _turns(self, session_id: str, checkpoint_id: str,
                     user_id: str | None) -> RecallTurns:
        """The decisions of the session's turns since `checkpoint_id`: this process's,
        merged with the store's when the latest turn is not among them (another process
        may have decided it, SPEC Q5)."""
        mine = self._memo.get(("turns", session_id))
        if mine is None or mine.checkpoint_id != checkpoint_id:
            mine = RecallTurns(checkpoint_id)
        if user_id is None or mine.decided(user_id):
            return mine
        stored = await self._stored(session_id)
        if stored is not None and stored.checkpoint_id == checkpoint_id:
            self.reads += 1
            # The store's decisions first: they are what the other processes send.
            mine = stored.merged(mine)
        self._memo.put(("turns", session_id), mine, text_bytes(mine.to_json(), 6))
        return mine

    async def _stored(self, session_id: str) -> RecallTurns | None:
        get = getattr(self.store, "get_session", None)
        if get is None:
            return None
        try:
            info = await get(session_id)
        except StoreError as exc:
            log.warning("recall decisions of session %s not read: %s", session_id, exc)
            return None
        return RecallTurns.from_json(getattr(info, "metadata", {}).get(RECALL_KEY))

    async def _keep(self, session_id: str, turns: RecallTurns) -> None:
        """Hold `turns` here and write them to the session's metadata (where the store
        has it) for the other processes."""
        value = turns.to_json()
        self._memo.put(("turns", session_id), turns, text_bytes(value, 6))
        update = getattr(self.store, "update_session_metadata", None)
        if update is None:
            return
        try:
            await update(session_id, {RECALL_KEY: value})
        except StoreError as exc:  # another process will decide its own: a prefix break
            log.warning("recall decisions of session %s not stored: %s", session_id, exc)

    async def _candidates(self, session_id: str, checkpoint_id: str,
                          queries: Sequence[SearchQuery]
                          ) -> list[tuple[Candidate, ...]] | None:
        """The store's matches of each query (any term), memoised per checkpoint; the ones
        not memoised are searched in one read (`search_history_each`, where the store has
        it). None when the store cannot search."""
        keys = [("hits", session_id, checkpoint_id, tuple(t.tokens for t in q.terms))
                for q in queries]
        got = {i: self._memo.get(key) for i, key in enumerate(keys)}
        missing = [i for i, hits in got.items() if hits is None]
        if missing:
            searched = await self._search(session_id, [queries[i] for i in missing])
            if searched is None:
                return None
            for i, hits in zip(missing, searched, strict=True):
                got[i] = tuple(
                    Candidate(node_id=h.node.id, position=h.position, turn=h.turn,
                              role=h.node.message.role, text=message_text(h.node.message))
                    for h in hits if h.node.message is not None)
                self._memo.put(keys[i], got[i], candidates_bytes(got[i]))
        return [got[i] for i in range(len(keys))]

    async def _search(self, session_id: str,
                      queries: Sequence[SearchQuery]) -> list[list[RecallHit]] | None:
        each = getattr(self.store, "search_history_each", None)
        search = getattr(self.store, "search_history", None)
        if each is None and search is None:
            return None
        try:
            if each is not None:
                found = await each(session_id, queries, limit=SEARCH_LIMIT, any_term=True)
            else:
                found = [await search(session_id, q, limit=SEARCH_LIMIT, any_term=True)
                         for q in queries]
        except (StoreError, NotImplementedError) as exc:
            log.warning("automatic recall skipped for session %s: %s", session_id, exc)
            return None
        self.searches += len(queries)
        return list(found)
