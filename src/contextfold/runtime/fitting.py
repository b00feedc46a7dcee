"""The one driver of the sizing policy: make the next request fit, or refuse it.

Every face runs this before a model request (SPEC P1-P3, P5): `Conversation` (the library,
the chat, the service), the mirror (the proxy, LangChain, pydantic-ai), the Agents SDK
session and replay. The decision is `core.sizing.fit`'s (asked through `Sizer.decide`); this module
only loops it over the one compaction path:

    decide → Fits: send  |  Compact: compact (preflight), check again  |  Blocked: refuse

A stale commit (another writer moved the branch) re-plans on the branch as it is now, a
bounded number of times; a compaction that could not commit anything ends the loop. A
refusal is `RequestTooLargeError` (or `DraftTooLargeError` for a user's draft), worded once,
here, from the numbers of the best case that was tried.

`SessionFit` is the shape of a session most faces hold: a store, a session id, the sizer
of the model in use and the branch as last loaded. `Conversation` brings its own target
(its compactions run in its cancellable runner, with events).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.models.budget import ModelCapacity
from ..core.planning.plan import Trigger
from ..core.sizing.fit import Blocked, Compact, Fits, after_compaction
from ..core.values.messages import Message
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.projection import Projection, project
from ..providers.errors import ContextOverflowError
from ..store import ReadOnlySessionError, SessionBusyError
from ..store.protocol import CompactionStore
from ..store.sql.liveness import holder_is_dead
from .auto_recall import AutoRecall
from .compaction import CompactionOutcome, CompactionRequest, compact_session
from .errors import DraftTooLargeError, RequestTooLargeError
from .sizing import Sizer
from .summarizers import Summarize

ATTEMPTS = 3  # preflight compactions per request: a stale commit re-plans, never forever
# SPEC Y13: how long a request waits for another process's compaction of its session when no
# summariser timeout bounds it (then: the summariser's timeout and one lease period).
OTHER_COMPACTION_WAIT = 330.0
_POLL = (0.05, 0.5)  # first and longest pause between two reads of the lease
log = logging.getLogger("contextfold.fitting")


class FitTarget(Protocol):
    """What the driver needs of a session: its sizer, what it projects now, and a way to
    run one preflight compaction (after which `projection()` shows the branch as it is)."""

    @property
    def sizer(self) -> Sizer: ...

    def projection(self) -> Projection: ...

    async def compact_to_fit(self, pending: Sequence[Message]) -> CompactionOutcome: ...


async def fit_request(target: FitTarget, pending: Sequence[Message] = (), *,
                      draft: Message | None = None,
                      attempts: int = ATTEMPTS) -> list[CompactionOutcome]:
    """Compact until the next request (with `pending`, not yet stored) fits the safe
    input limit, and return the compactions run; refuse with `RequestTooLargeError`
    (`DraftTooLargeError` when `draft` is given) when no compaction can make it fit.
    Nothing is sent or stored by a refusal (SPEC P3)."""
    pending = tuple(pending)
    outcomes: list[CompactionOutcome] = []
    for _ in range(attempts):
        decision = target.sizer.decide(target.projection(), pending)
        if isinstance(decision, Fits):
            return outcomes
        if isinstance(decision, Blocked):
            raise too_large(decision, target.sizer.capacity.model, draft,
                            target.sizer.capacity.context_window)
        assert isinstance(decision, Compact)
        outcome = await target.compact_to_fit(pending)
        outcomes.append(outcome)
        if outcome.status == "noop":
            # Nothing to compact on the branch as stored: it may fit already (SPEC Y13:
            # another process's checkpoint, committed since this one read the branch).
            if isinstance(target.sizer.decide(target.projection(), pending), Fits):
                return outcomes
            break
    tokens = target.sizer.estimate(target.projection(), pending).tokens
    tried = min((o.tokens_after for o in outcomes if o.tokens_after is not None),
                default=tokens)
    final = after_compaction(tokens, target.sizer.budget.safe_input_limit, tried)
    if isinstance(final, Blocked):
        raise too_large(final, target.sizer.capacity.model, draft,
                        target.sizer.capacity.context_window)
    return outcomes


def proved_capacity(capacity: ModelCapacity, estimate: int,
                    overflow: ContextOverflowError) -> ModelCapacity:
    """The window a provider's overflow just proved, in the estimator's units (SPEC P4),
    for a request we estimated at `estimate` tokens.

    The provider's limit replaces the catalog's window; if our estimate of the request
    was below the provider's count, the window shrinks by that ratio too, so a plan
    made with our estimates fits the real tokenizer. Without numbers, assume the
    request must lose a quarter.
    """
    said = overflow.prompt_tokens or overflow.requested_tokens
    if overflow.limit_tokens and said:
        window = int(overflow.limit_tokens * min(1.0, estimate / said))
    else:
        window = int(estimate * 0.75)
    window = max(1, min(window, capacity.context_window))
    return capacity.model_copy(update={"context_window": window, "max_input": None})


def too_large(blocked: Blocked, model: str, draft: Message | None = None,
              context_window: int | None = None) -> RequestTooLargeError:
    """The refusal for `blocked`, worded once for every face (SPEC P3, P5): the safe input
    limit named as the safe limit, the model's window as its window."""
    if draft is not None:
        return DraftTooLargeError(draft, overflow_tokens=blocked.overflow_tokens,
                                  estimated_tokens=blocked.tokens,
                                  safe_input_limit=blocked.safe_input_limit, model=model,
                                  context_window=context_window)
    window = f" (its window is {context_window:,})" if context_window else ""
    return RequestTooLargeError(
        f"the next request needs about {blocked.tokens:,} tokens but the safe input limit of "
        f"{model} is {blocked.safe_input_limit:,}{window}, even after compaction; nothing was "
        f"sent. Shorten the latest input by at least {blocked.overflow_tokens:,} tokens, or "
        "use a larger-window model.",
        overflow_tokens=blocked.overflow_tokens, estimated_tokens=blocked.tokens,
        safe_input_limit=blocked.safe_input_limit, model=model, context_window=context_window)


async def wait_for_other_compaction(store: Any, session_id: str, busy: SessionBusyError,
                                    bound: float | None) -> CompactionOutcome:
    """SPEC Y13: another process holds the session's compaction lease (`busy`): wait, at
    most `bound` seconds, until it lets go (its checkpoint committed, or it gave up), and
    say so as a stale outcome, so the sizing loop reads the branch again and decides on it
    (the other's checkpoint usually makes the request fit). A lease race is an ordinary
    event of several processes on one database: one log line, no traceback. Past `bound`
    the `busy` error is raised (the other process is stuck, not slow)."""
    limit = OTHER_COMPACTION_WAIT if bound is None else bound
    log.info("session %s: another process is compacting it; waiting for its checkpoint",
             session_id)
    holder_of = getattr(store, "lease_holder", None)
    deadline, pause = time.monotonic() + limit, _POLL[0]
    while True:
        await asyncio.sleep(pause)
        holder = await holder_of(session_id) if holder_of is not None else None
        if holder is None or holder_is_dead(holder):  # a dead holder's lease is void (C4)
            break
        if time.monotonic() + pause > deadline:
            raise busy
        pause = min(_POLL[1], pause * 2)
    return CompactionOutcome(status="stale", code="compacted_elsewhere", trigger="preflight",
                             reason="another process compacted this session; read again")


def wait_bound(summarize: Any) -> float | None:
    """How long to wait for another process's compaction: the summariser's timeout (what
    bounds that compaction) and one lease period; None when no timeout is known."""
    from ..store.sql.lease import LEASE_TTL

    timeout = getattr(summarize, "timeout", None)
    return None if timeout is None else float(timeout) + LEASE_TTL


# How long a long-running process trusts a branch it holds before it reads it again from
# the store, where every row read is checked against its hash (SPEC D1, D2): a row edited in
# place by hand is noticed within this time, at one O(tail) read per active session per
# period, not per request (issue 38).
RECHECK_SECONDS = 30.0


def healthy(branch: Branch | DamagedBranch, session_id: str) -> Branch:
    """`branch`, or `ReadOnlySessionError` naming its damage (SPEC D2)."""
    if isinstance(branch, DamagedBranch):
        raise ReadOnlySessionError(session_id, branch.problems)
    return branch


# Called after a compaction with its outcome and the branch it was planned on (the mirror
# indexes a committed checkpoint under the client's message there).
OnCompacted = Callable[[CompactionOutcome, Branch], Awaitable[None]]


@dataclass
class SessionFit:
    """A session in a store, sized for one model: the `FitTarget` of the mirror, the
    Agents SDK session and replay, and their compactions (preflight, auto, manual)."""

    store: CompactionStore
    session_id: str
    sizer: Sizer
    summarize: Summarize
    branch: Branch
    on_compacted: OnCompacted | None = None
    outcomes: list[CompactionOutcome] = field(default_factory=list)
    # SPEC Q5: the session's automatic recall: are its blocks full (a reason to compact),
    # and which blocks its requests carry (a summariser reading the prefix sends them, Q3).
    recall: AutoRecall | None = None
    _projected: tuple[Branch | None, Projection | None] = (None, None)

    def projection(self) -> Projection:
        """What the model sees next on the branch as last loaded."""
        if self._projected[0] is not self.branch or self._projected[1] is None:
            self._projected = (self.branch, project(self.branch))
        assert self._projected[1] is not None
        return self._projected[1]

    async def reload(self) -> Branch:
        self.branch = healthy(await self.store.load_branch(self.session_id), self.session_id)
        return self.branch

    async def compact(self, trigger: Trigger, pending: Sequence[Message] = (), *,
                      instructions: str | None = None) -> CompactionOutcome:
        """One compaction through the one path; the branch is read again after it."""
        planned_on = self.branch
        try:
            outcome = await compact_session(CompactionRequest.for_sizer(
                self.store, self.session_id, self.sizer, trigger=trigger,
                summarize=self.summarize, instructions=instructions, pending=tuple(pending),
                branch=planned_on, recalled=() if self.recall is None else self.recall.held(
                    self.session_id, self.projection())))
        except SessionBusyError as busy:
            if trigger != "preflight":
                raise
            # SPEC Y13: another process compacts this session; its checkpoint is what this
            # request needs. Wait for it, then decide again on the branch as it is.
            outcome = await wait_for_other_compaction(self.store, self.session_id, busy,
                                                      wait_bound(self.summarize))
            self.outcomes.append(outcome)
            await self.reload()
            return outcome
        self.outcomes.append(outcome)
        if self.on_compacted is not None:
            await self.on_compacted(outcome, planned_on)
        # Read again, a noop too: "it fits" can be the store's branch fitting where the one
        # planned on did not (another process compacted it meanwhile, SPEC Y13; issue 38's
        # long fleet soak was refused "even after compaction" there).
        await self.reload()
        return outcome

    async def compact_to_fit(self, pending: Sequence[Message]) -> CompactionOutcome:
        return await self.compact("preflight", pending)

    async def auto(self) -> CompactionOutcome | None:
        """SPEC A1-A3 after a turn: compact between turns when over the auto threshold."""
        if not auto_due(self.sizer, self.projection(), self.recall, self.session_id):
            return None
        return await self.compact("auto")


def auto_due(sizer: Sizer, projection: Projection, recall: AutoRecall | None,
             session_id: str) -> bool:
    """The check after a turn, for every face: should `projection` be compacted now? Over
    the automatic threshold (SPEC A1), at the cost trigger's moment (Q2), or when the
    recall blocks since its checkpoint are full (Q5), as `Sizer.auto_due` decides."""
    checkpoint = projection.checkpoint.id if projection.checkpoint is not None else None
    full = recall is not None and recall.full(session_id, checkpoint)
    return sizer.auto_due(projection, recall_full=full)
