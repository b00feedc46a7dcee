"""A live conversation's compactions: the part of `Conversation` that runs them, one at a time,
in its cancellable runner (SPEC C4, U1-U4).

Each compaction is of the branch as held (`live_branch.LiveBranch`), sized by the sizer of
the model in use, with the summariser guarded as everywhere and its own model's budget
(`driver.summarizer_budget`), and the recall blocks the session's requests carry (SPEC Q3
with Q5). Three kinds start here: a foreground one (`run`: preflight, manual, the overflow
retry; still cancellable, and waited for), the automatic one after a turn (`start_auto`: in
the background, SPEC A1, the question asked by `fitting.auto_due`), and a preview (`preview`,
SPEC M7: nothing written, so no runner). `fit_target` is the conversation as the sizing
driver's target (`fitting.fit_request`), its preflight compactions run here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.models.budget import Budget, CompactionSettings
from ..core.planning.plan import Trigger
from ..core.values.messages import Message
from ..core.view.projection import Projection
from ..store import SessionBusyError
from .auto_recall import AutoRecall
from .compaction import (
    CompactionOutcome,
    CompactionRequest,
    EditedSummaryError,
    StalePreviewError,
    compact_session,
)
from .driver import summarizer_budget
from .errors import BusyError, CompactionFailedError, SendAbortedError
from .fitting import auto_due, wait_bound, wait_for_other_compaction
from .live_branch import LiveBranch
from .runner import CompactionRunner, Finished
from .sizing import Sizer
from .summarizers import GuardedSummarizer

Settings = CompactionSettings | None


class Compactions:
    """The compactions of one live session, through its one runner."""

    __slots__ = ("_auto_recall", "_live", "runner", "summarize")

    def __init__(self, live: LiveBranch, runner: CompactionRunner,
                 summarize: GuardedSummarizer, auto_recall: AutoRecall) -> None:
        self._live = live
        self.runner = runner
        self.summarize = summarize
        self._auto_recall = auto_recall

    def request(self, sizer: Sizer, settings: Settings, trigger: Trigger,
                **options: Any) -> CompactionRequest:
        """One compaction of the branch as held now, sized by `sizer` (`options`:
        `CompactionRequest`'s own, e.g. pending, instructions, budget, recalled)."""
        live = self._live
        return CompactionRequest.for_sizer(
            live.store, live.session_id, sizer, trigger=trigger, summarize=self.summarize,
            summarizer_budget=summarizer_budget(self.summarize, settings), branch=live.branch,
            **options)

    async def run(self, trigger: Trigger, sizer: Sizer, settings: Settings, *,
                  pending: Sequence[Message] = (), instructions: str | None = None,
                  budget: Budget | None = None, estimate_tokens: int | None = None,
                  **edit: Any) -> Finished:
        """Run one compaction in the foreground (still cancellable) and wait for it.
        `edit`: `compact_session`'s SPEC M7 arguments (summary_text, base)."""
        if self.runner.running:
            raise BusyError("compact")
        held = self._recalled()

        async def work() -> CompactionOutcome:
            return await compact_session(self.request(
                sizer, settings, trigger, budget=budget or sizer.budget,
                instructions=instructions, pending=tuple(pending),
                estimate_tokens=estimate_tokens, recalled=held, **edit))

        self.runner.start(trigger, work)
        finished = await self.runner.wait()
        assert finished is not None
        return finished

    async def manual(self, sizer: Sizer, settings: Settings, **options: Any
                     ) -> CompactionOutcome:
        """A compaction the user asked for (SPEC M1-M7): its outcome; a cancelled one is a
        no-op with code "cancelled" (nothing was written); a refused edit raises its own
        error, any other failure `CompactionFailedError`."""
        finished = await self.run("manual", sizer, settings, **options)
        if finished.status == "cancelled":
            return CompactionOutcome(status="noop", reason="the compaction was cancelled; "
                                     "nothing was written", code="cancelled")
        if finished.status == "failed":
            error = finished.error
            if isinstance(error, StalePreviewError | EditedSummaryError):
                self.runner.clear_failure()  # a refusal, not a failed compaction
                raise error
            raise CompactionFailedError(str(error), error) from error
        assert finished.outcome is not None
        return finished.outcome

    def start_auto(self, sizer: Sizer, settings: Settings) -> None:
        """After a completed turn: compact in the background if the check says so (A1)."""
        live = self._live
        if live.branch is None or self.runner.running:
            return
        if not auto_due(sizer, live.projection(), self._auto_recall, live.session_id):
            return
        held = self._recalled()

        async def work() -> CompactionOutcome:
            return await compact_session(self.request(sizer, settings, "auto", recalled=held))

        self.runner.start("auto", work)

    async def preview(self, sizer: Sizer, settings: Settings,
                      instructions: str | None) -> CompactionOutcome:
        """SPEC M7: what a manual compaction would commit now; nothing is written."""
        return await compact_session(self.request(sizer, settings, "manual",
                                                  instructions=instructions, preview=True))

    def fit_target(self, sizer: Sizer, settings: Settings, draft: Message | None) -> _Fit:
        """The session as `fitting.fit_request`'s target for one request (`draft`: the
        user's message it carries, kept when a compaction aborts the send, U3)."""
        return _Fit(self, sizer, settings, draft)

    def _recalled(self) -> Any:
        # SPEC Q3 with Q5: the recall blocks the requests carry, for a summariser that
        # reads the session's prefix.
        return self._auto_recall.held(self._live.session_id, self._live.projection())


class _Fit:
    """The conversation as the sizing driver's target: its compactions run in its
    cancellable runner (events, U1-U4), and a cancelled or failed one aborts the send with
    the draft kept (U3)."""

    def __init__(self, compactions: Compactions, sizer: Sizer, settings: Settings,
                 draft: Message | None) -> None:
        self._compactions = compactions
        self._settings = settings
        self._draft = draft
        self.sizer = sizer

    def projection(self) -> Projection:
        return self._compactions._live.projection()

    async def compact_to_fit(self, pending: Sequence[Message]) -> CompactionOutcome:
        compactions = self._compactions
        finished = await compactions.run("preflight", self.sizer, self._settings,
                                         pending=pending)
        if finished.status == "failed" and isinstance(finished.error, SessionBusyError):
            # SPEC Y13: another process compacts this session (`serve --workers`): wait
            # for its checkpoint, then decide again on the branch as it is.
            live = compactions._live
            outcome = await wait_for_other_compaction(live.store, live.session_id,
                                                      finished.error,
                                                      wait_bound(compactions.summarize))
            compactions.runner.clear_failure()  # not this conversation's failure
            await live.reload()
            return outcome
        if finished.status == "cancelled":
            raise SendAbortedError(self._draft, "cancelled")
        if finished.status == "failed":
            raise SendAbortedError(self._draft, "failed", str(finished.error)) \
                from finished.error
        assert finished.outcome is not None
        return finished.outcome
