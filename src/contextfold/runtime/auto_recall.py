"""Recall that comes by itself (SPEC L5): the search at the edge.

`AutoRecall.apply` takes the projection of the next request, once it has been made to fit
(`runtime.fitting`), and returns it with the recall block (`core.auto_recall` chooses and
words it): the latest request is searched in the session's own branch (the store's
full-text index, SPEC L1, L4: never another branch, session or tenant), only when a
checkpoint folded something, within the room `core.fit.recall_room` leaves. Every face
that sends requests calls it: `Conversation`, the mirror (the proxy and the framework
integrations) and replay (`replay.ManagedSession`, over the in-memory store's search).

The store's matches for one query are memoised per (session, checkpoint, query): in a tool
loop every request of the turn asks the same, and the folded part only changes with a new
checkpoint, so the search runs once per user turn. A request's parts that are not memoised
are searched in one read of the session and its branch (`search_history_each`; a store
without it is asked once per part). A store that cannot search (one an
embedder brings without `search_history`) or a search that fails leaves the request
without a block: recall helps a request, it never stops one.

Once a turn has a block, the rest of its tool loop sends that block byte for byte (the
prompt cache, Y4), as long as the room holds it: the pending calls' identifiers are
searched only until the turn has one, and a block is chosen again only when the checkpoint
changes or the room no longer holds it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from ..core.auto_recall import (
    SEARCH_LIMIT,
    Candidate,
    choose_block,
    identifier_query,
    latest_request,
    recall_query,
)
from ..core.fit import recall_room
from ..core.messages import Message
from ..core.projection import Projection, RecallBlock
from ..core.recall_text import SearchQuery, message_text
from ..store.errors import StoreError
from ..store.protocol import CompactionStore
from ..store.values import RecallHit
from .sizing import Sizer

log = logging.getLogger("contextfold.recall")

_MEMO = 128  # (session, checkpoint, query) entries kept


class AutoRecall:
    """The automatic recall block for the sessions of one store (SPEC L5)."""

    def __init__(self, store: CompactionStore) -> None:  # searched where it can search
        self.store = store
        self._memo: OrderedDict[tuple[str, str, tuple[tuple[str, ...], ...]],
                                tuple[Candidate, ...]] = OrderedDict()
        self.searches = 0  # store searches run (the rest came from the memo)
        # (session, checkpoint, latest user message id and text) -> the block that turn
        # was sent with.
        self._blocks: OrderedDict[tuple[str, str, str, str], RecallBlock] = OrderedDict()

    async def apply(self, session_id: str, projection: Projection, sizer: Sizer,
                    pending: Sequence[Message] = ()) -> Projection:
        """`projection` with the recall block for its latest request, or as it is when
        recall is off, nothing is folded, nothing new matches or no room is left."""
        budget = sizer.budget.recall_budget
        if budget <= 0 or projection.checkpoint is None or projection.recalled is not None:
            return projection
        request = latest_request(projection)
        query = recall_query(request[1], request[2]) if request is not None else None
        if query is None:
            return projection
        room = recall_room(sizer.estimate(projection, pending).tokens,
                           sizer.budget.safe_input_limit, budget)
        if room <= 0:
            return projection
        # The prompt cache (Y4): once a turn has its block, every later request of that
        # turn (its tool loop) sends the same bytes, even when a pending call's identifiers
        # or a shrinking room would choose another block; changing it would re-bill
        # everything after it. Same checkpoint, same user message: its hits are still
        # folded, so the block is still true. Only a block the room no longer holds is
        # chosen again.
        turn = (session_id, projection.checkpoint.id, request[0], request[1])
        held = self._blocks.get(turn)
        if held is not None and held.tokens <= room:
            self._blocks.move_to_end(turn)
            return replace(projection, recalled=held)
        # Searched in parts, each memoised: the request's identifiers, the pending calls'
        # identifiers (new every round of a tool loop), and all the request's terms (see
        # `identifier_query`); through a tool loop only the calls' part is searched again.
        parts = (identifier_query(recall_query(request[1])) if request[1] else None,
                 identifier_query(recall_query("", request[2])) if request[2] else None,
                 recall_query(request[1]) if request[1] else None)
        found = await self._candidates(session_id, projection.checkpoint.id,
                                       [part for part in parts if part is not None])
        if found is None:
            return projection
        candidates: list[Candidate] = []
        for hits in found:
            candidates += [c for c in hits if all(c.node_id != o.node_id for o in candidates)]
        block = choose_block(candidates, projection, query, room,
                             count=sizer.costs.text_tokens)
        if block is None:
            return projection
        self._blocks[turn] = block
        while len(self._blocks) > _MEMO:
            self._blocks.popitem(last=False)
        return replace(projection, recalled=block)

    async def _candidates(self, session_id: str, checkpoint_id: str,
                          queries: Sequence[SearchQuery]
                          ) -> list[tuple[Candidate, ...]] | None:
        """The store's matches of each query (any term), memoised per checkpoint; the ones
        not memoised are searched in one read (`search_history_each`, where the store has
        it). None when the store cannot search."""
        keys = [(session_id, checkpoint_id, tuple(t.tokens for t in q.terms)) for q in queries]
        missing = [i for i, key in enumerate(keys) if key not in self._memo]
        if missing:
            searched = await self._search(session_id, [queries[i] for i in missing])
            if searched is None:
                return None
            for i, hits in zip(missing, searched, strict=True):
                self._memo[keys[i]] = tuple(
                    Candidate(node_id=h.node.id, position=h.position, turn=h.turn,
                              role=h.node.message.role, text=message_text(h.node.message))
                    for h in hits if h.node.message is not None)
        out = []
        for key in keys:
            self._memo.move_to_end(key)
            out.append(self._memo[key])
        while len(self._memo) > _MEMO:
            self._memo.popitem(last=False)
        return out

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
