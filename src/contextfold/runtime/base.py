"""What one conversation holds, and the compactions it runs (the base of `Conversation`).

Store and session, model and budgets, the in-memory branch, the event bus and the
compaction runner; the read-only views a UI needs (state, gauge, projection); and the
internal helpers that start foreground and background compactions. `Conversation` adds the
operations (send, tool turns, retry / edit / fork, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..core.models.budget import Budget, CompactionSettings, ModelCapacity
from ..core.planning.plan import Trigger
from ..core.sizing.estimator import Estimate
from ..core.values.messages import Message, Node, ToolCallPart
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.projection import Projection, project
from ..providers.base import ChatModel, ToolSpec
from ..store import ReadOnlySessionError
from ..store.protocol import SessionStore
from .auto_recall import AutoRecall
from .compaction import CompactionOutcome, CompactionRequest, compact_session
from .driver import session_sizer, summarizer_budget
from .errors import BusyError, SendAbortedError
from .events import ConversationState, Event, EventBus, EventKind, EventStream
from .fitting import auto_due
from .recall import DEFAULT_EXPAND_TOKENS, RECALL_TOOL_NAMES, RECALL_TOOLS, Recall
from .runner import CompactionRunner, Finished
from .sizing import Gauge, Sizer
from .summarizers import FallbackNote, guarded
from .turns import RunTools, open_tool_calls

OverflowPolicy = Literal["surface", "compact_and_retry_once"]


class ConversationBase:
    """State and compaction plumbing of one live session (see `Conversation`)."""

    def __init__(self, store: SessionStore, session_id: str, *, model: ChatModel,
                 capacity: ModelCapacity, system: str | None = None,
                 tools: Sequence[ToolSpec] | None = None, summarizer: Any = None,
                 overflow_policy: OverflowPolicy = "surface",
                 settings: CompactionSettings | None = None,
                 summarizer_timeout: float | None = 300.0, max_tool_rounds: int = 50,
                 run_tools: RunTools | None = None, recall: bool = True) -> None:
        if overflow_policy not in ("surface", "compact_and_retry_once"):
            raise ValueError(f"overflow_policy must be 'surface' or 'compact_and_retry_once', "
                             f"not {overflow_policy!r}")
        if max_tool_rounds < 1:
            raise ValueError(f"max_tool_rounds must be at least 1, got {max_tool_rounds}")
        self.store = store
        self.session_id = session_id
        self.overflow_policy: OverflowPolicy = overflow_policy
        self.settings = settings
        self.max_tool_rounds = max_tool_rounds
        self.run_tools = run_tools
        self._system = system
        self._app_tools = tuple(tools or ())
        # SPEC L2: the recall tools are offered unless the application opts out.
        self._recall = Recall(store, session_id) if recall else None
        # SPEC L5: the block of folded excerpts each request gets (settings.auto_recall_share).
        self._auto_recall = AutoRecall(store)
        self._tools = self._app_tools + (RECALL_TOOLS if recall else ())
        if recall:
            clash = sorted(RECALL_TOOL_NAMES & {t.name for t in self._app_tools})
            if clash:
                raise ValueError(f"tool name(s) {', '.join(clash)} are the runtime's recall "
                                 "tools: rename yours or open the conversation with recall=False")
        self._summarizer = summarizer
        self._summarize = guarded(summarizer, timeout=summarizer_timeout,
                                  on_fallback=self._fallback_used)
        self._bus = EventBus()
        self._runner = CompactionRunner(session_id, self._bus, self.reload)
        self._turn_lock = asyncio.Lock()
        self._branch: Branch | None = None
        self._damaged: DamagedBranch | None = None
        # The projection of `_branch`, derived once per branch object (nodes never change).
        self._projected: tuple[Branch | None, Projection] = (None, Projection(None, ()))
        self._set_model(model, capacity)

    # ------------------------------------------------------------------ what a UI reads

    @property
    def model(self) -> ChatModel:
        return self._model

    @property
    def capacity(self) -> ModelCapacity:
        return self._capacity

    @property
    def budget(self) -> Budget:
        return self._sizer.budget

    @property
    def sizer(self) -> Sizer:
        """Estimates and the sizing policy for the model in use (`runtime.sizing`)."""
        return self._sizer

    @property
    def system(self) -> str | None:
        return self._system

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """Every tool the model is offered: the application's, then recall's (SPEC L2)."""
        return self._tools

    @property
    def recall(self) -> Recall | None:
        """Search and expand over this session's branch (None when opted out)."""
        return self._recall

    @property
    def state(self) -> ConversationState:
        """idle / compacting (started_at, trigger, cancellable) / failed (reason)."""
        return self._runner.state

    @property
    def read_only(self) -> bool:
        return self._damaged is not None

    @property
    def branch(self) -> Branch | DamagedBranch | None:
        """The branch as last loaded (O(tail): from the latest checkpoint's boundary)."""
        return self._damaged if self._damaged is not None else self._branch

    @property
    def open_tool_calls(self) -> tuple[ToolCallPart, ...]:
        """Tool calls of the current turn that still wait for results."""
        return tuple(open_tool_calls(self._branch).values())

    def projection(self) -> Projection:
        """What the model sees next (SPEC T3), without the system prompt and tools."""
        branch = self._branch
        if branch is None:
            return Projection(None, ())
        if self._projected[0] is not branch:
            self._projected = (branch, project(branch))
        return self._projected[1]

    async def request_projection(self) -> Projection:
        """What the next request sends: the projection with its automatic recall block
        (SPEC L5; the projection as it is when recall finds nothing or is off)."""
        return await self._auto_recall.apply(self.session_id, self.projection(), self._sizer)

    def estimate(self, pending: Sequence[Message] = ()) -> Estimate:
        """Estimated size of the next request with `pending` drafts (SPEC P1, E1-E5)."""
        return self._sizer.estimate(self.projection(), pending)

    def gauge(self, pending: Sequence[Message] = ()) -> Gauge:
        """Tokens the next request uses against the safe limit, for a context gauge."""
        return self._sizer.gauge(self.estimate(pending))

    async def history(self, *, limit: int | None = None,
                      before: str | None = None) -> Branch | DamagedBranch:
        """The durable branch, checkpoints included (for /history).

        With `limit`, one page: the branch's last `limit` nodes, or the `limit` nodes before
        node `before` (page back from a page's first node); `complete` is False while older
        nodes exist. A page reads `limit` rows however long the history. Without `limit`,
        the whole branch from its root.
        """
        if limit is None:
            if before is not None:
                raise ValueError("history(before=...) pages back: give a limit too")
            return await self.store.load_full_branch(self.session_id)
        return await self.store.load_branch_page(self.session_id, limit=limit, before_id=before)

    def events(self) -> EventStream:
        """Async iterator over events from now on: `async for event in conv.events()`."""
        return self._bus.stream()

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call `callback(event)` for every event; returns an unsubscribe function."""
        return self._bus.subscribe(callback)

    async def reload(self) -> None:
        """Re-read the branch from the store (after a stale commit or an outside change)."""
        branch = await self.store.load_branch(self.session_id)
        if isinstance(branch, DamagedBranch):
            self._damaged, self._branch = branch, None
        else:
            self._damaged, self._branch = None, branch

    async def wait_idle(self) -> Finished | None:
        """Wait for a running compaction to end; how it ended (None if none ran)."""
        return await self._runner.wait()

    # ------------------------------------------------------------------ internals: compaction

    async def _compact(self, trigger: Trigger, *, pending: Sequence[Message] = (),
                       instructions: str | None = None, budget: Budget | None = None,
                       estimate_tokens: int | None = None, **edit: Any) -> Finished:
        """Run one compaction in the foreground (still cancellable) and wait for it.
        `edit`: `compact_session`'s SPEC M7 arguments (summary_text, base)."""
        self._not_busy("compact")
        sizer = self._sizer
        budget = budget or sizer.budget
        held = self._auto_recall.held(self.session_id, self.projection())  # SPEC Q3 with Q5

        async def work() -> CompactionOutcome:
            return await compact_session(CompactionRequest.for_sizer(
                self.store, self.session_id, sizer, budget=budget, trigger=trigger,
                summarize=self._summarize, instructions=instructions, pending=tuple(pending),
                summarizer_budget=self._summarizer_budget(), estimate_tokens=estimate_tokens,
                branch=self._branch, recalled=held, **edit))

        self._runner.start(trigger, work)
        finished = await self._runner.wait()
        assert finished is not None
        return finished

    def _schedule_auto(self) -> None:
        """After a completed turn: compact in the background if above the threshold (A1)."""
        if self._branch is None or self._runner.running:
            return
        projection, sizer = self.projection(), self._sizer
        if not auto_due(sizer, projection, self._auto_recall, self.session_id):
            return
        held = self._auto_recall.held(self.session_id, projection)  # SPEC Q3 with Q5

        async def work() -> CompactionOutcome:
            return await compact_session(CompactionRequest.for_sizer(
                self.store, self.session_id, sizer, trigger="auto", summarize=self._summarize,
                summarizer_budget=self._summarizer_budget(), branch=self._branch,
                recalled=held))

        self._runner.start("auto", work)

    async def _wait_for_compaction(self, draft: Message | None) -> None:
        """U2/U3: a send waits for a running compaction; on failure or cancel it stops."""
        if not self._runner.running:
            self._runner.take_finished()  # one that already ended was already reported
            return
        finished = await self._runner.wait()
        if finished is None or finished.ok:
            return
        detail = "" if finished.error is None else str(finished.error)
        raise SendAbortedError(draft, finished.status, detail)

    def _summarizer_budget(self) -> Budget | None:
        return summarizer_budget(self._summarize, self.settings)

    def _fallback_used(self, note: FallbackNote) -> None:
        self._publish("summarizer_fallback", trigger=self.state.trigger,
                      reason="; ".join(note.problems), data={"summarizer": note.summarizer})

    # ------------------------------------------------------------------ internals: misc

    def _set_model(self, model: ChatModel, capacity: ModelCapacity) -> None:
        if not isinstance(capacity, ModelCapacity):
            raise TypeError(f"capacity must be a ModelCapacity (e.g. from capacity_for()), "
                            f"not {type(capacity).__name__}")
        self._model = model
        self._capacity = capacity
        # SPEC Q2/Q3: the summariser prices the cost trigger's compactions (the offline one
        # is free; one reading the session's prefix pays cache reads).
        self._sizer = session_sizer(capacity, settings=self.settings, system=self._system,
                                    tools=self._tools, summarize=self._summarize)
        if self._recall is not None:
            # One expansion may take a tenth of the safe limit: enough to read a few
            # messages, never enough to force a compaction by itself.
            self._recall.expand_tokens = max(
                200, min(DEFAULT_EXPAND_TOKENS, self._sizer.budget.safe_input_limit // 10))

    async def _extend(self, nodes: Sequence[Node]) -> None:
        """Add nodes this conversation just appended at the leaf, without re-reading the
        tail (O(tail) per message adds up over hundreds of turns). Appends are conditional
        on the leaf we hold, so memory and database agree; anything unexpected re-reads."""
        branch = self._branch
        if branch is None or not nodes or nodes[0].parent_id != branch.leaf_id:
            await self.reload()
            return
        # One append (or append_many) is one leaf move, one revision bump.
        self._branch = branch.grown(nodes)

    def _not_busy(self, operation: str) -> None:
        if self._runner.running:
            raise BusyError(operation)

    def _require_writable(self) -> None:
        if self._damaged is not None:
            raise ReadOnlySessionError(self.session_id, self._damaged.problems)

    def _leaf_id(self) -> str | None:
        return self._branch.leaf_id if self._branch is not None else None

    def _last_message(self) -> Message | None:
        if self._branch is None:
            return None
        for node in reversed(self._branch.nodes):
            if node.message is not None:
                return node.message
        return None

    def _publish(self, kind: EventKind, *, trigger: Trigger | None = None,
                 reason: str | None = None, tokens: int | None = None,
                 limit: int | None = None, data: dict[str, Any] | None = None) -> None:
        self._bus.publish(Event(kind=kind, session_id=self.session_id, trigger=trigger,
                                reason=reason, tokens=tokens, limit=limit, data=data or {}))
