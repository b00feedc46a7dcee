"""`Conversation`: the object an application holds for one live session.

    store = await open_store()
    conv = await Conversation.open(store, model=make_chat_model("anthropic/claude-sonnet-4-5"),
                                   capacity=capacity_for("claude-sonnet-4-5"))
    result = await conv.send("Find the papers on ...")

Every model request is preceded by a size check against the current model's safe limit, and
a compaction when it does not fit (SPEC P1-P3); after a completed turn the auto check runs in
the background, so the compaction happens between turns (A1-A4); tool calls and approvals are
never compacted while open (A2). During a compaction, retry / edit / fork / model switch /
a second compaction raise `BusyError` and a send waits for it (U1-U4).

One class, whole here (issue 39), composed of parts that each hold one idea: the branch as
held (`live_branch.LiveBranch`, the state every part shares), its pins (`pinning.Pins`), its
compactions in one cancellable runner (`runner.CompactionRunner`), the sizer and budgets of
the model in use (`driver.session_sizer`, `driver.budget_for`), the fit before a request
(`fitting.fit_request`), recall (`recall`, `auto_recall`). Each operation here is a few lines
over them.

Size: one public class whole (issue 39: not spread over mixins), the application's handle on
a session: nearly forty public operations and views, each a few lines over the parts above, and
the turn loop they share (request, record, answer recall, run tools; P4's one retry).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from ..core.models.budget import Budget, CompactionSettings, ModelCapacity
from ..core.planning.plan import Trigger
from ..core.sizing.estimator import Estimate
from ..core.sizing.fit import Blocked
from ..core.values.messages import Message, Node, Pin, ToolCallPart, ToolResultPart
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.projection import Projection, project
from ..providers.base import ChatModel, ChatRequest, ChatResponse, ToolSpec
from ..providers.errors import ContextOverflowError
from ..store.protocol import SessionStore
from .auto_recall import AutoRecall
from .compaction import (
    CompactionOutcome,
    PreviewBase,
    StalePreviewError,
    check_edit,
)
from .driver import budget_for, session_sizer
from .errors import (
    BusyError,
    RequestTooLargeError,
    SendAbortedError,
    ToolWorkflowError,
)
from .events import ConversationState, Event, EventBus, EventKind, EventStream
from .fitting import (
    fit_request,
    proved_capacity,
    too_large,
)
from .live_branch import LiveBranch
from .live_compaction import Compactions
from .pinning import Pins, one_pin_source
from .recall import DEFAULT_EXPAND_TOKENS, Recall, offered_tools
from .runner import CompactionRunner, Finished
from .sizing import Gauge, Sizer
from .summarizers import FallbackNote, guarded
from .turns import (
    OnText,
    RunTools,
    SendResult,
    ToolResults,
    as_user_message,
    ask,
    result_messages,
)

__all__ = ["Conversation", "OverflowPolicy"]

OverflowPolicy = Literal["surface", "compact_and_retry_once"]


class Conversation:
    """One session driven live: send, tool turns, compaction, retry/edit/fork, pins, events."""

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
        self.overflow_policy: OverflowPolicy = overflow_policy
        self.settings = settings
        self.max_tool_rounds = max_tool_rounds
        self.run_tools = run_tools
        self._live = LiveBranch(store, session_id)  # the state the parts below share
        self._pins = Pins(self._live)
        self._system = system
        self._app_tools = tuple(tools or ())
        # SPEC L2: the recall tools are offered unless the application opts out.
        self._tools = offered_tools(self._app_tools, recall)
        self._recall = Recall(store, session_id) if recall else None
        # SPEC L5: the block of folded excerpts each request gets (settings.auto_recall_share).
        self._auto_recall = AutoRecall(store)
        self._summarizer = summarizer
        self._summarize = guarded(summarizer, timeout=summarizer_timeout,
                                  on_fallback=self._fallback_used)
        self._bus = EventBus()
        self._runner = CompactionRunner(session_id, self._bus, self.reload)
        self._compactions = Compactions(self._live, self._runner, self._summarize,
                                        self._auto_recall)
        self._turn_lock = asyncio.Lock()
        self._set_model(model, capacity)

    # ------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, store: SessionStore, session_id: str | None = None, *, model: ChatModel,
                   capacity: ModelCapacity, title: str | None = None,
                   **options: Any) -> Conversation:
        """Open `session_id` (or create a new session) in `store`.

        `options`: system, tools (`ToolSpec`s), summarizer (None: offline extractive; an
        `LlmSummarizer`; or an async `plan -> (text, name)`), overflow_policy ("surface" or
        "compact_and_retry_once", SPEC P4), settings (`CompactionSettings`),
        summarizer_timeout (s), max_tool_rounds, run_tools (async callback running tools),
        recall (default True: offer `history_search` / `history_expand` and answer them in
        the tool loop, SPEC L2; False opts out).
        A damaged session opens read-only (SPEC D2): it can be read, not written.
        """
        if session_id is None:
            info = await store.create_session(title=title)
            session_id = info.id
        else:
            await store.get_session(session_id)  # SessionNotFoundError names the id
        conv = cls(store, session_id, model=model, capacity=capacity, **options)
        await conv.reload()
        return conv

    async def close(self) -> None:
        """Cancel a running compaction and end every event stream (the store stays open)."""
        self._runner.cancel()
        await self._runner.wait()
        self._bus.close()

    async def __aenter__(self) -> Conversation:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ what a UI reads

    @property
    def store(self) -> SessionStore:
        return self._live.store

    @store.setter
    def store(self, store: SessionStore) -> None:
        # A wrapped store (a test's failing commits, a tenant's scope) serves every read and
        # write of the branch from now on.
        self._live.store = store

    @property
    def session_id(self) -> str:
        return self._live.session_id

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
        return self._live.damaged is not None

    @property
    def branch(self) -> Branch | DamagedBranch | None:
        """The branch as last loaded (O(tail): from the latest checkpoint's boundary)."""
        return self._live.current

    @property
    def open_tool_calls(self) -> tuple[ToolCallPart, ...]:
        """Tool calls of the current turn that still wait for results."""
        return tuple(self._live.open_tool_calls().values())

    def projection(self) -> Projection:
        """What the model sees next (SPEC T3), without the system prompt and tools."""
        return self._live.projection()

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
        return await self._live.history(limit=limit, before=before)

    def events(self) -> EventStream:
        """Async iterator over events from now on: `async for event in conv.events()`."""
        return self._bus.stream()

    def subscribe(self, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Call `callback(event)` for every event; returns an unsubscribe function."""
        return self._bus.subscribe(callback)

    async def reload(self) -> None:
        """Re-read the branch from the store (after a stale commit or an outside change)."""
        await self._live.reload()

    async def wait_idle(self) -> Finished | None:
        """Wait for a running compaction to end; how it ended (None if none ran)."""
        return await self._runner.wait()

    # ------------------------------------------------------------------ sending

    async def send(self, message: Message | str, *, run_tools: RunTools | None = None,
                   on_text: OnText | None = None, node_id: str | None = None) -> SendResult:
        """Send a user message and get the reply (and run tools if a runner is given).

        Waits for a running compaction first (U2); if it fails or is cancelled, raises
        `SendAbortedError` with the draft (U3). Preflight (P1-P3): if the request with the
        draft does not fit, compacts; if it still cannot fit, raises `DraftTooLargeError`
        (nothing saved, nothing sent). `on_text` receives reply text as it streams.
        `node_id`: the id the user message is stored under (the store's idempotent append:
        if it is already stored, `DuplicateNodeError` and nothing is written twice).
        """
        draft = as_user_message(message)
        async with self._turn("send a message"):
            await self._wait_for_compaction(draft)
            self._live.require_writable()
            waiting = self._live.open_tool_calls()
            if waiting:
                raise ToolWorkflowError(
                    "tool calls wait for results (" + ", ".join(sorted(waiting)) + "): "
                    "add_tool_results() then continue_turn() before a new message")
            compactions = await self._preflight((draft,), draft)
            node = await self.store.append(self.session_id, draft,
                                           expected_leaf_id=self._live.leaf_id, node_id=node_id)
            await self._live.extend([node])
            return await self._run(
                [node], compactions, run_tools or self.run_tools, on_text, checked=True)

    async def add_tool_results(self, results: ToolResults) -> list[Node]:
        """Persist results for the open tool calls of the current turn (one transaction)."""
        async with self._turn("add tool results"):
            self._live.require_writable()
            messages = result_messages(results, self._live.open_tool_calls())
            nodes = await self.store.append_many(self.session_id, messages)
            await self._live.extend(nodes)
            return nodes

    async def continue_turn(self, *, run_tools: RunTools | None = None,
                            on_text: OnText | None = None) -> SendResult:
        """Ask the model for the next reply of the current turn (after tool results, or
        after a surfaced overflow / provider error left the turn without a reply)."""
        async with self._turn("continue the turn"):
            await self._wait_for_compaction(None)
            self._live.require_writable()
            waiting = self._live.open_tool_calls()
            if waiting:
                raise ToolWorkflowError("tool calls still wait for results: "
                                        + ", ".join(sorted(waiting)))
            last = self._live.last_message()
            if last is None or last.role == "assistant":
                raise ToolWorkflowError("nothing to continue: the turn already ended with the "
                                        "assistant's reply; send a new message instead")
            return await self._run([], [], run_tools or self.run_tools, on_text)

    # ------------------------------------------------------------------ compaction

    async def compact(self, instructions: str | None = None) -> CompactionOutcome:
        """Compact now (SPEC M1-M6). A no-op is a successful outcome that says why; a
        cancelled compaction returns a no-op with code "cancelled" (nothing was written)."""
        self._idle("compact")
        return await self._compactions.manual(self._sizer, self.settings,
                                              instructions=instructions)

    async def preview_compaction(self, instructions: str | None = None) -> CompactionOutcome:
        """SPEC M7: the checkpoint `compact()` would commit now, without committing it:
        status "preview", its `summary` (to edit), `checkpoint_text` (what the model would
        see) and `base` (pass it to `commit_summary`). A no-op says why, as `compact()`
        does. Runs the summariser; nothing is written."""
        self._idle("preview a compaction")
        return await self._compactions.preview(self._sizer, self.settings, instructions)

    async def commit_summary(self, text: str, *, base: PreviewBase | str | None = None
                             ) -> CompactionOutcome:
        """SPEC M7: compact now with `text` as the summary (a user's edit of a preview),
        committed as a new append-only checkpoint marked as edited by the user; the
        previous checkpoint stays in the tree. With `base` (a preview's), a session that
        moved since raises `StalePreviewError` and nothing is written."""
        check_edit(text)  # bad input is refused before a compaction starts
        if isinstance(base, str):
            base = PreviewBase.parse(base)
        self._idle("compact")
        held = self._live.branch
        if base is not None and held is not None and \
                (held.leaf_id, held.revision) != (base.leaf_id, base.revision):
            # Refused before any compaction starts (the store's check under the lease
            # covers another writer).
            raise StalePreviewError(base, PreviewBase(held.leaf_id, held.revision))
        return await self._compactions.manual(self._sizer, self.settings, summary_text=text,
                                              base=base)

    def cancel_compaction(self) -> bool:
        """Cancel a running compaction (SPEC C4, U1); False if none was running."""
        return self._runner.cancel()

    # ------------------------------------------------------------------ branch operations

    async def retry(self, *, run_tools: RunTools | None = None,
                    on_text: OnText | None = None) -> SendResult:
        """Regenerate the last assistant reply (SPEC O1); the old one stays in the tree."""
        self._not_busy("retry")
        async with self._turn("retry"):
            self._live.require_writable()
            await self.store.retry(self.session_id)
            await self.reload()
            self._publish("branch_changed", reason="retry")
            return await self._run([], [], run_tools or self.run_tools, on_text)

    async def edit(self, message: Message | str, *, run_tools: RunTools | None = None,
                   on_text: OnText | None = None) -> SendResult:
        """Replace the last user message and answer it again (SPEC O2).

        The edited message is checked like a new one before anything is written: if it
        cannot fit even after compaction, `DraftTooLargeError` (nothing saved or sent).
        """
        draft = as_user_message(message)
        self._not_busy("edit")
        async with self._turn("edit"):
            self._live.require_writable()
            await self._check_edit_fits(draft)
            node = await self.store.edit(self.session_id, draft)
            await self.reload()
            self._publish("branch_changed", reason="edit")
            return await self._run([node], [], run_tools or self.run_tools, on_text)

    async def fork(self, node_id: str, *, title: str | None = None) -> Conversation:
        """A new conversation whose branch ends at assistant node `node_id` (SPEC O3, T5)."""
        self._idle("fork", writes=False)
        info = await self.store.fork(self.session_id, node_id, title=title)
        conv = Conversation(
            self.store, info.id, model=self._model, capacity=self._capacity,
            system=self._system, tools=self._app_tools, summarizer=self._summarizer,
            overflow_policy=self.overflow_policy, settings=self.settings,
            summarizer_timeout=self._summarize.timeout, max_tool_rounds=self.max_tool_rounds,
            run_tools=self.run_tools, recall=self._recall is not None)
        await conv.reload()
        return conv

    def switch_model(self, model: ChatModel, capacity: ModelCapacity) -> Gauge:
        """Use another model from the next request on; its window applies at once, so the
        next send's preflight compacts if the history no longer fits (SPEC P2)."""
        self._idle("switch the model", writes=False)
        old = self._capacity.model
        self._set_model(model, capacity)
        gauge = self.gauge()
        self._publish("model_switched", reason=f"{old} -> {capacity.model}",
                      tokens=gauge.tokens, limit=gauge.safe_input_limit)
        return gauge


    # ------------------------------------------------------------------ pins (SPEC N1-N2)

    def pins(self) -> tuple[Pin, ...]:
        """The active pins, oldest first, as every request shows them (SPEC N1)."""
        return self._pins.active()

    async def pin(self, text: str | None = None, *, node_id: str | None = None) -> Pin:
        """Pin a short `text`, or the message `node_id` of this branch, verbatim.

        Raises `PinRefusedError` (a `ValueError`) when the pins would exceed the pin budget,
        `ValueError` for an empty text or a node that is not a message of this branch. A pin
        waits for nothing: during a turn or a compaction it is refused (`BusyError`).
        """
        one_pin_source(text, node_id)
        self._idle("pin")
        pin = await self._pins.pin(text, node_id=node_id, capacity=self._capacity,
                                   pin_budget=self.budget.pin_budget)
        self._publish("branch_changed", reason="pin", data={"pin_id": pin.pin_id})
        return pin

    async def unpin(self, pin_id: str) -> Pin:
        """Remove the active pin `pin_id`; the pin event stays in the history (SPEC N2)."""
        self._idle("unpin")
        pin = await self._pins.unpin(pin_id)
        self._publish("branch_changed", reason="unpin", data={"pin_id": pin_id})
        return pin

    # ------------------------------------------------------------------ internals: turns

    @contextlib.asynccontextmanager
    async def _turn(self, operation: str) -> AsyncIterator[None]:
        if self._turn_lock.locked():
            raise BusyError(operation, "another turn")
        async with self._turn_lock:
            self._runner.clear_failure()
            yield

    async def _run(self, nodes: list[Node], compactions: list[CompactionOutcome],
                   run_tools: RunTools | None, on_text: OnText | None, *,
                   checked: bool = False) -> SendResult:
        """Request replies until the turn ends, waits for tool results, or hits the cap."""
        rounds = 0
        while True:
            if not checked:
                compactions += await self._preflight((), None)
            checked = False
            request = await self.request_projection()  # SPEC L5: counted in the estimate
            tokens = self._sizer.estimate(request).tokens
            response = await self._reply(on_text, compactions, request)
            reply_node = await self.store.append(self.session_id, response.message,
                                                 expected_leaf_id=self._live.leaf_id)
            await self._live.extend([reply_node])
            nodes.append(reply_node)
            calls = () if response.message.is_closed_without_result else \
                response.message.tool_calls
            if not calls:
                self._compactions.start_auto(self._sizer, self.settings)
                return SendResult(tuple(nodes), response.message, (), tuple(compactions),
                                  tokens, response.stop_reason)
            rounds += 1
            # The runtime answers its own recall calls (SPEC L2); the rest go to the app.
            own = await self._recall_results(calls)
            others = tuple(c for c in calls if not any(r.call_id == c.id for r in own))
            stop = rounds >= self.max_tool_rounds or (others and run_tools is None)
            results = list(own)
            if others and not stop:
                assert run_tools is not None
                results += list(await run_tools(others))
            if results:
                messages = result_messages(results, self._live.open_tool_calls())
                added = await self.store.append_many(self.session_id, messages)
                await self._live.extend(added)
                nodes += added
            if stop:
                return SendResult(tuple(nodes), response.message, others, tuple(compactions),
                                  tokens, response.stop_reason)

    async def _recall_results(self, calls: tuple[ToolCallPart, ...]) -> list[ToolResultPart]:
        """Answers to the recall calls among `calls` (none when recall is off)."""
        if self._recall is None:
            return []
        own = [c for c in calls if self._recall.handles(c)]
        if not own:
            return []
        seen = {n.id for n in self.projection().messages}
        return [await self._recall.run(c, in_context=seen) for c in own]

    async def _reply(self, on_text: OnText | None, compactions: list[CompactionOutcome],
                     projection: Projection) -> ChatResponse:
        """One model request; on overflow, surface it or compact and retry once (P4)."""
        try:
            return await self._request(projection, on_text=on_text)
        except ContextOverflowError as exc:
            self._publish("overflow", reason=str(exc), tokens=exc.requested_tokens,
                          limit=exc.limit_tokens)
            if self.overflow_policy == "surface":
                raise
            corrected = budget_for(proved_capacity(self._capacity, self.estimate().tokens, exc),
                                   self.settings)
            finished = await self._compactions.run(
                "preflight", self._sizer, self.settings, budget=corrected,
                estimate_tokens=corrected.safe_input_limit + 1)
            if finished.outcome is not None:
                compactions.append(finished.outcome)
            if finished.status != "compacted":
                raise  # nothing could be freed: retrying would only overflow again
            # The one retry, sized for the window the provider really has; a second
            # overflow surfaces (no loop). Without the recall block (L5): its room was
            # measured against the window the provider just disproved.
            return await self._request(self.projection(),
                                       max_tokens=min(self._sizer.reply_tokens,
                                                      corrected.reserve), on_text=on_text)

    async def _request(self, projection: Projection, *, on_text: OnText | None,
                       max_tokens: int | None = None) -> ChatResponse:
        return await ask(self._model, ChatRequest(
            projection=projection, system=self._system, tools=self._tools,
            max_tokens=max_tokens or self._sizer.reply_tokens), on_text)

    # ------------------------------------------------------------------ internals: sizing

    async def _preflight(self, pending: tuple[Message, ...],
                         draft: Message | None) -> list[CompactionOutcome]:
        """Make the next request fit the safe limit, compacting if needed (P1-P3, P5)."""
        try:
            target = self._compactions.fit_target(self._sizer, self.settings, draft)
            return await fit_request(target, pending, draft=draft)
        except RequestTooLargeError as exc:
            self._publish("preflight_blocked", tokens=exc.estimated_tokens,
                          limit=exc.safe_input_limit,
                          reason=f"the next request needs about {exc.estimated_tokens} tokens; "
                                 f"shorten it by at least {exc.overflow_tokens}")
            raise

    async def _check_edit_fits(self, draft: Message) -> None:
        """Refuse an edit that no compaction could fit, before it is written (O2, P3): the
        draft measured on the branch that would precede it (read O(tail))."""
        before = await self._live.before_last_user_message()
        if before is None:
            return  # the store's edit names the problem
        decision = self._sizer.decide(project(before), (draft,))
        if isinstance(decision, Blocked):
            raise too_large(decision, self._capacity.model, draft,
                            self._capacity.context_window)

    # ------------------------------------------------------------------ internals: compaction

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

    def _not_busy(self, operation: str) -> None:
        if self._runner.running:
            raise BusyError(operation)

    def _idle(self, operation: str, *, writes: bool = True) -> None:
        """Refuse `operation` during a compaction or a turn (U1), and a write to a damaged
        session (D2)."""
        self._not_busy(operation)
        if self._turn_lock.locked():
            raise BusyError(operation, "a turn")
        if writes:
            self._live.require_writable()

    def _publish(self, kind: EventKind, *, trigger: Trigger | None = None,
                 reason: str | None = None, tokens: int | None = None,
                 limit: int | None = None, data: dict[str, Any] | None = None) -> None:
        self._bus.publish(Event(kind=kind, session_id=self.session_id, trigger=trigger,
                                reason=reason, tokens=tokens, limit=limit, data=data or {}))
