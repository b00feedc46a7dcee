"""Prepare → summarise → conditional commit against a store: one compaction, end to end.

Both the command line and `Conversation` compact through `compact_session` (or its fuller
form `compact_session_with`), so there is one place where a plan meets a summariser and the
store's conditional commit (SPEC C1-C3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from ..core.budget import Budget, ModelCapacity
from ..core.estimator import estimate_request
from ..core.messages import Message
from ..core.plan import NoOp, Plan, Trigger
from ..core.planner import build_checkpoint, plan_compaction
from ..core.projection import project
from ..core.tree import DamagedBranch
from ..store import ReadOnlySessionError
from ..summarize.extractive import summarize_extractive

# A summariser turns a plan into (summary text, name of what produced it).
Summarize = Callable[[Plan], Awaitable[tuple[str, str]]]


async def extractive_summarize(plan: Plan) -> tuple[str, str]:
    """The offline summariser as an async `Summarize` (no model, no network)."""
    return summarize_extractive(plan), "extractive"


@dataclass(frozen=True)
class CompactionOutcome:
    """What one compaction did; `to_json` is the `contextfold compact --json` contract."""

    status: Literal["compacted", "noop", "stale"]
    reason: str | None = None
    code: str | None = None
    checkpoint_id: str | None = None
    first_kept_id: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    summarized_messages: int = 0
    kept_messages: int = 0
    kept_tokens: int = 0  # raw tokens still projected after it (SPEC K6: a split turn's rounds)
    summarizer: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("code")
        return data


def noop_outcome(noop: NoOp) -> CompactionOutcome:
    return CompactionOutcome(status="noop", reason=noop.reason, code=noop.code)


async def compact_session(
    store: Any,
    session_id: str,
    *,
    capacity: ModelCapacity,
    budget: Budget,
    trigger: Trigger = "manual",
    summarize: Summarize = extractive_summarize,
    instructions: str | None = None,
    pending: Sequence[Message] = (),
    system: str | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    summarizer_budget: Budget | None = None,
    estimate_tokens: int | None = None,
) -> CompactionOutcome:
    """Plan, summarise and conditionally commit one compaction of `session_id`.

    `tools` (as request JSON) count in the estimate like the system prompt does.
    `estimate_tokens` overrides the estimated size of the next request: a provider that
    answered "context overflow, N tokens" knows better than any estimate (SPEC P4).
    """
    async with store.compaction_lease(session_id):
        branch = await store.load_branch(session_id)
        if isinstance(branch, DamagedBranch):
            raise ReadOnlySessionError(session_id, branch.problems)
        estimate = None
        if estimate_tokens is not None:
            measured = estimate_request(project(branch), capacity, system=system, tools=tools,
                                        pending=pending)
            estimate = replace(measured, tokens=max(measured.tokens, estimate_tokens))
        plan = plan_compaction(branch, budget, trigger, capacity=capacity,
                               instructions=instructions, pending=pending, system=system,
                               tools=tools, summarizer_budget=summarizer_budget,
                               estimate=estimate)
        if isinstance(plan, NoOp):
            return noop_outcome(plan)
        text, name = await summarize(plan)
        checkpoint = build_checkpoint(plan, text, summarizer=name, model=capacity.model)
        result = await store.commit_checkpoint(plan, checkpoint, session_id=session_id)
    if result.status != "committed":
        return CompactionOutcome(status="stale", reason=result.reason, code="stale",
                                 tokens_before=plan.tokens_before)
    return CompactionOutcome(
        status="compacted",
        checkpoint_id=result.checkpoint.id if result.checkpoint else None,
        first_kept_id=plan.first_kept_id,
        tokens_before=plan.tokens_before,
        tokens_after=checkpoint.tokens_after_estimate,
        summarized_messages=len(plan.newly_old),
        kept_messages=len(plan.kept),
        kept_tokens=plan.kept_tokens,
        summarizer=name,
    )
