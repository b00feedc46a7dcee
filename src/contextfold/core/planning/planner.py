"""The prepare step: decide whether and how to compact, without any I/O.

`plan_compaction` returns a `NoOp` (a success with a reason) or a `Plan`. The three triggers
differ only in when they act and what they must achieve:

* manual (M1-M5): ignores the threshold; compacts whatever it sensibly can;
* auto (A1-A3): only above the threshold, only when stable, only if the boundary advances
  and the compaction frees a real share of the context (the thrash guard);
* preflight (P1-P2, P5): only when the next request, with the drafts, would not fit; the
  tail budget shrinks so that summary + tail + drafts (+ system prompt, tools, pins) fit
  the safe limit, and when no tail is left the summary budget shrinks too (`core.sizing.fit`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..models.budget import Budget, ModelCapacity
from ..render.serialize import SerializeLimits, split_into_chunks
from ..sizing.estimator import (
    Estimate,
    MessageCosts,
    estimate_message,
    estimate_request,
    estimate_text,
    model_text_counter,
)
from ..sizing.fit import fit_budget
from ..text.identifiers import combine_identifiers, identifiers_by_message
from ..values.messages import RESOURCE_PART_TYPES as _RESOURCE_TYPES
from ..values.messages import (
    Checkpoint,
    Ledger,
    Message,
    Node,
    ProviderCompactionPart,
    ToolCallPart,
)
from ..values.tree import Branch, check_stability
from ..view.masking import apply_mask
from ..view.pins import pins_text
from ..view.projection import (
    Projection,
    checkpoint_text,
    fixed_part,
    project,
    provider_base,
    provider_compaction_index,
    raw_start,
)
from .boundary import Boundary, choose_boundary, latest_turn_boundary, turn_starts
from .ledger import evicted_since, ledger_tokens, merge_ledger, plan_ledger
from .mask_planner import (
    build_mask_checkpoint,
    carried_mask,
    plan_masking,
    projected_boundary,
)
from .plan import NoOp, Plan, Profile, RequestPrefix, Trigger
from .split_turn import split_turn_context, turn_context_tokens

# Upper bound on what the summary prompt template adds around the conversation text; the
# prompts module's own bound is tested to stay within it.
SUMMARY_PROMPT_ALLOWANCE = 2_000

_CODING_TOOLS = frozenset(
    {"bash", "edit", "write", "read", "grep", "glob", "multiedit", "notebookedit", "ls", "find"}
)


# A tool of a reference library (SPEC S10: the research profile).
_RESEARCH_TOOL = re.compile(r"zotero|librar|citation|bibliograph|pubmed|arxiv|scholar|paper",
                            re.IGNORECASE)


def detect_profile(nodes: Sequence[Node], previous: Profile | None = None) -> Profile:
    """The checkpoint profile the session calls for (SPEC S10): research when it uses a
    reference library (its resources or tools), coding when it reads, edits or runs files,
    general when neither. A span showing neither keeps the `previous` checkpoint's
    profile (a quiet stretch does not make a coding session a chat); one showing the
    other kind changes it (the session changed)."""
    coding = False
    for node in nodes:
        msg = node.message
        if msg is None:
            continue
        for part in msg.parts:
            if isinstance(part, _RESOURCE_TYPES):
                return "research"
            if isinstance(part, ToolCallPart):
                name = part.name.lower()
                if _RESEARCH_TOOL.search(name):
                    return "research"
                coding = coding or name in _CODING_TOOLS
    if coding:
        return "coding"
    return previous or "general"


def plan_compaction(
    branch: Branch,
    budget: Budget,
    trigger: Trigger,
    *,
    capacity: ModelCapacity,
    instructions: str | None = None,
    pending: Sequence[Message] = (),
    system: str | None = None,
    tools: Sequence[dict[str, Any]] | None = None,
    summarizer_budget: Budget | None = None,
    profile: Profile | None = None,
    estimate: Estimate | None = None,
    costs: MessageCosts | None = None,
    smallest_summary: int = 0,
) -> Plan | NoOp:
    """Decide on a compaction of `branch` for the model described by `budget`/`capacity`.

    `pending` are draft messages not yet stored (preflight, SPEC P1). `estimate` may be
    passed when the caller already measured the request; otherwise it is computed here.
    `costs` memoises message estimates across calls (see `MessageCosts`); without one, a
    memo for this call is made, so the estimate and the boundary share each message's cost.
    `smallest_summary`: tokens of the shortest summary text the summariser may have to
    write; when given, the ledger never takes that room from the summary, and a preflight
    may shrink the summary budget down to the smallest checkpoint (SPEC P5).
    """
    leaf = branch.leaf
    if leaf is None:
        return NoOp("the session is empty", trigger, "empty")
    if leaf.checkpoint is not None and not pending:
        return NoOp("nothing new since the latest checkpoint", trigger, "already_compacted")
    stability = check_stability(branch)
    if not stability.stable:
        return NoOp("tool workflow not settled: " + "; ".join(stability.reasons), trigger,
                    "unstable")
    if provider_compaction_index(branch) is not None:
        # SPEC Y7: a provider's compaction is taken up as it is (`adopt_provider_compaction`),
        # never summarised again; contextfold compacts only what follows it.
        return NoOp("the provider's own compaction is not taken up yet", trigger,
                    "provider_compaction")

    if costs is None or costs.capacity != capacity:
        costs = MessageCosts(capacity)
    projection = project(branch)
    if estimate is None:
        estimate = estimate_request(projection, capacity, system=system, tools=tools,
                                    pending=pending, costs=costs)
    tokens_before = estimate.tokens

    # SPEC Q2: with the cost trigger the check after the turn (`core.planning.cost_trigger`) chose
    # to compact below the threshold; the thrash guard below still applies.
    if trigger == "auto" and budget.trigger == "size" and \
            tokens_before <= budget.auto_threshold:
        return NoOp(f"{tokens_before} tokens is below the auto threshold "
                    f"{budget.auto_threshold}", trigger, "below_threshold")
    if trigger == "preflight" and tokens_before <= budget.safe_input_limit:
        return NoOp(f"the next request ({tokens_before} tokens) fits the safe limit "
                    f"{budget.safe_input_limit}", trigger, "fits")
    # SPEC V2: masking old tool output first, when that alone is enough (no model call).
    masking = plan_masking(branch, projection, budget, trigger, estimate, capacity=capacity,
                           costs=costs, pending=pending, system=system, tools=tools,
                           summarizer_budget=summarizer_budget, profile=profile)
    if masking is not None:
        return masking

    region_start = raw_start(branch)
    region = [n for n in branch.nodes[region_start:] if n.message is not None]
    # Each message is measured once: the boundary and the chunking both use these sizes.
    sizes = {n.id: costs(n) for n in region}
    after = _nodes_after_checkpoint(branch)
    sizes.update((n.id, costs(n)) for n in after if n.id not in sizes)

    def cost(node: Node) -> int:
        return sizes[node.id]

    previous = branch.latest_checkpoint
    previous_cp = previous.checkpoint if previous is not None else None
    if trigger == "preflight":
        # P2, P5: the checkpoint and the tail share what the request's fixed part leaves:
        # the tail gives way first, then the summary shrinks to the room that is left.
        fixed = estimate_request(fixed_part(projection), capacity, system=system,
                                 tools=tools, pending=pending, costs=costs).tokens
        budget = fit_budget(budget, fixed, smallest_summary)
    tail_budget = budget.tail_budget
    boundary = _choose(trigger, region, budget, cost, tail_budget, costs)
    if trigger == "manual" and previous_cp is None and len(turn_starts(region)) <= 1 \
            and not boundary.split:
        # M3; a single turn too long for the tail is still split (K6).
        return NoOp("only one turn so far: nothing to compact yet", trigger, "single_turn")
    in_tool_loop = not pending and bool(region) and region[-1].message is not None \
        and region[-1].message.role == "tool"
    turn = split_turn_context(region, boundary, previous_cp, budget, in_tool_loop=in_tool_loop)
    moved = boundary.moved
    prev_summary_tokens = 0 if previous_cp is None else estimate_text(checkpoint_text(previous_cp))
    if not moved:
        refit = trigger == "preflight" and previous_cp is not None and \
            prev_summary_tokens > budget.summary_budget
        if (trigger == "manual" and previous_cp is not None and after) or refit:
            # M4: nothing can leave the tail, but the summary can still catch up; P5: the
            # summary must shrink to make room for the drafts. The unmoved boundary is the
            # region start: the previous first_kept_id, or the first node after a
            # checkpoint that kept nothing raw.
            boundary = Boundary(boundary.first_kept_id, tuple(after), boundary.kept,
                                sum(cost(n) for n in after), boundary.kept_tokens,
                                boundary.split, boundary.clips)
        elif trigger == "manual":
            return NoOp("only one turn since the last checkpoint: nothing to compact",
                        trigger, "single_turn")
        else:
            return NoOp("the keep boundary would not advance, so nothing would be freed",
                        trigger, "boundary_fixed")

    if trigger == "auto":
        guard = _thrash_guard(projected_boundary(boundary, projection, costs),
                              prev_summary_tokens, budget, tokens_before)
        if guard is not None:
            return guard

    summ_budget = summarizer_budget or budget
    chunk_limit = _chunk_token_limit(summ_budget, budget, instructions)
    limits = SerializeLimits.for_budget(chunk_limit)
    chunks = split_into_chunks(boundary.newly_old, chunk_limit, limits, sizes=sizes)
    # One extraction per message: the ledger here and the summariser's facts (Plan) share it.
    extracted = identifiers_by_message(boundary.newly_old)
    mask_before_id = carried_mask(previous_cp, boundary.kept)
    ledger_cap = budget.ledger_budget
    if smallest_summary:
        # The ledger takes what it needs, but never the room of the shortest summary.
        reserve = turn_context_tokens(turn) + smallest_summary
        ledger_cap = max(1, min(ledger_cap, budget.summary_budget - reserve))
        if ledger_cap != budget.ledger_budget:
            budget = budget.model_copy(update={"ledger_budget": ledger_cap})
    return Plan(
        trigger=trigger,
        session_leaf_id=leaf.id,
        branch_revision=branch.revision,
        first_kept_id=boundary.first_kept_id,
        previous_checkpoint_id=None if previous is None else previous.id,
        # A masking-only checkpoint has no summary yet: the next summary is a first one.
        previous_summary=None if previous_cp is None else (previous_cp.summary or None),
        previous_ledger=previous_cp.ledger if previous_cp is not None else Ledger(),
        previous_details=previous_cp.details if previous_cp is not None else {},
        newly_old=boundary.newly_old,
        kept=boundary.kept,
        chunks=chunks,
        tokens_before=tokens_before,
        kept_tokens=boundary.kept_tokens,
        newly_old_tokens=boundary.newly_old_tokens,
        budget=budget,
        summarizer_budget=summ_budget,
        profile=profile or detect_profile(
            branch.nodes, previous_cp.profile if previous_cp is not None and previous_cp.summary
            else None),
        instructions=instructions,
        previous_first_kept_id=None if previous_cp is None else previous_cp.first_kept_id,
        boundary_moved=moved,
        # The ledger is fitted to its cap by this model's own token count.
        ledger=merge_ledger(previous_cp.ledger if previous_cp is not None else Ledger(),
                            combine_identifiers(extracted.values()), ledger_cap,
                            model_text_counter(capacity)),
        extracted=extracted,
        tail_budget=tail_budget,
        turn_context=turn,
        tail_clips=dict(boundary.clips),
        mask_before_id=mask_before_id,
        pins=projection.pins,
        request=RequestPrefix(projection, system, tuple(tools or ())),
        provider_base=() if previous_cp is None else carried_base(previous_cp.provider_base,
                                                                  boundary.kept),
    )


def _choose(
    trigger: Trigger,
    region: list[Node],
    budget: Budget,
    cost: Callable[[Node], int],
    tail_budget: int,
    costs: MessageCosts,
) -> Boundary:
    boundary = choose_boundary(region, tail_budget, cost, split_turn=budget.split_turn,
                               measure=costs.measure)
    if trigger == "manual" and not boundary.moved:
        # M2: the tail budget would keep everything; "compact now" still compacts.
        latest = latest_turn_boundary(region, cost)
        if latest.moved:
            return latest
    return boundary


def _nodes_after_checkpoint(branch: Branch) -> list[Node]:
    ci = branch.latest_checkpoint_index
    if ci is None:
        return []
    return [n for n in branch.nodes[ci + 1 :] if n.message is not None]


def _thrash_guard(
    boundary: Boundary, prev_summary_tokens: int, budget: Budget, tokens_before: int
) -> NoOp | None:
    """Auto compaction must free a real share of the context, or it would just churn."""
    replaced = boundary.newly_old_tokens + prev_summary_tokens
    new_summary = min(budget.summary_budget, replaced)
    freed = replaced - new_summary
    needed = int(budget.min_free_fraction * tokens_before)
    if freed < needed:
        return NoOp(
            f"compaction would free about {freed} tokens, less than {needed} "
            f"({budget.min_free_fraction:.0%} of {tokens_before}); not worth a summary",
            "auto",
            "thrash_guard",
        )
    return None


def _chunk_token_limit(summarizer: Budget, chat: Budget, instructions: str | None) -> int:
    """Hard bound on one chunk of serialised history for the summariser (SPEC R, issue 8).

    The summariser's request holds the prompt, the user's instructions, the running summary
    (at most the summary budget, and never more than the summariser can answer with) and
    one chunk; its answer fits its own reserve.
    """
    running_summary = min(chat.summary_budget, summarizer.reserve)
    extra = estimate_text(instructions) if instructions else 0
    room = summarizer.safe_input_limit - SUMMARY_PROMPT_ALLOWANCE - running_summary - extra
    return max(256, room)


def build_checkpoint(
    plan: Plan,
    summary: str,
    *,
    summarizer: str,
    ledger_entries: Sequence[Any] | None = None,
    model: str | None = None,
) -> Checkpoint:
    """The checkpoint to commit for `plan`: summary, boundary, carried-forward ledger,
    active pins (SPEC N2); for a masking plan the masking checkpoint (SPEC V2).

    `details["ledger"]` records the ledger's size, its cap and what this compaction
    evicted from it (SPEC L3: every eviction is recorded, never silent).
    """
    if plan.action == "mask":
        return build_mask_checkpoint(plan, model=model)
    if ledger_entries is None:
        ledger = plan_ledger(plan)
    else:
        ledger = merge_ledger(plan.previous_ledger, ledger_entries, plan.budget.ledger_budget)
    checkpoint = Checkpoint(
        summary=summary,
        first_kept_id=plan.first_kept_id,
        tokens_before=plan.tokens_before,
        model=model or plan.budget.model,
        profile=plan.profile,
        summarizer=summarizer,
        ledger=ledger,
        details={
            "trigger": plan.trigger,
            "newly_old": len(plan.newly_old),
            "chunks": len(plan.chunks),
            "previous_checkpoint_id": plan.previous_checkpoint_id,
            "instructions": plan.instructions,
            "ledger": {
                "tokens": ledger_tokens(ledger),
                "cap": plan.budget.ledger_budget,
                "entries": len(ledger.entries),
                "evicted": [e.model_dump(mode="json")
                            for e in evicted_since(plan.previous_ledger, ledger)],
            },
        },
        turn=plan.turn_context,
        tail_clips=dict(plan.tail_clips),
        pins=plan.pins,
        masked_before_id=plan.mask_before_id,
        provider_base=plan.provider_base,
    )
    after = estimate_text(checkpoint_text(checkpoint)) + plan.kept_tokens + sum(
        estimate_message(m) for m in plan.provider_base)
    if plan.pins:
        after += estimate_text(pins_text(plan.pins))
    return checkpoint.model_copy(update={"tokens_after_estimate": after})


def carried_base(base: Sequence[Message], kept: Sequence[Node]) -> tuple[Message, ...]:
    """A provider base (SPEC Y7) as the next checkpoint carries it: a tool call in it whose
    result is neither in the base nor still kept raw is left out, because its result was
    folded into the summary (K1: no call goes out without its result)."""
    answered = {r.call_id for m in base for r in m.tool_results}
    answered |= {r.call_id for n in kept if n.message is not None
                 for r in n.message.tool_results}
    out = []
    for msg in base:
        parts = tuple(p for p in msg.parts
                      if not isinstance(p, ToolCallPart) or p.id in answered)
        out.append(msg if len(parts) == len(msg.parts) else
                   msg.model_copy(update={"parts": parts}))
    return tuple(out)


def adopt_provider_compaction(branch: Branch, budget: Budget) -> tuple[Plan, Checkpoint] | None:
    """The checkpoint that takes up the latest provider compaction on `branch` (SPEC Y7),
    with the plan its conditional commit checks; None when there is none to take up.

    Nothing is summarised: the checkpoint's summary is empty and its `provider_base` holds
    what that provider needs first; the messages after the compaction stay raw (its
    `first_kept_id`), and every later checkpoint carries the base forward.
    """
    index = provider_compaction_index(branch)
    leaf = branch.leaf
    if index is None or leaf is None or not check_stability(branch).stable:
        return None
    after = [n for n in branch.nodes[index + 1:] if n.message is not None]
    previous = branch.latest_checkpoint
    previous_cp = previous.checkpoint if previous is not None else None
    base = provider_base(branch, index)
    first_kept = after[0].id if after else None
    pins = project(branch).pins
    plan = Plan(trigger="auto", session_leaf_id=leaf.id, branch_revision=branch.revision,
                first_kept_id=first_kept,
                previous_checkpoint_id=None if previous is None else previous.id,
                previous_summary=None, previous_ledger=Ledger(), newly_old=(),
                kept=tuple(after), chunks=(), tokens_before=0, kept_tokens=0,
                newly_old_tokens=0, budget=budget, summarizer_budget=budget,
                profile=previous_cp.profile if previous_cp is not None else "coding",
                boundary_moved=True, pins=pins, provider_base=base)
    provider = next(p.provider for m in base for p in m.parts
                    if isinstance(p, ProviderCompactionPart))
    checkpoint = Checkpoint(summary="", first_kept_id=first_kept, tokens_before=0,
                            model=budget.model, profile=plan.profile,
                            summarizer=f"provider:{provider}",
                            details={"trigger": "provider", "provider": provider,
                                     "previous_checkpoint_id": plan.previous_checkpoint_id},
                            pins=pins, provider_base=base)
    return plan, checkpoint


def projection_after(plan: Plan, checkpoint: Checkpoint,
                     node_id: str = "(pending-checkpoint)") -> Projection:
    """What the model will see once `checkpoint` is committed for `plan` (no I/O).

    `node_id` names the checkpoint's node: give each candidate its own when estimates are
    memoised by node id (`MessageCosts`), so one candidate's size is never another's.
    """
    node = Node(id=node_id, parent_id=plan.session_leaf_id, payload=checkpoint)
    kept = apply_mask(plan.kept, checkpoint.masked_before_id)
    return Projection(checkpoint=node, messages=kept, after_checkpoint=len(kept), pins=plan.pins,
                      clips=checkpoint.tail_clips)
