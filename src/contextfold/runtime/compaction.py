"""Prepare → summarise → conditional commit against a store: one compaction, end to end.

Every face compacts through `compact_session`: `Conversation`, the mirror (proxy, LangChain,
pydantic-ai), the Agents SDK session, the command line and replay (over an in-memory
store). So there is one place where a plan meets a summariser and the store's conditional
commit (SPEC C1-C3), and one place that checks what the checkpoint will cost before it is
committed:

* a preflight checkpoint that still measures over the safe limit (an estimate of a text
  and of the request it sits in differ a little) is fitted again to a tighter summary
  budget before it is committed, never committed over the limit when a smaller one can be
  written (SPEC P5);
* an automatic compaction that would not make the request smaller is not committed; a
  manual one is, and its outcome says so (`note`).

SPEC M7, preview and edit, on the same path: `preview=True` prepares and summarises and
returns the checkpoint that would be committed (status "preview", with the `base` it was
made on) without committing; `summary_text=` commits a user's own summary instead of
calling the summariser (prepare + given summary + conditional commit), as a new
append-only checkpoint marked as edited by the user (`summarizer` "user-edited",
`details["edited_by_user"]`). With `base=` (the preview's), a session that moved since
the preview refuses the commit (`StalePreviewError`), never overwriting silently. The
checkpoint's checks run on an edited text as on any other (they run on every written
checkpoint, in `measured` below).

What a compaction is asked (`CompactionRequest`) and answers (`CompactionOutcome`) are in
`compaction_values`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.models.budget import Budget, ModelCapacity
from ..core.money.costs import names_a_model
from ..core.planning.cost_trigger import compaction_forecast, session_rhythm
from ..core.planning.mask_planner import MASKING_SUMMARIZER
from ..core.planning.plan import NoOp, Plan, Trigger
from ..core.planning.planner import (
    adopt_provider_compaction,
    build_checkpoint,
    plan_compaction,
    projection_after,
)
from ..core.recall.auto_recall import RecallTurns, held_blocks
from ..core.report.explain import (
    DETAILS_KEY,
    CompactionExplanation,
    stored_explanation,
    trigger_kind,
)
from ..core.sizing.estimator import MessageCosts, estimate_request
from ..core.sizing.fit import over_auto_threshold, tighter_budget
from ..core.sizing.resolver import user_prices
from ..core.values.messages import Checkpoint, Message
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.projection import RecallBlock, checkpoint_text, fixed_part, project
from ..errors import ContextfoldError
from ..ids import new_id
from ..store import ReadOnlySessionError
from ..store.protocol import CompactionStore
from ..summarize.extractive import fit_summary, smallest_summary_tokens, summary_token_budget
from ..summarize.extractive_fit import SummaryBudgetTooSmall
from ..summarize.retention import checked_checkpoint, public_check
from ..summarize.summary import Summary
from .compaction_values import (  # noqa: F401  (re-exported; moved out in issue 39)
    CompactionOutcome,
    CompactionRequest,
    Progress,
    noop_outcome,
)

# How many times a checkpoint that measured over the limit is fitted again (SPEC P5).
_CORRECTIONS = 2
USER_EDITED = "user-edited"  # SPEC M7: the `summarizer` of a checkpoint the user wrote


@dataclass(frozen=True)
class PreviewBase:
    """SPEC M7: the branch a preview was made on (its leaf and revision)."""

    leaf_id: str | None
    revision: int

    def __str__(self) -> str:
        return f"{self.leaf_id}@{self.revision}"

    @classmethod
    def parse(cls, text: str) -> PreviewBase:
        """`leaf@revision`, as a preview prints it."""
        leaf, sep, rev = text.rpartition("@")
        if not sep or not leaf or not rev.isdigit():
            raise EditedSummaryError(f"a preview base is 'leaf_id@revision' (as --preview "
                                     f"prints it), not {text!r}")
        return cls(leaf_id=leaf, revision=int(rev))


class StalePreviewError(ContextfoldError):
    """SPEC M7: the session moved after the preview; the edited summary was not committed."""

    kind = "conflict"
    code = "stale_preview"

    def __init__(self, base: PreviewBase, now: PreviewBase) -> None:
        super().__init__(f"the session moved since the preview (previewed on {base}, now "
                         f"{now}); nothing was committed: preview again and edit that")
        self.base, self.now = base, now


class EditedSummaryError(ContextfoldError, ValueError):
    """SPEC M7: an edited summary that cannot be committed (empty, or nothing to fold)."""

    kind = "bad_input"


@dataclass(frozen=True)
class _Written:
    """A checkpoint ready to commit, and the request it leaves."""

    plan: Plan
    checkpoint: Checkpoint
    summary: Summary
    tokens_after: int


def with_recalled(plan: Plan | NoOp, recalled: tuple[RecallBlock, ...]) -> Plan | NoOp:
    """`plan` whose session prefix (`Plan.request`, what a summariser reading the cache
    starts with, SPEC Q3) holds the recall blocks its projection's turns were sent with
    (SPEC Q5): without them the summariser's request parts from the session's at the first
    block, and its input is no longer read from the cache."""
    if not recalled or not isinstance(plan, Plan) or plan.request is None:
        return plan
    projection = plan.request.projection
    held = held_blocks(RecallTurns("", tuple((b.before_id, b) for b in recalled)),
                       projection)
    return replace(plan, request=replace(plan.request,
                                         projection=replace(projection, recalled=held)))


async def compact_session(request: CompactionRequest) -> CompactionOutcome:
    """Plan, summarise and conditionally commit one compaction (`request` says which).

    The branch is loaded once (or taken from `request.branch` when still current); the plan,
    the summariser and the ledger share it, and the store's commit re-checks only the kept
    tail (SPEC C2).
    """
    store, session_id = request.store, request.session_id
    capacity, budget, trigger = request.capacity, request.budget, request.trigger
    summarize, instructions = request.summarize, request.instructions
    pending, system, tools = tuple(request.pending), request.system, request.tools
    summarizer_budget, estimate_tokens = request.summarizer_budget, request.estimate_tokens
    costs, branch = request.costs, request.branch
    preview, summary_text, base = request.preview, request.summary_text, request.base
    progress = request.progress
    if summary_text is not None:
        check_edit(summary_text)
    if summary_text is not None and preview:
        raise EditedSummaryError("preview shows what the summariser would write: give an "
                                 "edited summary to commit, or preview, not both")
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
        if base is not None and (branch.leaf_id, branch.revision) != (base.leaf_id,
                                                                       base.revision):
            raise StalePreviewError(base, PreviewBase(branch.leaf_id, branch.revision))
        if costs is None or costs.capacity != capacity:
            costs = MessageCosts(capacity)
        say(f"planning over {len(branch.nodes):,} nodes for {capacity.model}")
        estimate = None
        if estimate_tokens is not None:
            measured = estimate_request(project(branch), capacity, system=system, tools=tools,
                                        pending=pending, costs=costs)
            estimate = replace(measured, tokens=max(measured.tokens, estimate_tokens))
        smallest = smallest_summary_tokens()
        reads_cache = bool(getattr(summarize, "session_prefix", False))  # SPEC Q3

        def planned(for_budget: Budget) -> Plan | NoOp:
            plan = plan_compaction(branch, for_budget, trigger, capacity=capacity,
                                   instructions=instructions, pending=pending, system=system,
                                   tools=tools, summarizer_budget=summarizer_budget,
                                   estimate=estimate, costs=costs, smallest_summary=smallest)
            return with_recalled(plan, request.recalled)

        def measured(plan: Plan, summary: Summary) -> _Written:
            checkpoint = build_checkpoint(plan, summary.text, summarizer=summary.summarizer,
                                          model=capacity.model)
            if plan.action != "mask":
                checkpoint = checked_checkpoint(plan, checkpoint)  # SPEC S6, S7
            candidate = projection_after(plan, checkpoint, node_id=f"(candidate {new_id()})")
            after = estimate_request(candidate, capacity, system=system, tools=tools,
                                     pending=pending, costs=costs).tokens
            # Stored as the whole next request, like `tokens_before`: the two compare.
            update: dict[str, Any] = {"tokens_after_estimate": after}
            if summary.usage is not None:  # SPEC Q4: what summarising cost, with the node
                update["details"] = {**checkpoint.details,
                                     "summarizer_usage": summary.usage.model_dump()}
            checkpoint = checkpoint.model_copy(update=update)
            return _Written(plan, checkpoint, summary, after)

        plan = planned(budget)
        if isinstance(plan, NoOp):
            if summary_text is not None:  # M7: nothing to fold, so nothing to commit it for
                raise EditedSummaryError(f"nothing to compact, so the edited summary was not "
                                         f"committed: {plan.reason}")
            return noop_outcome(plan)
        if summary_text is not None:  # SPEC M7: the user's text, not a summariser's
            if plan.action == "mask":
                plan = replace(plan, action="summarize", mask_before_id=None)
            summary = Summary(summary_text.strip(), USER_EDITED)
        elif plan.action == "mask":  # SPEC V2: no summariser; the previous summary stays
            say("masking old tool output")
            summary = Summary("", MASKING_SUMMARIZER)
        else:
            say(f"summarising {len(plan.newly_old):,} messages in {len(plan.chunks)} chunk(s)")
            summary = await summarize(plan)
        written = measured(plan, summary)
        if summary_text is not None:
            written = replace(written, checkpoint=written.checkpoint.model_copy(
                update={"details": {**written.checkpoint.details, "edited_by_user": True}}))
        if preview:  # SPEC M7, explained as the commit would be (issue 40)
            return _previewed(_explained(written, trigger, branch, capacity, system, tools,
                                         pending, costs, reads_cache)[0], trigger)
        if trigger == "preflight":
            written = _fit_tighter(written, planned, measured, smallest)
        if trigger == "auto" and written.tokens_after >= written.plan.tokens_before:
            return CompactionOutcome(
                status="noop", code="not_smaller", trigger=trigger,
                reason=f"the checkpoint would not make the request smaller "
                       f"({written.plan.tokens_before:,} → {written.tokens_after:,} tokens); "
                       "nothing was committed")
        written, pays = _explained(written, trigger, branch, capacity, system, tools, pending,
                                   costs, reads_cache)
        if not pays:
            return CompactionOutcome(
                status="noop", code="would_not_pay", trigger=trigger,
                reason="the checkpoint as written would cost more than carrying the context "
                       "(the cost trigger's forecast); nothing was committed")
        say("committing the checkpoint")
        plan = written.plan
        result = await store.commit_checkpoint(plan, written.checkpoint, session_id=session_id)
    if result.status != "committed":
        return CompactionOutcome(status="stale", reason=result.reason, code="stale",
                                 tokens_before=plan.tokens_before, trigger=trigger)
    grew = written.tokens_after >= plan.tokens_before
    return CompactionOutcome(
        status="compacted",
        checkpoint_id=result.checkpoint.id if result.checkpoint else None,
        first_kept_id=plan.first_kept_id,
        tokens_before=plan.tokens_before,
        tokens_after=written.tokens_after,
        summarized_messages=len(plan.newly_old),
        kept_messages=len(plan.kept),
        kept_tokens=plan.kept_tokens,
        summarizer=written.summary.summarizer,
        trigger=trigger,
        fallback_reason=written.summary.fallback_reason,
        edited=summary_text is not None,
        note=(f"the request did not get smaller ({plan.tokens_before:,} → "
              f"{written.tokens_after:,} tokens): the checkpoint outweighs what it folded"
              if grew else None),
        check=(public_check(written.checkpoint.details["check"])
               if "check" in written.checkpoint.details else None),
        folded_tokens=plan.newly_old_tokens,
        tail_budget=plan.tail_budget,
        split_turn=written.checkpoint.turn is not None and bool(plan.kept),
        clipped_results=len(plan.tail_clips),
        folded_ids=tuple(n.id for n in plan.newly_old),
        summarizer_usage=written.summary.usage,
        explanation=stored_explanation(written.checkpoint.details),
    )


def _explained(written: _Written, trigger: Trigger, branch: Branch, capacity: ModelCapacity,
               system: str | None, tools: Sequence[Any] | None, pending: Sequence[Message],
               costs: MessageCosts, summary_reads_cache: bool) -> tuple[_Written, bool]:
    """The checkpoint with its explanation (issue 40, `core.report.explain`) in its details: the
    trigger, the request before and after, and the cost trigger's forecast of this
    compaction at the session's rhythm (`core.planning.cost_trigger.compaction_forecast`); and
    whether to commit it. Only a cost-triggered compaction with a free summary can be held
    back (SPEC Q2: never at a predicted loss; the hard bounds always commit): the decision
    forecast its size before the summary was written, and the written one may forecast a
    loss; a model's summary is committed, its call being spent."""
    plan = written.plan
    projection = project(branch)
    fixed = estimate_request(fixed_part(projection), capacity, system=system,
                             tools=list(tools) if tools else None, pending=pending,
                             costs=costs).tokens
    messages = projection.messages
    rhythm = session_rhythm([n.message.role if n.message is not None else ""
                             for n in messages], [costs(n) for n in messages])
    kind = trigger_kind(trigger, over_threshold=over_auto_threshold(plan.tokens_before,
                                                                    plan.budget))
    price = user_prices().lookup(capacity.model)

    # The offline summary (and a masking step) asks no model: its call costs nothing.
    free = not names_a_model(written.summary.summarizer)
    expected = compaction_forecast(plan.tokens_before, written.tokens_after, plan.budget,
                                   fixed=fixed, folded=plan.newly_old_tokens,
                                   kept=plan.kept_tokens, growth=rhythm.per_request,
                                   price=price, summary_reads_cache=summary_reads_cache,
                                   summary_free=free)
    explanation = CompactionExplanation.of(kind, plan.tokens_before, written.tokens_after,
                                           expected)
    # A model's summary is paid for by now, and refusing it would ask for another on the
    # next turn: only a free one (the offline summary, a masking step) is held back.
    pays = kind != "cost" or not free or expected.saving > 0
    checkpoint = written.checkpoint.model_copy(update={"details": {
        **written.checkpoint.details, DETAILS_KEY: explanation.stored()}})
    return replace(written, checkpoint=checkpoint), pays


def check_edit(text: str) -> None:
    """SPEC M7: refuse an edited summary that cannot be committed whatever the session."""
    if not isinstance(text, str) or not text.strip():
        raise EditedSummaryError("the edited summary is empty: write the summary to commit, "
                                 "or compact without one to let the summariser write it")


def _previewed(written: _Written, trigger: Trigger) -> CompactionOutcome:
    """SPEC M7: the outcome of a preview: what would be committed, and on which branch."""
    plan, cp = written.plan, written.checkpoint
    return CompactionOutcome(
        status="preview", first_kept_id=plan.first_kept_id, tokens_before=plan.tokens_before,
        tokens_after=written.tokens_after, summarized_messages=len(plan.newly_old),
        kept_messages=len(plan.kept), kept_tokens=plan.kept_tokens,
        summarizer=written.summary.summarizer, trigger=trigger,
        fallback_reason=written.summary.fallback_reason, summary=cp.summary,
        checkpoint_text=checkpoint_text(cp),
        base=str(PreviewBase(plan.session_leaf_id, plan.branch_revision)),
        folded_tokens=plan.newly_old_tokens, tail_budget=plan.tail_budget,
        folded_ids=tuple(n.id for n in plan.newly_old),
        explanation=stored_explanation(cp.details))


def _fit_tighter(written: _Written, planned: Callable[[Budget], Plan | NoOp],
                 measured: Callable[[Plan, Summary], _Written], smallest: int) -> _Written:
    """SPEC P5: a preflight checkpoint that measures over the safe limit is fitted again,
    by the offline summariser's priority rules (no second model call), to a summary budget
    smaller by what it was over; the smallest request written is kept."""
    best = written
    for _ in range(_CORRECTIONS):
        limit = best.plan.budget.safe_input_limit
        if best.tokens_after <= limit or best.plan.action == "mask":
            break
        tighter = tighter_budget(best.plan.budget, best.tokens_after - limit, smallest)
        if tighter is None:
            break
        plan = planned(tighter)
        if isinstance(plan, NoOp) or plan.newly_old != best.plan.newly_old:
            break  # the tighter plan folds something else: its text would not cover it
        try:
            text = fit_summary(best.summary.text, plan.profile, summary_token_budget(plan))
        except SummaryBudgetTooSmall:
            break
        candidate = measured(plan, replace(best.summary, text=text))
        if candidate.tokens_after >= best.tokens_after:
            break
        best = candidate
    return best


async def take_up_provider_compaction(store: CompactionStore, session_id: str, branch: Branch,
                                      budget: Budget) -> CompactionOutcome | None:
    """SPEC Y7: commit the checkpoint that starts from a provider's own compaction on
    `branch` (nothing summarised, `core.planning.planner.adopt_provider_compaction`); None when the
    branch has none to take up or its tool workflow is not settled yet (the next call
    tries again). A stale commit (the branch moved) is reported as such."""
    adopted = adopt_provider_compaction(branch, budget)
    if adopted is None:
        return None
    plan, checkpoint = adopted
    explanation = CompactionExplanation.of(
        "provider", plan.tokens_before, checkpoint.tokens_after_estimate or 0, None)
    checkpoint = checkpoint.model_copy(update={"details": {
        **checkpoint.details, DETAILS_KEY: explanation.stored()}})
    async with store.compaction_lease(session_id):
        result = await store.commit_checkpoint(plan, checkpoint, session_id=session_id)
    if result.status != "committed":
        return CompactionOutcome(status="stale", reason=result.reason, code="stale",
                                 trigger="auto")
    return CompactionOutcome(
        status="compacted", checkpoint_id=result.checkpoint.id if result.checkpoint else None,
        first_kept_id=plan.first_kept_id, kept_messages=len(plan.kept),
        summarizer=checkpoint.summarizer, trigger="auto", explanation=explanation)
