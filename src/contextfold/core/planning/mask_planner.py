"""Choosing a masking step instead of a summary (SPEC V2) -- no model call needed.

When an automatic or preflight compaction is due, the planner first asks `plan_masking`:
mask every large tool result outside the recent tail (the messages that fit the tail
budget, SPEC K2, walking back from the leaf). If the masked request is under the target
(auto: the auto threshold; preflight: the safe limit) and masking frees at least the
thrash-guard share, the compaction is a masking step: a checkpoint that keeps the
previous summary, ledger and boundary verbatim and only moves `masked_before_id`.
Otherwise the planner summarises as before; the summariser reads the durable nodes, so what
was masked is folded into the summary too.

Modes (`CompactionSettings.masking`): off, auto (default), always (see `budget.py`).
Manual compaction always summarises: it is an explicit "checkpoint now" (SPEC M1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..models.budget import Budget, ModelCapacity
from ..sizing.estimator import Estimate, MessageCosts, estimate_message, estimate_request
from ..text.text_estimate import estimate_text
from ..values.messages import Checkpoint, Ledger, Message, Node
from ..values.tree import Branch
from ..view.masking import MASKING_SUMMARIZER, MaskedNode, apply_mask, maskable
from ..view.projection import Projection, checkpoint_text, raw_start
from .boundary import Boundary
from .plan import Plan, Profile, Trigger


def _cost(capacity: ModelCapacity, costs: MessageCosts | None) -> Callable[[Node], int]:
    if costs is not None:
        return costs
    return lambda node: 0 if node.message is None else estimate_message(node.message, capacity)


def mask_point(raw: Sequence[Node], budget: Budget, cost: Callable[[Node], int]) -> int | None:
    """Index in `raw` where masking stops; None when there is nothing older to mask.

    The recent tail is the longest run of messages ending at the leaf within the tail
    budget (SPEC K2's budget). Unlike a summary boundary it need not start a user turn:
    masking replaces outputs and keeps every call with its result, so it may stop inside a
    long autonomous turn. The latest tool round always stays raw.
    """
    used, cut = 0, len(raw)
    for i in range(len(raw) - 1, -1, -1):
        used += cost(raw[i])
        if used > budget.tail_budget:
            break
        cut = i
    latest_call = next((i for i in range(len(raw) - 1, -1, -1)
                        if raw[i].message is not None and raw[i].message.tool_calls), None)
    if latest_call is not None:
        cut = min(cut, latest_call)
    return cut if cut > 0 else None


def plan_masking(
    branch: Branch,
    projection: Projection,
    budget: Budget,
    trigger: Trigger,
    estimate: Estimate,
    *,
    capacity: ModelCapacity,
    costs: MessageCosts | None = None,
    pending: Sequence[Message] = (),
    system: str | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    summarizer_budget: Budget | None = None,
    profile: Profile | None = None,
) -> Plan | None:
    """A masking plan for `branch`, or None when the planner should summarise (SPEC V2)."""
    if budget.masking == "off" or trigger == "manual":
        return None
    leaf = branch.leaf
    assert leaf is not None
    raw = [n for n in branch.nodes[raw_start(branch):] if n.message is not None]
    cost = _cost(capacity, costs)
    cut = mask_point(raw, budget, cost)
    if cut is None:
        return None
    previous = branch.latest_checkpoint
    previous_cp = previous.checkpoint if previous is not None else None
    ids = [n.id for n in raw]
    current = previous_cp.masked_before_id if previous_cp is not None else None
    if current in ids and ids.index(current) >= cut:
        return None  # nothing new to mask
    if not any(n.message is not None and maskable(n.message) for n in raw[:cut]):
        return None
    masked = apply_mask(raw, raw[cut].id)
    checkpoint = Checkpoint(
        summary=previous_cp.summary if previous_cp is not None else "",
        first_kept_id=raw[0].id,
        tokens_before=estimate.tokens,
        ledger=previous_cp.ledger if previous_cp is not None else Ledger(),
        masked_before_id=raw[cut].id,
        pins=projection.pins,
        provider_base=() if previous_cp is None else previous_cp.provider_base,
    )
    preview = Projection(
        checkpoint=Node(id=f"(masking-preview:{leaf.id}:{raw[cut].id})", parent_id=leaf.id,
                        payload=checkpoint),
        messages=masked, after_checkpoint=len(masked), pins=projection.pins)
    after = estimate_request(preview, capacity, system=system, tools=tools, pending=pending,
                             costs=costs).tokens
    freed = estimate.tokens - after
    if trigger == "preflight":
        if after > budget.safe_input_limit:
            return None
    else:
        if freed < int(budget.min_free_fraction * estimate.tokens):
            return None  # thrash guard: a step that frees this little is not worth it
        if budget.masking == "auto" and after > budget.auto_threshold:
            return None
    return Plan(
        trigger=trigger,
        session_leaf_id=leaf.id,
        branch_revision=branch.revision,
        first_kept_id=raw[0].id,
        previous_checkpoint_id=None if previous is None else previous.id,
        previous_summary=(previous_cp.summary or None) if previous_cp is not None else None,
        previous_ledger=checkpoint.ledger,
        previous_details=previous_cp.details if previous_cp is not None else {},
        newly_old=(),
        kept=masked,
        chunks=(),
        tokens_before=estimate.tokens,
        kept_tokens=sum(cost(n) for n in masked),
        newly_old_tokens=0,
        budget=budget,
        summarizer_budget=summarizer_budget or budget,
        profile=profile or (previous_cp.profile if previous_cp is not None else "research"),
        previous_first_kept_id=None if previous_cp is None else previous_cp.first_kept_id,
        boundary_moved=False,
        action="mask",
        mask_before_id=raw[cut].id,
        pins=projection.pins,
        provider_base=() if previous_cp is None else previous_cp.provider_base,
    )


def build_mask_checkpoint(plan: Plan, *, model: str | None = None) -> Checkpoint:
    """The checkpoint of a masking step: previous summary, ledger and boundary unchanged."""
    masked_results = sum(1 for n in plan.kept if isinstance(n, MaskedNode))
    checkpoint = Checkpoint(
        summary=plan.previous_summary or "",
        first_kept_id=plan.first_kept_id,
        tokens_before=plan.tokens_before,
        model=model or plan.budget.model,
        profile=plan.profile,
        summarizer=MASKING_SUMMARIZER,
        ledger=plan.previous_ledger,
        details={
            "trigger": plan.trigger,
            "action": "mask",
            "masked_messages": masked_results,
            "previous_checkpoint_id": plan.previous_checkpoint_id,
            # SPEC S6: the summary is the previous one, so is its check (and what it carries)
            **({"check": plan.previous_details["check"]}
               if "check" in plan.previous_details else {}),
        },
        pins=plan.pins,
        masked_before_id=plan.mask_before_id,
        provider_base=plan.provider_base,
    )
    after = estimate_text(checkpoint_text(checkpoint)) + plan.kept_tokens
    return checkpoint.model_copy(update={"tokens_after_estimate": after})


def carried_mask(previous: Checkpoint | None, kept: Sequence[Node]) -> str | None:
    """A summary keeps an earlier mask while its end is still inside the new raw tail."""
    if previous is None or previous.masked_before_id is None:
        return None
    return previous.masked_before_id if any(
        n.id == previous.masked_before_id for n in kept[1:]) else None


def projected_boundary(boundary: Boundary, projection: Projection,
                       cost: Callable[[Node], int]) -> Boundary:
    """`boundary` with its newly-old size as projected (masked copies cost what they show),
    so the thrash guard counts what a summary really frees."""
    shown = {n.id: n for n in projection.messages}
    tokens = sum(cost(shown.get(n.id, n)) for n in boundary.newly_old)
    return replace(boundary, newly_old_tokens=tokens)
