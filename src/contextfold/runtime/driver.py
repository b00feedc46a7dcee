"""The session lifecycle, written once for every face (issue 39): the sizer of a session and
its automatic compaction after a turn.

Four shapes drive a session, and differ only in how its messages arrive: `Conversation`
sends them itself, the mirror (the proxy, LangChain, pydantic-ai, Inspect) receives the
whole list again from a client, the Agents SDK session is handed them by a framework, and
replay reads them from a file. What happens around a model request is the same for all of
them, and lives here or in the modules this one names:

* **the sizer** (`session_sizer`): the one `Sizer` of a session for its model, budget,
  system prompt and tools, kept while they stay the same (its memo of message estimates
  is the session's), made again when one changes (a model switch, new tools). A budget is
  derived here from the model's capacity and the session's settings (`budget_for`), or
  given whole (replay and the evaluation size a recorded session for a budget they chose).
* **the fit before a request**: `runtime.fitting.fit_request` over the shape's session
  (`fitting.SessionFit`, or `Conversation`'s own target whose compactions run in its
  cancellable runner): compact until the request fits, or refuse it (SPEC P1-P3, P5).
* **the reply**: the shape stores it with its usage (SPEC E1: the estimator reads the
  usage back from the stored reply; the sizer keeps none), then starts the check below.
* **the automatic compaction after a turn** (`BackgroundAuto`): SPEC A1-A3, run in the
  background, at most one per session at a time; the session's next request settles it
  first, so that request is sized on the branch the check left. A failed check never
  breaks the next request (one log line), and another process compacting the same session
  (Y13) is an ordinary event. Whether a check compacts is asked in one function,
  `fitting.auto_due` (through `SessionFit.auto`): `Conversation` runs its checks in its
  `CompactionRunner` instead (cancellable, with events, U1-U4), replay and the evaluation
  run them in place (synchronous), all asking the same question.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..core.models.budget import Budget, CompactionSettings, ModelCapacity, derive_budget
from ..providers.base import ToolSpec
from ..store import SessionBusyError
from .compaction import CompactionOutcome
from .fitting import SessionFit
from .sizing import Sizer
from .summarizers import GuardedSummarizer

log = logging.getLogger("contextfold.driver")

Tools = Sequence[ToolSpec | Mapping[str, Any]]


def budget_for(capacity: ModelCapacity, settings: CompactionSettings | None) -> Budget:
    """The budget of a session with `settings` on `capacity` (SPEC B1-B4): the one place a
    session driver derives one (the sizer's, a summariser model's, a corrected window's)."""
    return derive_budget(capacity, settings)


def summarizer_budget(summarize: Any, settings: CompactionSettings | None) -> Budget | None:
    """The budget of the summariser's own model, when it says which it is (a summariser
    asking another model than the session's sizes its input for that model's window)."""
    capacity = getattr(getattr(summarize, "summarizer", None), "capacity", None)
    return budget_for(capacity, settings) if isinstance(capacity, ModelCapacity) else None


def session_sizer(capacity: ModelCapacity, *, settings: CompactionSettings | None = None,
                  budget: Budget | None = None, system: str | None = None,
                  tools: Tools | None = None, summarize: GuardedSummarizer | None = None,
                  held: Sizer | None = None) -> Sizer:
    """The sizer of a session on `capacity` with `system` and `tools`: `held` (the one the
    session has) while it is of the same model, prompt and tools (and `budget`, when one is
    given), so its memo of estimates lives on; else a new one.

    The budget is `budget`, or the one `settings` derive for `capacity`. `summarize`: the
    session's guarded summariser, when the cost trigger is to price its compactions (SPEC
    Q2: free for the offline summary; Q3: reads of the cached prefix for a summariser that
    starts with the session's prefix); without it, a compaction is priced as uncached input.
    """
    tools_t = tuple(tools or ())
    if held is not None and held.capacity == capacity and held.system == system and \
            held.tools == tools_t and (budget is None or held.budget == budget):
        return held
    inner = getattr(summarize, "summarizer", None)
    return Sizer(capacity, budget if budget is not None else budget_for(capacity, settings),
                 system, tools_t,
                 summary_reads_cache=bool(getattr(inner, "session_prefix", False)),
                 summary_free=isinstance(summarize, GuardedSummarizer) and inner is None)


MakeFit = Callable[[], Awaitable[SessionFit]]
OnOutcome = Callable[[CompactionOutcome], None]


class BackgroundAuto:
    """One session's automatic compaction after a turn (SPEC A1-A3), in the background.

    `start` runs the check (`SessionFit.auto`: compact when over the automatic threshold,
    the cost trigger's moment, or full recall blocks); `settle` waits for it and returns
    what it did. Neither raises: another process compacting the session (Y13) is logged at
    INFO (its checkpoint does this check's work), any other failure with its traceback,
    and the next request goes on (a background check must never break it)."""

    __slots__ = ("log", "task")

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.task: asyncio.Task[CompactionOutcome | None] | None = None
        self.log = logger or log

    @property
    def running(self) -> bool:
        """A check is under way (the session is in use)."""
        return self.task is not None and not self.task.done()

    def start(self, session_id: str, make_fit: MakeFit, *, replace: bool = False,
              on_outcome: OnOutcome | None = None) -> asyncio.Task[CompactionOutcome | None]:
        """Start the check of `session_id` on the session `make_fit` gives, unless one
        started earlier is not settled yet (then that one is returned); `replace`: start
        anyway, the latest reply's check being the one the next request settles (the
        earlier one runs on, unawaited; it never raises). `on_outcome`: told what a check
        that ran did."""
        if self.task is not None and not replace:
            return self.task
        self.task = asyncio.ensure_future(self._check(session_id, make_fit, on_outcome))
        return self.task

    async def settle(self) -> CompactionOutcome | None:
        """Wait for the started check (None when none was, or it did nothing)."""
        task, self.task = self.task, None
        return None if task is None else await task

    async def _check(self, session_id: str, make_fit: MakeFit,
                     on_outcome: OnOutcome | None) -> CompactionOutcome | None:
        try:
            outcome = await (await make_fit()).auto()
        except SessionBusyError:
            self.log.info("auto compaction of session %s: another process is compacting it",
                          session_id)
            return None
        except Exception:
            self.log.exception("auto compaction of session %s failed", session_id)
            return None
        if outcome is not None and on_outcome is not None:
            on_outcome(outcome)
        return outcome
