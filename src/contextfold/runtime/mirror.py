"""`Mirror`: keep an externally held conversation in the durable tree, by content (SPEC Y1).

Agents behind the proxy, and frameworks (LangChain, the Agents SDK, pydantic-ai) keep their own
message list and send all of it on every call. `Mirror.sync` takes that list (as contextfold
`Message`s, plus the system prompt and tool definitions), stores only what is new, and returns
what to send instead: the projection that fits the model's real window (SPEC Y2, P1-P3).

    mirror = Mirror(store)                        # one per process; many sessions
    synced = await mirror.sync(messages, capacity=capacity_for("gpt-4o-mini"),
                               scope="my-app", system=system, tools=tools)
    for item in synced.items():                   # the request's messages, in order
        ...  # item.index is None for the checkpoint/pins prefix; else messages[item.index]
             # is sent as it is when item.verbatim, else send item.message instead
    await mirror.record_reply(synced, reply)      # the model's answer, with its usage (E1)

How a list maps onto the tree: every message has a content-hash chain (`content_chain`); the
longest stored prefix is found through the `mirror_index` table; the session continues from
there (after any checkpoint committed at that point), so the same prefix continues the same
branch, a changed earlier message (a retry, an edit, the agent's own compaction) starts a
branch at the first difference, and nothing is stored twice.

Where the conversation lives: with `session_id`, that session's tree; without it, the tree
whose stored chain matches under `scope` (a new session when none does). After a reply, the
auto check runs (A1, in the background unless `background=False`); the next `sync` of that
session waits for it.

This module is the mirror's shape of a session: how a client's list arrives and what is
stored of it, on the fast path (a new user message that fits the held branch, stored with
the reply) or the careful one (stored, fitted, compacted). The rest is one idea per module:
`mirror_synced` (what a sync returns), `mirror_sessions` (what this process holds of each
session), `mirror_find` (which session a list belongs to), `mirror_provider` (a provider's
own compaction, SPEC Y7), and the lifecycle every face shares (`runtime.driver`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.recall.recall_text import client_recall_tools
from ..core.values.content_chain import ChainMemo, chain_link, opens_with_provider_compaction
from ..core.values.messages import Message, Node, utc_now
from ..core.values.tree import Branch
from ..core.view.projection import project, provider_compaction_index
from ..ids import new_id
from ..store.protocol import SessionStore
from ..store.values import MirrorWrite
from .auto_recall import AutoRecall
from .compaction import CompactionOutcome
from .driver import Tools
from .fitting import RECHECK_SECONDS, SessionFit, fit_request
from .held import Held
from .mirror_find import find_or_create, index_checkpoint, known_ids, refuse_alone
from .mirror_provider import left_to_provider, take_up
from .mirror_sessions import MirrorSessions
from .mirror_synced import ProjectedItem, Synced, tool_names
from .sizing import Sizer
from .summarizers import guarded

__all__ = ["Mirror", "ProjectedItem", "Synced"]

log = logging.getLogger("contextfold.mirror")


class _Call(NamedTuple):
    """One `sync`'s request, once its session is known."""

    session_id: str
    messages: tuple[Message, ...]
    hashes: list[str]
    chain_scope: str
    capacity: ModelCapacity
    tools: Tools | None
    created: bool


class Mirror:
    """Mirrors client-held conversations into a store (SPEC Y1) and sizes what to send.

    `held`: the process's cache of per-conversation memos (SPEC Y14; shared with the face's
    own, the proxy's); a new one of the default size when not given."""

    def __init__(self, store: SessionStore, *, summarizer: Any = None,
                 settings: CompactionSettings | None = None, background: bool = True,
                 summarizer_timeout: float | None = 300.0, defer: bool = False,
                 held: Held | None = None) -> None:
        self.store = store
        self.settings = settings
        self.background = background
        # `defer`: in the steady loop (only a new user message, which fits), store it with
        # the reply: one write transaction per request instead of two (the proxy, issue
        # 26). Only for a face that always calls `record_reply` or `no_reply` after `sync`.
        self.defer = defer
        self._summarize = guarded(summarizer, timeout=summarizer_timeout)
        # In-process memos, all in `held` (SPEC Y14: one cache bounded by bytes, least
        # recently used out; the store stays the truth): each session's `MirrorSession`,
        # the chain ends stored and what each conversation last stored
        # (`runtime.mirror_sessions`);
        self.held = held if held is not None else Held()
        self._sessions = MirrorSessions(store, self.held, settings, self._summarize)
        # and the hashes of each conversation's last list ("chain", ...): a resent list
        # with a few messages added hashes those only (a 5,100-message list took 1.9 s).
        self._chains = ChainMemo(self.held)
        # What the latest background checks did (the latest 100: a bounded record).
        self.auto_outcomes: deque[CompactionOutcome] = deque(maxlen=100)
        self._auto_recall = AutoRecall(store)
        # The provider compactions on their way (SPEC Y7: `expect_reply(compaction=True)`),
        # by the `Synced` they answer; an entry lives until its reply is recorded or given up.
        self._compactions_due: dict[int, asyncio.Event] = {}

    # ------------------------------------------------------------------ the API

    async def sync(self, messages: Sequence[Message], *, capacity: ModelCapacity,
                   scope: str = "default", session_id: str | None = None,
                   system: str | None = None, tools: Tools | None = None,
                   metadata: Mapping[str, Any] | None = None,
                   title: str | None = None, provider_compaction: bool = False) -> Synced:
        """Store what is new in `messages` and return what to send (SPEC Y1, Y2, P1-P3).

        `provider_compaction`: the request asks its provider to compact (SPEC Y7: Anthropic's
        `compaction` or a `compact_*` edit, OpenAI's `context_management`); from then on
        this process leaves the session's automatic compaction (A1) to the provider and
        compacts only what the window forces (P1-P5).

        Raises `RequestTooLargeError` (nothing stored beyond the history, nothing to send)
        when even the compacted request cannot fit `capacity` (SPEC Y3).
        """
        msgs = tuple(messages)
        if not msgs:
            raise ValueError("sync needs at least one message")
        chain_scope = f"session:{session_id}" if session_id is not None else scope
        hashes = self._chains.hashes(chain_scope, msgs)
        created = False
        if session_id is None:
            session_id, created = await find_or_create(
                self._sessions, hashes, metadata, title,
                refuse=lambda: refuse_alone(msgs, capacity, self.settings, system, tools),
                replies_due=self._replies_due if opens_with_provider_compaction(msgs[0])
                else None, reply_wait=self.reply_wait)
        elif metadata:
            await self._sessions.set_metadata(session_id, metadata)
        if provider_compaction:
            self._sessions.state(session_id).provider_compacts = True
        await self._reply_recorded(session_id)
        call = _Call(session_id, msgs, hashes, chain_scope, capacity, tools, created)
        async with self._sessions.state(session_id).lock:
            await self._sessions.settle_auto(session_id)
            await self._sessions.recheck(session_id, self.recheck_seconds)
            sizer = self._sessions.sizer(session_id, capacity, system, tools)
            # A new user message is the draft of SPEC P1: compaction runs before it is stored,
            # so it is never summarised and always goes out as sent (Y2).
            # Fast path (the steady agent loop): the new messages follow the branch this
            # process holds and fit with it, so nothing needs compacting: one transaction.
            fits = msgs[-1].role == "user" and self._sessions.fits_after_held(
                session_id, sizer, hashes, msgs)
            known = known_ids(self._sessions.stored(chain_scope, session_id), session_id,
                              hashes)
            cached = self._sessions.state(session_id).branch
            if fits and self.defer and cached is not None and \
                    len(known) == len(msgs) - 1 and cached.leaf_id == known[-1] and \
                    provider_compaction_index(cached) is None:
                return await self._sync_deferred(call, sizer, cached, known)
            return await self._sync_stored(call, sizer, cached, known,
                                           hold=msgs[-1].role == "user" and not fits)

    async def _sync_deferred(self, call: _Call, sizer: Sizer, cached: Branch,
                             known: tuple[str, ...]) -> Synced:
        """The fast path: only the new user message is new, it follows the branch this
        process holds, and it fits: nothing to compact, nothing to read; it is named now
        and stored with the reply (`record_reply`), in the reply's transaction."""
        msgs = call.messages
        draft = Node(id=new_id(), parent_id=cached.leaf_id, created_at=utc_now(),
                     payload=msgs[-1])
        self._sessions.remember(call.hashes[-1], call.session_id)
        projection = await self._auto_recall.apply(
            call.session_id, project(cached.grown((draft,))), sizer)
        return Synced(session_id=call.session_id, messages=msgs, hashes=tuple(call.hashes),
                      node_ids=(*known, draft.id), projection=projection,
                      estimate=sizer.estimate(projection), budget=sizer.budget,
                      capacity=call.capacity, appended=1, moved="append",
                      recall_tools=client_recall_tools(tool_names(call.tools or ())),
                      deferred=draft, chain_scope=call.chain_scope)

    async def _sync_stored(self, call: _Call, sizer: Sizer, cached: Branch | None,
                           known: tuple[str, ...], *, hold: bool) -> Synced:
        """The careful path: store what is new (a new user message `hold`, held back while
        the request is made to fit: SPEC P1), take up a provider's compaction (Y7), compact
        until the request fits (P1-P3), then store the held message."""
        session_id, msgs, hashes = call.session_id, call.messages, call.hashes
        first = await self.store.mirror_extend(session_id, hashes, msgs, hold_last=hold,
                                               known=known)
        if cached is None and call.created and first.from_leaf is None:
            # A session this call created: its branch is what was just written, not read
            # back (issue 26: the first request of a long session).
            cached = Branch(nodes=(), complete=True, revision=0)
        if cached is not None and cached.leaf_id == first.from_leaf and \
                first.moved in (None, "append"):
            branch = await self._sessions.grown(session_id, cached, first.nodes)
        else:
            branch = await self._sessions.read_branch(session_id)
        branch = await take_up(self._sessions, session_id, sizer, branch)
        fit = self._session_fit(session_id, sizer, branch)
        compactions = await fit_request(fit, msgs[-1:] if first.held else ())
        branch = fit.branch
        write = first
        if first.held:
            write = await self.store.mirror_extend(session_id, hashes, msgs,
                                                   known=first.node_ids)
            branch = await self._sessions.grown(session_id, branch, write.nodes)
        self._sessions.hold_branch(session_id, branch, hashes[-1])
        self._sessions.remember(hashes[-1], session_id)
        self._sessions.remember_stored((call.chain_scope, session_id),
                                       (session_id, hashes, write.node_ids))
        # SPEC L5: the recall block, in the room the fitted request leaves.
        projection = await self._auto_recall.apply(session_id, project(branch), sizer)
        new_nodes = (*first.nodes, *(write.nodes if write is not first else ()))
        moved = None
        if new_nodes:
            moved = "append" if new_nodes[0].parent_id == first.from_leaf else "branch"
        elif branch.leaf_id != first.from_leaf:
            moved = "switch"
        return Synced(session_id=session_id, messages=msgs, hashes=tuple(hashes),
                      node_ids=write.node_ids, projection=projection,
                      estimate=sizer.estimate(projection), budget=sizer.budget,
                      capacity=call.capacity, compactions=tuple(compactions),
                      appended=len(new_nodes), moved=moved, created=call.created,
                      recall_tools=client_recall_tools(tool_names(call.tools or ())),
                      chain_scope=call.chain_scope)

    def expect_reply(self, synced: Synced, *, compaction: bool = False) -> None:
        """Say a reply to `synced` is on its way: the next `sync` of the session waits (up
        to `reply_wait` seconds) for `record_reply` or `no_reply`, so a client that resends
        the reply before it is recorded cannot store it without its usage (E1).

        `compaction`: the reply is a provider's compaction asked for on demand (SPEC Y7).
        The conversation may go on while it is written (background compaction), so the
        session's next `sync` does not wait for it; only a list that opens with a
        provider's compaction no stored chain knows yet waits (it may carry this reply)."""
        if compaction:
            self._compactions_due[id(synced)] = asyncio.Event()
            return
        self._sessions.state(synced.session_id).expected = asyncio.Event()

    def no_reply(self, synced: Synced) -> None:
        """The expected reply will not come (an upstream error, a broken stream). A
        deferred user message is stored alone (a task the session's next `sync` and
        `wait_idle` wait for)."""
        state = self._sessions.state(synced.session_id)
        if synced.deferred is not None and state.write is None:
            state.write = asyncio.get_running_loop().create_task(self._store_deferred(synced))
        self._release(synced)

    def _replies_due(self) -> list[asyncio.Event]:
        """Every answer of this process still to be recorded (compactions included)."""
        due = list(self._compactions_due.values())
        for sid in self._sessions.ids():
            state = self._sessions.held_state(sid)
            if state is not None and state.expected is not None:
                due.append(state.expected)
        return due

    def awaiting_reply(self) -> list[str]:
        """The sessions whose next `sync` waits for a reply to be recorded."""
        return [sid for sid in self._sessions.ids()
                if getattr(self._sessions.held_state(sid), "expected", None) is not None]

    def _release(self, synced: Synced) -> None:
        due = self._compactions_due.pop(id(synced), None)
        if due is not None:
            due.set()
        state = self._sessions.held_state(synced.session_id)
        event = state.expected if state is not None else None
        if event is not None:
            state.expected = None
            event.set()

    async def _store_deferred(self, synced: Synced) -> None:
        try:
            await self._extend(synced, synced.hashes, synced.messages)
        except Exception:  # the client resends it; the next sync stores it then
            log.exception("storing the message of session %s failed", synced.session_id)

    reply_wait = 30.0

    async def _reply_recorded(self, session_id: str) -> None:
        state = self._sessions.state(session_id)
        event = state.expected
        if event is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), self.reply_wait)
        write, state.write = state.write, None
        if write is not None:
            await write

    async def record_reply(self, synced: Synced, reply: Message) -> Node:
        """Store the model's reply (with its usage, SPEC E1) after the messages of `synced`;
        then the auto check (A1): compact between turns if over the threshold."""
        reply_hash = chain_link(synced.chain_scope, synced.hashes[-1], reply)
        try:
            # A deferred user message is stored here, before the reply, in its transaction.
            write = await self._extend(synced, [*synced.hashes, reply_hash],
                                       (*synced.messages, reply))
        finally:
            self._release(synced)
        self._sessions.remember(reply_hash, synced.session_id)
        # The reply's node, when this call wrote it (the last id is the reply's).
        node = write.nodes[-1] if write.nodes and write.nodes[-1].id == write.node_ids[-1] \
            else None
        if node is None:  # the same reply was recorded before: nothing new to check
            branch = await self._sessions.read_branch(synced.session_id)
            return next(n for n in reversed(branch.nodes) if n.id == write.node_ids[-1])
        state = self._sessions.state(synced.session_id)
        if state.sizer is not None and not left_to_provider(state):
            sid, sizer, branch, reply_id = synced.session_id, state.sizer, state.branch, node.id

            async def fit() -> SessionFit:
                async def index(outcome: CompactionOutcome, _planned_on: Branch) -> None:
                    # The checkpoint is found by the reply's hash (a retry keeps it).
                    if outcome.status == "compacted" and outcome.checkpoint_id is not None:
                        await self.store.mirror_index_node(sid, reply_hash,
                                                           outcome.checkpoint_id, reply_id)

                held = branch if branch is not None else \
                    await self._sessions.read_branch(sid)
                return SessionFit(self.store, sid, sizer, self._summarize, held,
                                  on_compacted=index, recall=self._auto_recall)

            # The latest reply's check is the one the next request settles.
            task = state.auto.start(sid, fit, replace=True,
                                    on_outcome=self.auto_outcomes.append)
            if not self.background:
                await task
        return node

    async def _extend(self, synced: Synced, hashes: Sequence[str],
                      msgs: Sequence[Message]) -> MirrorWrite:
        """Store `msgs` after what `synced` stored (its deferred message included, under
        the id it was sent with), and keep the memos: the branch grown by what was written
        when it continues the held one (else dropped: read again), the stored ids."""
        draft = synced.deferred
        known = synced.node_ids[:-1] if draft is not None else synced.node_ids
        write = await self.store.mirror_extend(
            synced.session_id, hashes, msgs, known=known,
            new_ids={synced.hashes[-1]: draft.id} if draft is not None else None)
        sid = synced.session_id
        cached = self._sessions.state(sid).branch
        if cached is not None and write.nodes and write.nodes[0].parent_id == cached.leaf_id:
            self._sessions.hold_branch(sid, cached.grown(write.nodes), hashes[-1], write.nodes)
        elif cached is not None and (write.nodes or cached.leaf_id != write.leaf_id):
            self._sessions.drop_branch(sid)  # elsewhere on the tree: read again
        self._sessions.remember_stored((synced.chain_scope, sid),
                                       (sid, list(hashes), write.node_ids))
        return write

    async def compact(self, session_id: str, *, capacity: ModelCapacity,
                      instructions: str | None = None, system: str | None = None,
                      tools: Tools | None = None) -> CompactionOutcome:
        """Manual compaction of a mirrored session (SPEC M1-M6)."""
        async with self._sessions.state(session_id).lock:
            await self._sessions.settle_auto(session_id)
            sizer = self._sessions.sizer(session_id, capacity, system, tools)
            fit = self._session_fit(session_id, sizer,
                                    await self._sessions.read_branch(session_id))
            return await fit.compact("manual", instructions=instructions)

    async def wait_idle(self, session_id: str | None = None) -> None:
        """Wait for background auto compactions (of one session, or all) to end."""
        ids = [session_id] if session_id is not None else list(self._sessions.ids())
        for sid in ids:
            await self._sessions.take_write(sid)
            await self._sessions.settle_auto(sid)

    # ------------------------------------------------------------------ internals

    recheck_seconds = RECHECK_SECONDS  # SPEC D2: how long a held branch is trusted

    def _session_fit(self, session_id: str, sizer: Sizer, branch: Branch) -> SessionFit:
        """The session as the sizing driver's target (`runtime.fitting`): a checkpoint
        it commits is indexed under the message before it (a retry keeps it)."""
        async def index(outcome: CompactionOutcome, planned_on: Branch) -> None:
            await index_checkpoint(self.store, session_id, outcome, planned_on)

        return SessionFit(self.store, session_id, sizer, self._summarize, branch,
                          on_compacted=index, recall=self._auto_recall)
