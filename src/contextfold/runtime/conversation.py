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

Size: one public class, the application's handle on a session, whose operations are each a few
lines over the driver (`runtime.driver`, `runtime.fitting`) sharing its held state; its pin
operations are already apart (`pinning`), and issue 39 keeps a class whole in one module rather
than spread over more mixins.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..core.models.budget import ModelCapacity
from ..core.sizing.fit import Blocked
from ..core.values.messages import Message, Node, ToolCallPart, ToolResultPart
from ..core.values.tree import Branch
from ..core.view.projection import Projection, project
from ..providers.base import ChatModel, ChatRequest, ChatResponse, StreamDone, TextDelta
from ..providers.errors import ContextOverflowError
from ..store import ReadOnlySessionError, SessionBusyError
from ..store.protocol import SessionStore
from .base import OverflowPolicy
from .compaction import (
    CompactionOutcome,
    CompactionRequest,
    EditedSummaryError,
    PreviewBase,
    StalePreviewError,
    check_edit,
    compact_session,
)
from .driver import budget_for
from .errors import (
    BusyError,
    CompactionFailedError,
    RequestTooLargeError,
    SendAbortedError,
    ToolWorkflowError,
)
from .fitting import fit_request, healthy, too_large, wait_bound, wait_for_other_compaction
from .pinning import PinOperations
from .sizing import Gauge, Sizer
from .turns import (
    OnText,
    RunTools,
    SendResult,
    ToolResults,
    as_user_message,
    open_tool_calls,
    result_messages,
)

__all__ = ["Conversation", "OverflowPolicy"]

class Conversation(PinOperations):
    """One session driven live: send, tool turns, compaction, retry/edit/fork, pins, events."""

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
            self._require_writable()
            waiting = open_tool_calls(self._branch)
            if waiting:
                raise ToolWorkflowError(
                    "tool calls wait for results (" + ", ".join(sorted(waiting)) + "): "
                    "add_tool_results() then continue_turn() before a new message")
            compactions = await self._preflight((draft,), draft)
            node = await self.store.append(self.session_id, draft,
                                           expected_leaf_id=self._leaf_id(), node_id=node_id)
            await self._extend([node])
            return await self._run(
                [node], compactions, run_tools or self.run_tools, on_text, checked=True)

    async def add_tool_results(self, results: ToolResults) -> list[Node]:
        """Persist results for the open tool calls of the current turn (one transaction)."""
        async with self._turn("add tool results"):
            self._require_writable()
            messages = result_messages(results, open_tool_calls(self._branch))
            nodes = await self.store.append_many(self.session_id, messages)
            await self._extend(nodes)
            return nodes

    async def continue_turn(self, *, run_tools: RunTools | None = None,
                            on_text: OnText | None = None) -> SendResult:
        """Ask the model for the next reply of the current turn (after tool results, or
        after a surfaced overflow / provider error left the turn without a reply)."""
        async with self._turn("continue the turn"):
            await self._wait_for_compaction(None)
            self._require_writable()
            waiting = open_tool_calls(self._branch)
            if waiting:
                raise ToolWorkflowError("tool calls still wait for results: "
                                        + ", ".join(sorted(waiting)))
            last = self._last_message()
            if last is None or last.role == "assistant":
                raise ToolWorkflowError("nothing to continue: the turn already ended with the "
                                        "assistant's reply; send a new message instead")
            return await self._run([], [], run_tools or self.run_tools, on_text)

    # ------------------------------------------------------------------ compaction

    async def compact(self, instructions: str | None = None) -> CompactionOutcome:
        """Compact now (SPEC M1-M6). A no-op is a successful outcome that says why; a
        cancelled compaction returns a no-op with code "cancelled" (nothing was written)."""
        self._not_busy("compact")
        if self._turn_lock.locked():
            raise BusyError("compact", "a turn")
        self._require_writable()
        finished = await self._compact("manual", instructions=instructions)
        if finished.status == "cancelled":
            return CompactionOutcome(status="noop", reason="the compaction was cancelled; "
                                     "nothing was written", code="cancelled")
        if finished.status == "failed":
            raise CompactionFailedError(str(finished.error), finished.error) from finished.error
        assert finished.outcome is not None
        return finished.outcome

    async def preview_compaction(self, instructions: str | None = None) -> CompactionOutcome:
        """SPEC M7: the checkpoint `compact()` would commit now, without committing it:
        status "preview", its `summary` (to edit), `checkpoint_text` (what the model would
        see) and `base` (pass it to `commit_summary`). A no-op says why, as `compact()`
        does. Runs the summariser; nothing is written."""
        self._not_busy("preview a compaction")
        if self._turn_lock.locked():
            raise BusyError("preview a compaction", "a turn")
        self._require_writable()
        return await compact_session(CompactionRequest.for_sizer(
            self.store, self.session_id, self._sizer, trigger="manual",
            summarize=self._summarize, instructions=instructions,
            summarizer_budget=self._summarizer_budget(), branch=self._branch, preview=True))

    async def commit_summary(self, text: str, *, base: PreviewBase | str | None = None
                             ) -> CompactionOutcome:
        """SPEC M7: compact now with `text` as the summary (a user's edit of a preview),
        committed as a new append-only checkpoint marked as edited by the user; the
        previous checkpoint stays in the tree. With `base` (a preview's), a session that
        moved since raises `StalePreviewError` and nothing is written."""
        check_edit(text)  # bad input is refused before a compaction starts
        if isinstance(base, str):
            base = PreviewBase.parse(base)
        self._not_busy("compact")
        if self._turn_lock.locked():
            raise BusyError("compact", "a turn")
        self._require_writable()
        held = self._branch
        if base is not None and held is not None and \
                (held.leaf_id, held.revision) != (base.leaf_id, base.revision):
            # Refused before any compaction starts (the store's check under the lease
            # covers another writer).
            raise StalePreviewError(base, PreviewBase(held.leaf_id, held.revision))
        finished = await self._compact("manual", summary_text=text, base=base)
        if finished.status == "cancelled":
            return CompactionOutcome(status="noop", reason="the compaction was cancelled; "
                                     "nothing was written", code="cancelled")
        if finished.status == "failed":
            error = finished.error
            if isinstance(error, StalePreviewError | EditedSummaryError):
                self._runner.clear_failure()  # a refusal, not a failed compaction
                raise error
            raise CompactionFailedError(str(error), error) from error
        assert finished.outcome is not None
        return finished.outcome

    def cancel_compaction(self) -> bool:
        """Cancel a running compaction (SPEC C4, U1); False if none was running."""
        return self._runner.cancel()

    # ------------------------------------------------------------------ branch operations

    async def retry(self, *, run_tools: RunTools | None = None,
                    on_text: OnText | None = None) -> SendResult:
        """Regenerate the last assistant reply (SPEC O1); the old one stays in the tree."""
        self._not_busy("retry")
        async with self._turn("retry"):
            self._require_writable()
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
            self._require_writable()
            await self._check_edit_fits(draft)
            node = await self.store.edit(self.session_id, draft)
            await self.reload()
            self._publish("branch_changed", reason="edit")
            return await self._run([node], [], run_tools or self.run_tools, on_text)

    async def fork(self, node_id: str, *, title: str | None = None) -> Conversation:
        """A new conversation whose branch ends at assistant node `node_id` (SPEC O3, T5)."""
        self._not_busy("fork")
        if self._turn_lock.locked():
            raise BusyError("fork", "a turn")
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
        self._not_busy("switch the model")
        if self._turn_lock.locked():
            raise BusyError("switch the model", "a turn")
        old = self._capacity.model
        self._set_model(model, capacity)
        gauge = self.gauge()
        self._publish("model_switched", reason=f"{old} -> {capacity.model}",
                      tokens=gauge.tokens, limit=gauge.safe_input_limit)
        return gauge

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
                                                 expected_leaf_id=self._leaf_id())
            await self._extend([reply_node])
            nodes.append(reply_node)
            calls = () if response.message.is_closed_without_result else \
                response.message.tool_calls
            if not calls:
                self._schedule_auto()
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
                messages = result_messages(results, open_tool_calls(self._branch))
                added = await self.store.append_many(self.session_id, messages)
                await self._extend(added)
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
            corrected = budget_for(self._overflow_capacity(exc), self.settings)
            finished = await self._compact("preflight", budget=corrected,
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

    def _overflow_capacity(self, exc: ContextOverflowError) -> ModelCapacity:
        """The window the provider just proved, in the estimator's units (SPEC P4).

        The provider's limit replaces the catalog's window; if our estimate of the request
        was below the provider's count, the window shrinks by that ratio too, so a plan
        made with our estimates fits the real tokenizer. Without numbers, assume the
        request must lose a quarter.
        """
        estimate = self.estimate().tokens
        said = exc.prompt_tokens or exc.requested_tokens
        if exc.limit_tokens and said:
            window = int(exc.limit_tokens * min(1.0, estimate / said))
        else:
            window = int(estimate * 0.75)
        window = max(1, min(window, self._capacity.context_window))
        return self._capacity.model_copy(update={"context_window": window, "max_input": None})

    async def _request(self, projection: Projection, *, on_text: OnText | None,
                       max_tokens: int | None = None) -> ChatResponse:
        request = ChatRequest(projection=projection, system=self._system,
                              tools=self._tools, max_tokens=max_tokens or self._sizer.reply_tokens)
        if on_text is None:
            return await self._model.complete(request)
        response: ChatResponse | None = None
        async for event in self._model.stream(request):
            if isinstance(event, TextDelta):
                on_text(event.text)
            elif isinstance(event, StreamDone):
                response = event.response
        if response is None:  # pragma: no cover - adapters always end with StreamDone
            raise RuntimeError(f"{self._model.model} ended its stream without a reply")
        return response

    # ------------------------------------------------------------------ internals: sizing

    async def _preflight(self, pending: tuple[Message, ...],
                         draft: Message | None) -> list[CompactionOutcome]:
        """Make the next request fit the safe limit, compacting if needed (P1-P3, P5)."""
        try:
            return await fit_request(_Fit(self, draft), pending, draft=draft)
        except RequestTooLargeError as exc:
            self._publish("preflight_blocked", tokens=exc.estimated_tokens,
                          limit=exc.safe_input_limit,
                          reason=f"the next request needs about {exc.estimated_tokens} tokens; "
                                 f"shorten it by at least {exc.overflow_tokens}")
            raise

    async def _check_edit_fits(self, draft: Message) -> None:
        """Refuse an edit that no compaction could fit, before it is written (O2, P3).

        Reads what the edited branch needs, not the history: the last user message is
        found in the loaded tail (or the O(tail) segment before it), and the branch that
        would precede the edit is that tail cut before it, or, when a checkpoint made
        after that message would leave the branch, the store's O(tail) read at its parent.
        """
        before = await self._before_last_user_message()
        if before is None:
            return  # the store's edit names the problem
        decision = self._sizer.decide(project(before), (draft,))
        if isinstance(decision, Blocked):
            raise too_large(decision, self._capacity.model, draft,
                            self._capacity.context_window)

    async def _before_last_user_message(self) -> Branch | None:
        """The branch ending just before the last user message (None: there is none)."""
        loaded = self._branch
        if loaded is None:
            raise ReadOnlySessionError(self.session_id, self._damaged.problems
                                       if self._damaged is not None else ())
        while True:
            users = [i for i, n in enumerate(loaded.nodes) if n.is_user_message]
            if users:
                break
            parent = loaded.nodes[0].parent_id if loaded.nodes else None
            if loaded.complete or parent is None:
                return None
            loaded = healthy(await self.store.load_branch_at(self.session_id, parent),
                             self.session_id)
        cut = users[-1]
        checkpoint = loaded.latest_checkpoint_index
        after_checkpoint = checkpoint is not None and checkpoint < cut
        if after_checkpoint or (checkpoint is None and loaded.complete):
            return Branch(nodes=loaded.nodes[:cut], complete=loaded.complete,
                          revision=loaded.revision)
        parent = loaded.nodes[cut].parent_id
        if parent is None:
            return Branch(nodes=(), revision=loaded.revision)
        return healthy(await self.store.load_branch_at(self.session_id, parent),
                       self.session_id)


class _Fit:
    """The conversation as the sizing driver's target: its compactions run in its
    cancellable runner (events, U1-U4), and a cancelled or failed one aborts the send with
    the draft kept (U3)."""

    def __init__(self, conv: Conversation, draft: Message | None) -> None:
        self._conv = conv
        self._draft = draft

    @property
    def sizer(self) -> Sizer:
        return self._conv.sizer

    def projection(self) -> Projection:
        return self._conv.projection()

    async def compact_to_fit(self, pending: Sequence[Message]) -> CompactionOutcome:
        finished = await self._conv._compact("preflight", pending=pending)
        if finished.status == "failed" and isinstance(finished.error, SessionBusyError):
            # SPEC Y13: another process compacts this session (`serve --workers`): wait
            # for its checkpoint, then decide again on the branch as it is.
            conv = self._conv
            outcome = await wait_for_other_compaction(conv.store, conv.session_id,
                                                      finished.error,
                                                      wait_bound(conv._summarize))
            conv._runner.clear_failure()  # not this conversation's failure
            await conv.reload()
            return outcome
        if finished.status == "cancelled":
            raise SendAbortedError(self._draft, "cancelled")
        if finished.status == "failed":
            raise SendAbortedError(self._draft, "failed", str(finished.error)) \
                from finished.error
        assert finished.outcome is not None
        return finished.outcome
