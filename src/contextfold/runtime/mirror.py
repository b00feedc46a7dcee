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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from ..core.budget import Budget, CompactionSettings, ModelCapacity
from ..core.content_chain import ChainMemo, chain_link, opens_with_provider_compaction
from ..core.estimator import Estimate
from ..core.fit import Blocked
from ..core.masking import MaskedNode
from ..core.messages import Message, Node, TextPart, utc_now
from ..core.projection import Projection, prefix_text, project, provider_compaction_index
from ..core.recall_text import client_recall_tools
from ..core.runs import leading_run
from ..core.tree import Branch
from ..ids import new_id
from ..providers.base import ToolSpec
from ..store.protocol import SessionStore
from ..store.values import MirrorWrite
from .auto_recall import AutoRecall
from .compaction import CompactionOutcome, take_up_provider_compaction
from .driver import BackgroundAuto, session_sizer
from .fitting import RECHECK_SECONDS, SessionFit, fit_request, healthy, too_large
from .held import Held, text_bytes
from .sizing import Sizer
from .summarizers import guarded

log = logging.getLogger("contextfold.mirror")

Tools = Sequence[ToolSpec | Mapping[str, Any]]


class ProjectedItem(NamedTuple):
    """One message of the request to send, in order.

    `index`: position in the messages given to `sync` (None for the checkpoint and pins
    prefix, and for the recall block, SPEC L5, which has `recall` set). `verbatim`: the
    message is what the client sent, so a face may forward its own object or bytes;
    otherwise send `message` (masked or clipped by the projection, V1/K6). (A named tuple:
    one is made per message of every request.)
    """

    index: int | None
    message: Message
    verbatim: bool
    # A note contextfold puts right before a message: its turn's automatic recall block
    # (SPEC L5) or a pin note, where a pin or unpin since the checkpoint happened (N1, Q5).
    recall: bool = False


@dataclass(frozen=True)
class Synced:
    """The outcome of one `sync`: where the messages are stored and what to send."""

    session_id: str
    messages: tuple[Message, ...]
    hashes: tuple[str, ...]
    node_ids: tuple[str, ...]  # the stored node of each message given
    projection: Projection
    estimate: Estimate
    budget: Budget
    capacity: ModelCapacity
    compactions: tuple[CompactionOutcome, ...] = ()
    appended: int = 0  # messages stored by this call (the rest were stored before)
    moved: str | None = None  # None, "append", "branch" (a difference) or "switch"
    created: bool = False  # a new session was started for these messages
    # The client's own recall tools (`contextfold mcp`'s, under its names): the checkpoint's
    # recall note names them (SPEC L6).
    recall_tools: tuple[str, str] | None = None
    # `Mirror(defer=True)`: the new user message, not stored yet (its node, named and
    # projected): it is stored with the reply, in the reply's transaction, or alone when
    # no reply comes (`no_reply`).
    deferred: Node | None = None
    chain_scope: str = "default"  # the scope its hashes were made in

    @cached_property
    def source_index(self) -> Mapping[str, int]:
        """Node id -> the position of its message in the messages given (made when
        `items()` needs it: a request sent as it came never does)."""
        return dict(zip(self.node_ids, range(len(self.node_ids)), strict=True))

    @property
    def prefix_text(self) -> str | None:
        """The checkpoint summary and pins as one text, byte-identical for the same
        checkpoint, pins and recall tools (SPEC Y4); None without a checkpoint or pins."""
        return prefix_text(self.projection, self.recall_tools)

    def as_sent(self) -> bool:
        """Is the request the client's own list, every message as it came and in order? (No
        checkpoint, pins, clips or recall block, and the projection is the stored nodes of
        the messages given.) A face then forwards the client's messages without walking
        `items()` (issue 26: that walk was linear in the history on every request).

        The projected nodes and `node_ids` both lie on the branch's one path from its root
        to its leaf, and without a checkpoint the projection holds every message node of it;
        the same count with the same first and last node is the same sequence."""
        p = self.projection
        if p.checkpoint is not None or p.sent_pins or p.pin_notes or p.clips or p.recalled:
            return False
        nodes, ids = p.messages, self.node_ids
        return len(nodes) == len(ids) > 0 and nodes[0].id == ids[0] and \
            nodes[-1].id == ids[-1]

    @property
    def tail_start(self) -> int | None:
        """Index of the first message sent from the client's list (None: nothing is)."""
        for item in self.items():
            if item.index is not None:
                return item.index
        return None

    @property
    def leaf_hash(self) -> str | None:
        return self.hashes[-1] if self.hashes else None

    def items(self) -> list[ProjectedItem]:
        """The request's messages: a provider's own compaction the checkpoint starts from
        (SPEC Y7), the prefix (if any), then the projected tail."""
        out: list[ProjectedItem] = []
        if self.projection.summary is not None:
            out += [ProjectedItem(None, m, False) for m in self.projection.summary.provider_base]
        joinable = -1  # the prefix message, which the recall block may join
        text = self.prefix_text
        if text is not None:
            out.append(ProjectedItem(None, Message(role="user", parts=(TextPart(text=text),)),
                                     False))
            joinable = len(out) - 1
        projection = self.projection
        clips, index_of = projection.clips, self.source_index

        def add_notes(before: str | None) -> None:
            # SPEC L5, Q5: a pin note where it happened, and its turn's recall block, each
            # its own user-side message right before the message (there in every later
            # request until the next checkpoint); one right after the prefix or another
            # note joins that message (two user messages in a row are not a valid
            # Messages request), never a provider's compaction (SPEC Y7: that message goes
            # back to its provider as it came).
            for text in projection.notes_before(before):
                block = TextPart(text=text)
                if out and (len(out) - 1 == joinable or out[-1].recall):
                    last = out[-1]
                    out[-1] = ProjectedItem(None, last.message.model_copy(
                        update={"parts": (*last.message.parts, block)}), False, last.recall)
                else:
                    out.append(ProjectedItem(None, Message(role="user", parts=(block,)),
                                             False, recall=True))

        for node in projection.messages:
            add_notes(node.id)
            index = index_of.get(node.id)
            if node.id in clips:  # SPEC K6: a clipped copy differs from the stored node
                out.append(ProjectedItem(index, projection.message_of(node), False))
                continue
            # The stored node has the client's message content (same chain hash); only a
            # masked (V1) projection copy differs from it.
            out.append(ProjectedItem(index, node.payload,  # type: ignore[arg-type]
                                     index is not None and not isinstance(node, MaskedNode)))
        # A pin note after the client's latest message (a pin that raced the request) goes
        # out with the next request, before the message after it: after this request's
        # content, so no cached prefix breaks (SPEC Q5), and never a second user message
        # in a row.
        return out


_Stored = tuple[str, list[str], tuple[str, ...]]  # session id, chain hashes, their node ids


def _known(stored: _Stored | None, session_id: str, hashes: Sequence[str]) -> tuple[str, ...]:
    """The node ids of the leading `hashes` the last sync of the same scope stored in
    `session_id` (none when that sync went to another session)."""
    if stored is None or stored[0] != session_id:
        return ()
    old, ids = stored[1], stored[2]
    limit = min(len(old), len(ids), len(hashes))
    return ids[:leading_run(hashes[:limit], old[:limit])]


def _node_bytes(nodes: Sequence[Node]) -> int:
    return sum(text_bytes(n, 7) for n in nodes)


@dataclass(eq=False)
class _Session:
    """What this process holds of one mirrored session (SPEC Y14: one value in the
    process's `Held` cache, evicted when idle and read again from the store when the
    conversation returns): its lock, sizer, the branch it was last synced to with the chain
    hash of its leaf, the metadata last written, and what is pending on it (the expected
    reply, a deferred message's write, the background auto check). `provider_compacts`:
    its client asked the provider to compact (SPEC Y7), so the auto check defers to it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sizer: Sizer | None = None
    sizer_bytes: int = 0
    branch: Branch | None = None
    branch_bytes: int = 0
    leaf_hash: str | None = None
    metadata: dict[str, Any] | None = None
    expected: asyncio.Event | None = None
    write: asyncio.Task[None] | None = None
    auto: BackgroundAuto = field(default_factory=lambda: BackgroundAuto(log))
    provider_compacts: bool = False
    # When the branch was last read from the store, its rows' hashes checked (SPEC D2).
    checked_at: float = field(default_factory=time.monotonic)

    @property
    def busy(self) -> bool:
        """In use: evicting it now would give its next request another lock."""
        return self.lock.locked() or self.expected is not None or \
            (self.write is not None and not self.write.done()) or \
            self.auto.running

    def size(self) -> int:
        return 600 + self.sizer_bytes + self.branch_bytes + \
            (48 * len(self.sizer.costs) if self.sizer is not None else 0) + \
            (text_bytes(self.metadata) if self.metadata else 0)


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
        # recently used out; the store stays the truth): each session's `_Session`
        # ("mirror", session); recently stored chain ends -> session ("end", hash), so a
        # steady conversation costs one lookup-and-append transaction per call;
        self.held = held if held is not None else Held()
        # the hashes of each conversation's last list ("chain", ...): a resent list with a
        # few messages added hashes those only (a 5,100-message list took 1.9 s in full);
        self._chains = ChainMemo(self.held)
        # and what each conversation last stored ("stored", chain scope, session): its
        # hashes and node ids, so a resent list is looked up in the store from its last
        # known message only (`mirror_extend(known=)`). Keyed by chain scope and session:
        # clients that share a scope (the same key and agent) would otherwise evict one
        # another's lists (issue 26: 4 clients cost ~2x the CPU per request of 1).
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
            session_id, created = await self._find_or_create(
                hashes, metadata, title,
                refuse=lambda: self._refuse_alone(msgs, capacity, system, tools),
                anchored=opens_with_provider_compaction(msgs[0]))
        elif metadata:
            await self._set_metadata(session_id, metadata)
        if provider_compaction:
            self._state(session_id).provider_compacts = True
        await self._reply_recorded(session_id)
        async with self._lock(session_id):
            await self._settle_auto(session_id)
            await self._recheck(session_id)
            sizer = self._sizer(session_id, capacity, system, tools)
            # A new user message is the draft of SPEC P1: compaction runs before it is stored,
            # so it is never summarised and always goes out as sent (Y2).
            # Fast path (the steady agent loop): the new messages follow the branch this
            # process holds and fit with it, so nothing needs compacting: one transaction.
            fits = msgs[-1].role == "user" and self._fits_after_cached(
                session_id, sizer, hashes, msgs)
            hold = msgs[-1].role == "user" and not fits
            known = _known(self.held.get(("stored", chain_scope, session_id)), session_id,
                           hashes)
            cached = self._state(session_id).branch
            if fits and self.defer and cached is not None and \
                    len(known) == len(msgs) - 1 and cached.leaf_id == known[-1] and \
                    provider_compaction_index(cached) is None:
                # Only the new user message is new, it follows the branch this process
                # holds, and it fits: nothing to compact, nothing to read; it is named now
                # and stored with the reply (`record_reply`).
                draft = Node(id=new_id(), parent_id=cached.leaf_id, created_at=utc_now(),
                             payload=msgs[-1])
                self._remember(hashes[-1], session_id)
                projection = await self._auto_recall.apply(
                    session_id, project(cached.grown((draft,))), sizer)
                ids = (*known, draft.id)
                return Synced(session_id=session_id, messages=msgs, hashes=tuple(hashes),
                              node_ids=ids, projection=projection,
                              estimate=sizer.estimate(projection), budget=sizer.budget,
                              capacity=capacity, appended=1, moved="append",
                              recall_tools=client_recall_tools(_tool_names(tools or ())),
                              deferred=draft, chain_scope=chain_scope)
            first = await self.store.mirror_extend(session_id, hashes, msgs, hold_last=hold,
                                                   known=known)
            if cached is None and created and first.from_leaf is None:
                # A session this call created: its branch is what was just written, not
                # read back (issue 26: the first request of a long session).
                cached = Branch(nodes=(), complete=True, revision=0)
            if cached is not None and cached.leaf_id == first.from_leaf and \
                    first.moved in (None, "append"):
                branch = await self._grown(session_id, cached, first.nodes)
            else:
                branch = await self._branch(session_id)
            branch = await self._take_up(session_id, sizer, branch)
            fit = self._session_fit(session_id, sizer, branch)
            compactions = await fit_request(fit, msgs[-1:] if first.held else ())
            branch = fit.branch
            write = first
            if first.held:
                write = await self.store.mirror_extend(session_id, hashes, msgs,
                                                       known=first.node_ids)
                branch = await self._grown(session_id, branch, write.nodes)
            self._hold_branch(session_id, branch, hashes[-1])
            self._remember(hashes[-1], session_id)
            self._remember_stored((chain_scope, session_id), (session_id, hashes, write.node_ids))
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
                      capacity=capacity, compactions=tuple(compactions), appended=len(new_nodes),
                      moved=moved, created=created,
                      recall_tools=client_recall_tools(_tool_names(tools or ())),
                      chain_scope=chain_scope)

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
        self._state(synced.session_id).expected = asyncio.Event()

    def no_reply(self, synced: Synced) -> None:
        """The expected reply will not come (an upstream error, a broken stream). A
        deferred user message is stored alone (a task the session's next `sync` and
        `wait_idle` wait for)."""
        state = self._state(synced.session_id)
        if synced.deferred is not None and state.write is None:
            state.write = asyncio.get_running_loop().create_task(self._store_deferred(synced))
        self._release(synced)

    def _replies_due(self) -> list[asyncio.Event]:
        """Every answer of this process still to be recorded (compactions included)."""
        due = list(self._compactions_due.values())
        for key in list(self.held):
            state = self.held.get(key) if isinstance(key, tuple) and key[0] == "mirror" \
                else None
            if state is not None and state.expected is not None:
                due.append(state.expected)
        return due

    def awaiting_reply(self) -> list[str]:
        """The sessions whose next `sync` waits for a reply to be recorded."""
        return [key[1] for key in self.held if isinstance(key, tuple) and key[0] == "mirror"
                and self.held.get(key).expected is not None]

    def _release(self, synced: Synced) -> None:
        due = self._compactions_due.pop(id(synced), None)
        if due is not None:
            due.set()
        state = self.held.get(("mirror", synced.session_id))
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
        state = self._state(session_id)
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
        self._remember(reply_hash, synced.session_id)
        # The reply's node, when this call wrote it (the last id is the reply's).
        node = write.nodes[-1] if write.nodes and write.nodes[-1].id == write.node_ids[-1] \
            else None
        if node is None:  # the same reply was recorded before: nothing new to check
            branch = await self._branch(synced.session_id)
            return next(n for n in reversed(branch.nodes) if n.id == write.node_ids[-1])
        state = self._state(synced.session_id)
        if state.sizer is not None and not _left_to_provider(state):
            sid, sizer, branch = synced.session_id, state.sizer, state.branch

            async def fit() -> SessionFit:
                async def index(outcome: CompactionOutcome, _planned_on: Branch) -> None:
                    # The checkpoint is found by the reply's hash (a retry keeps it).
                    if outcome.status == "compacted" and outcome.checkpoint_id is not None:
                        await self.store.mirror_index_node(sid, reply_hash,
                                                           outcome.checkpoint_id, node.id)

                return SessionFit(self.store, sid, sizer, self._summarize,
                                  branch if branch is not None else await self._branch(sid),
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
        cached = self._state(sid).branch
        if cached is not None and write.nodes and write.nodes[0].parent_id == cached.leaf_id:
            self._hold_branch(sid, cached.grown(write.nodes), hashes[-1], write.nodes)
        elif cached is not None and (write.nodes or cached.leaf_id != write.leaf_id):
            self._drop_branch(sid)  # elsewhere on the tree: read again
        self._remember_stored((synced.chain_scope, sid), (sid, list(hashes), write.node_ids))
        return write

    async def compact(self, session_id: str, *, capacity: ModelCapacity,
                      instructions: str | None = None, system: str | None = None,
                      tools: Tools | None = None) -> CompactionOutcome:
        """Manual compaction of a mirrored session (SPEC M1-M6)."""
        async with self._lock(session_id):
            await self._settle_auto(session_id)
            sizer = self._sizer(session_id, capacity, system, tools)
            fit = self._session_fit(session_id, sizer, await self._branch(session_id))
            return await fit.compact("manual", instructions=instructions)

    async def wait_idle(self, session_id: str | None = None) -> None:
        """Wait for background auto compactions (of one session, or all) to end."""
        ids = [session_id] if session_id is not None else \
            [key[1] for key in self.held if isinstance(key, tuple) and key[0] == "mirror"]
        for sid in ids:
            state = self.held.get(("mirror", sid))
            if state is None:
                continue
            write, state.write = state.write, None
            if write is not None:
                await write
            await self._settle_auto(sid)

    # ------------------------------------------------------------------ internals

    def _state(self, session_id: str) -> _Session:
        """What this process holds of the session (made afresh after an eviction)."""
        key = ("mirror", session_id)
        state = self.held.get(key)
        if state is None:
            state = _Session()
            self.held.put(key, state, state.size())
        return state

    def _hold_branch(self, session_id: str, branch: Branch, leaf_hash: str,
                     grown: Sequence[Node] | None = None) -> None:
        """Keep `branch` as the session's memo (`grown`: the nodes it adds to the held one,
        so only those are measured)."""
        state = self._state(session_id)
        if branch is not state.branch:
            state.branch_bytes = state.branch_bytes + _node_bytes(grown) \
                if grown is not None and state.branch is not None else _node_bytes(branch.nodes)
        state.branch, state.leaf_hash = branch, leaf_hash
        self.held.resize(("mirror", session_id), state.size())

    def _drop_branch(self, session_id: str) -> None:
        state = self.held.get(("mirror", session_id))
        if state is not None:
            state.branch, state.leaf_hash, state.branch_bytes = None, None, 0

    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._state(session_id).lock

    def _sizer(self, session_id: str, capacity: ModelCapacity, system: str | None,
               tools: Tools | None) -> Sizer:
        state = self._state(session_id)
        sizer = session_sizer(capacity, settings=self.settings, system=system, tools=tools,
                              held=state.sizer)
        if sizer is not state.sizer:
            state.sizer, state.sizer_bytes = sizer, text_bytes(system) + text_bytes(sizer.tools, 6)
            self.held.resize(("mirror", session_id), state.size())
        return sizer

    def _fits_after_cached(self, session_id: str, sizer: Sizer, hashes: Sequence[str],
                           msgs: Sequence[Message]) -> bool:
        """Do `msgs` continue the memoised branch, and fit with it without compacting?"""
        state = self._state(session_id)
        cached, leaf_hash = state.branch, state.leaf_hash
        if cached is None or leaf_hash is None or cached.leaf_id is None:
            return False
        node = cached.nodes[-1] if cached.nodes else None
        if node is None or node.message is None:
            return False  # a checkpoint or pin at the leaf: take the careful path
        try:
            k = len(hashes) - 1 - list(reversed(hashes)).index(leaf_hash)
        except ValueError:
            return False
        new = tuple(msgs[k + 1:])
        if not new:
            return False
        estimate = sizer.estimate(project(cached), new)
        return estimate.tokens <= sizer.budget.safe_input_limit

    def _remember_stored(self, key: tuple[str, str], stored: _Stored) -> None:
        self.held.put(("stored", *key), stored, 130 * len(stored[1]) + 90 * len(stored[2]))

    def _remember(self, chain_end: str, session_id: str) -> None:
        self.held.put(("end", chain_end), session_id, len(chain_end) + len(session_id) + 98)

    async def _set_metadata(self, session_id: str, metadata: Mapping[str, Any]) -> None:
        wanted = dict(metadata)
        state = self._state(session_id)
        if state.metadata != wanted:
            await self.store.update_session_metadata(session_id, wanted)
            state.metadata = wanted

    async def _grown(self, session_id: str, branch: Branch, nodes: Sequence[Node]) -> Branch:
        """`branch` with `nodes` just appended at its leaf (else read again)."""
        if not nodes:
            return branch
        if nodes[0].parent_id == branch.leaf_id:
            return branch.grown(nodes)
        return await self._branch(session_id)

    def _refuse_alone(self, msgs: Sequence[Message], capacity: ModelCapacity,
                      system: str | None, tools: Tools | None) -> None:
        """A new conversation of one message that no compaction could fit is refused
        before its session is made (SPEC P3): a refused request leaves no empty session.
        (A longer list is stored up to its last message either way: that history is real.)"""
        if len(msgs) != 1:
            return
        sizer = session_sizer(capacity, settings=self.settings, system=system, tools=tools)
        decision = sizer.decide(project(Branch(nodes=(), complete=True, revision=0)), msgs)
        if isinstance(decision, Blocked):
            raise too_large(decision, capacity.model)

    async def _find_or_create(self, hashes: Sequence[str], metadata: Mapping[str, Any] | None,
                              title: str | None,
                              refuse: Callable[[], None] | None = None,
                              anchored: bool = False) -> tuple[str, bool]:
        for h in reversed(hashes):  # a chain end stored by this process: no lookup needed
            sid = self.held.get(("end", h))
            if sid is not None:
                if metadata:
                    await self._set_metadata(sid, metadata)
                return sid, False
        for attempt in range(2):
            hits = await self.store.mirror_lookup(hashes)
            for h in reversed(hashes):  # the longest stored prefix names the tree
                if h in hits:
                    sid = await self.store.mirror_session_of_tree(hits[h].tree_id)
                    if sid is not None:
                        if metadata:
                            await self._set_metadata(sid, metadata)
                        return sid, False
            due = self._replies_due() if anchored and not attempt else []
            if not due:
                break
            # SPEC Y7: the list opens with a provider's compaction nothing stored knows; an
            # answer being recorded may hold it (the client swapped the block in, or dropped
            # what came before the item, as soon as it had it): wait for those, bounded,
            # then look again.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in due)),
                                       self.reply_wait)
        if refuse is not None:
            refuse()
        info = await self.store.create_session(title=title, metadata=metadata)
        if metadata:
            self._state(info.id).metadata = dict(metadata)
        return info.id, True

    async def _branch(self, session_id: str) -> Branch:
        branch = healthy(await self.store.load_branch(session_id), session_id)
        self._state(session_id).checked_at = time.monotonic()
        return branch

    recheck_seconds = RECHECK_SECONDS

    async def _recheck(self, session_id: str) -> None:
        """SPEC D2 in a long-running process: a branch held longer than `recheck_seconds`
        is read again before it is used, and the store checks each row it reads against its
        hash, so a row edited in place by hand (or by another program) makes the session
        read-only here as in a fresh process: `ReadOnlySessionError` naming the session and
        the node, before anything is written. One O(tail) read per active session per
        period, none per request."""
        state = self._state(session_id)
        held = state.branch
        if held is None or time.monotonic() - state.checked_at < self.recheck_seconds:
            return
        fresh = await self._branch(session_id)  # raises on damage; the held one stays
        if fresh.leaf_id == held.leaf_id and state.leaf_hash is not None:
            self._hold_branch(session_id, fresh, state.leaf_hash)
        else:  # moved by another process meanwhile: read again where it is needed
            self._drop_branch(session_id)

    async def _take_up(self, session_id: str, sizer: Sizer, branch: Branch) -> Branch:
        """SPEC Y7: a provider's own compaction on the branch becomes the checkpoint the
        projection starts from, before anything is fitted (never summarised again)."""
        if provider_compaction_index(branch) is None:
            return branch
        outcome = await take_up_provider_compaction(self.store, session_id, branch,
                                                    sizer.budget)
        if outcome is None:
            return branch
        await self._index_checkpoint(session_id, outcome, branch)
        return await self._branch(session_id)

    def _session_fit(self, session_id: str, sizer: Sizer, branch: Branch) -> SessionFit:
        async def index(outcome: CompactionOutcome, planned_on: Branch) -> None:
            await self._index_checkpoint(session_id, outcome, planned_on)

        return SessionFit(self.store, session_id, sizer, self._summarize, branch,
                          on_compacted=index, recall=self._auto_recall)

    async def _index_checkpoint(self, session_id: str, outcome: CompactionOutcome,
                                branch: Branch) -> None:
        """A checkpoint committed after a mirrored message is found by that message's hash,
        so a client that goes back to it (a retry) keeps the compaction."""
        if outcome.status != "compacted" or outcome.checkpoint_id is None:
            return
        message = next((n for n in reversed(branch.nodes) if n.message is not None), None)
        if message is None:
            return
        found = await self.store.mirror_node_hash(session_id, message.id)
        if found is not None:
            await self.store.mirror_index_node(session_id, found, outcome.checkpoint_id,
                                               message.id)

    async def _settle_auto(self, session_id: str) -> None:
        state = self.held.get(("mirror", session_id))
        if state is not None:
            outcome = await state.auto.settle()
            if outcome is not None and outcome.status == "compacted":
                # The held branch has no checkpoint yet: read it again (a deferred message
                # would otherwise be sized without it).
                self._drop_branch(session_id)


def _left_to_provider(state: _Session) -> bool:
    """SPEC Y7: is the session's automatic compaction left to its provider? Yes once its
    client asked the provider to compact (this process saw it), or when its branch already
    goes on from a provider's compaction (also after a restart)."""
    if state.provider_compacts:
        return True
    branch = state.branch
    if branch is None:
        return False
    if provider_compaction_index(branch) is not None:
        return True
    latest = branch.latest_checkpoint
    cp = latest.checkpoint if latest is not None else None
    return cp is not None and bool(cp.provider_base)


def _tool_names(tools: Tools) -> list[str]:
    """The names of a request's tools (ToolSpecs, Anthropic tools, OpenAI functions)."""
    names = []
    for tool in tools:
        if isinstance(tool, ToolSpec):
            names.append(tool.name)
        elif isinstance(tool, Mapping):
            inner = tool.get("function")
            name = (inner if isinstance(inner, Mapping) else tool).get("name")
            if isinstance(name, str):
                names.append(name)
    return names
