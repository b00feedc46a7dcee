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
from ..core.estimator import MessageCosts, estimate_request
from ..core.mask_planner import MASKING_SUMMARIZER
from ..core.messages import Message
from ..core.plan import NoOp, Plan, Trigger
from ..core.planner import build_checkpoint, plan_compaction
from ..core.projection import project
from ..core.tree import Branch, DamagedBranch
from ..store import ReadOnlySessionError
from ..summarize.extractive import summarize_extractive

# A summariser turns a plan into (summary text, name of what produced it).
Summarize = Callable[[Plan], Awaitable[tuple[str, str]]]
# Picks the model for a session once its branch is loaded (the CLI's "recorded model").
ResolveModel = Callable[[Branch], tuple[ModelCapacity, Budget]]
# Receives one line per step of a long compaction (the CLI prints them on stderr).
Progress = Callable[[str], None]


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
    capacity: ModelCapacity | None = None,
    budget: Budget | None = None,
    resolve: ResolveModel | None = None,
    trigger: Trigger = "manual",
    summarize: Summarize = extractive_summarize,
    instructions: str | None = None,
    pending: Sequence[Message] = (),
    system: str | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    summarizer_budget: Budget | None = None,
    estimate_tokens: int | None = None,
    costs: MessageCosts | None = None,
    progress: Progress | None = None,
    branch: Branch | None = None,
) -> CompactionOutcome:
    """Plan, summarise and conditionally commit one compaction of `session_id`.

    The model is `capacity` and `budget`, or what `resolve` picks from the loaded branch.
    `tools` (as request JSON) count in the estimate like the system prompt does.
    `estimate_tokens` overrides the estimated size of the next request: a provider that
    answered "context overflow, N tokens" knows better than any estimate (SPEC P4).
    `costs`: the caller's memo of message estimates for this model (`Conversation` keeps
    one); otherwise one is made here, so every message is estimated once.
    `progress` receives a line per step (loading, planning, each summarised chunk, commit).
    `branch`: the branch as the caller holds it; used instead of reading it again when the
    session's leaf and revision are still the ones it was read at (nodes never change).

    The branch is loaded once; the plan, the summariser and the ledger share it, and the
    store's commit re-checks only the kept tail (SPEC C2).
    """
    say = progress or (lambda _line: None)
    async with store.compaction_lease(session_id):
        if branch is not None:
            info = await store.get_session(session_id)
            if (info.leaf_id, info.branch_revision) != (branch.leaf_id, branch.revision):
                branch = None
        if branch is None:
            say("loading the branch")
            branch = await store.load_branch(session_id)
        if isinstance(branch, DamagedBranch):
            raise ReadOnlySessionError(session_id, branch.problems)
        if resolve is not None:
            capacity, budget = resolve(branch)
        if capacity is None or budget is None:
            raise TypeError("compact_session needs capacity and budget, or resolve")
        if costs is None or costs.capacity != capacity:
            costs = MessageCosts(capacity)
        say(f"planning over {len(branch.nodes):,} nodes for {capacity.model}")
        estimate = None
        if estimate_tokens is not None:
            measured = estimate_request(project(branch), capacity, system=system, tools=tools,
                                        pending=pending, costs=costs)
            estimate = replace(measured, tokens=max(measured.tokens, estimate_tokens))
        plan = plan_compaction(branch, budget, trigger, capacity=capacity,
                               instructions=instructions, pending=pending, system=system,
                               tools=tools, summarizer_budget=summarizer_budget,
                               estimate=estimate, costs=costs)
        del branch  # the plan holds what it needs; let the rest go before summarising
        if isinstance(plan, NoOp):
            return noop_outcome(plan)
        if plan.action == "mask":  # SPEC V2: no summariser; the previous summary stays
            say("masking old tool output")
            text, name = "", MASKING_SUMMARIZER
        else:
            say(f"summarising {len(plan.newly_old):,} messages in {len(plan.chunks)} chunk(s)")
            text, name = await summarize(plan)
        checkpoint = build_checkpoint(plan, text, summarizer=name, model=capacity.model)
        say("committing the checkpoint")
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
