"""Checked retention (SPEC S6) and grounded attribution (S7) of a checkpoint summary.

After any summary (offline, LLM, a user's own function) and before it is committed, the
checkpoint is checked against what it folds. Required are, from the user messages of the
folded span: every constraint, decision and next step the user stated (verbatim, as the
offline summariser lists them); from the tool results: every error not resolved later in
the span (a later success of the same call resolves it); and what the previous
checkpoint's check required and found (`carried`), so a decision made in the first hour
is still checked at the fiftieth compaction. A correction by the user retires the
decision it corrects. Every identifier the span holds must be in the summary or the
ledger, or be listed as evicted with the node it is in.

What is missing is re-added verbatim, within the summary budget, in this priority order:
constraints, decisions, next steps, unresolved errors (the lowest-ranked lists of the
summary are trimmed first to make room, by the offline summariser's rules). What still
does not fit is named in a `[Recall]` line of Critical Context with the node it is in.
The result (`Check.to_json`) is stored in the checkpoint's details under "check".

What is required, and the `Check` value, are in `retention_required`; this module checks a
summary against them and re-adds or names what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.money.costs import names_a_model
from ..core.planning.ledger import evicted_since, ledger_tokens, merge_ledger
from ..core.planning.plan import Plan
from ..core.sizing.estimator import estimate_text
from ..core.text.text_estimate import Count, remembering
from ..core.values.messages import Checkpoint, Ledger
from ..core.view.projection import render_ledger
from .extractive import summary_token_budget
from .extractive_facts import norm_item
from .extractive_fit import FLOORS, SummaryBudgetTooSmall, fit_sections, render_sections
from .extractive_sections import (
    RECALL_PREFIX,
    Section,
    empty_sections,
    load_summary,
    user_section,
)
from .grounding import ground_summary, sources_of
from .prompts import CRITICAL, sections_for
from .retention_required import (  # noqa: F401  (re-exported; moved out in issue 39)
    _CARRIED,
    _LISTED,
    PRIORITY,
    Check,
    Required,
    _Holders,
    _norm,
    _Normed,
    _retire_corrected,
    _unique,
    _words,
    public_check,
    required_items,
)
from .summary import EXTRACTIVE, FALLBACK
from .user_statements import clip_words
from .user_words import directive_score

# SPEC S9: the ledger keeps at least this share of the summary budget (what it needs, up to
# this) when the user's words ask it for room.
LEDGER_FLOOR = 0.45
# A kind: the section kind (`extractive_sections.KINDS`) its missing items are re-added to.
_KIND_OF = {"statement": "user", "constraint": "user", "decision": "decisions",
            "next_step": "next", "error": "critical"}  # (`extractive_sections.KINDS`)
RECALL_CHARS = 600  # the [Recall] line names at most about this much
_SLACK = 24  # tokens beyond the items' own: the [Recall] line's frame, rounding
_GREEDY = 20  # items tried one by one after the longest prefix that fits


# --------------------------------------------------------------------------- the check


def _target(kind: str, plan: Plan) -> str:
    return {"statement": user_section(plan.profile), "constraint": user_section(plan.profile),
            "decision": "Decisions" if plan.profile == "research" else "Key Decisions",
            "next_step": "Next Steps", "error": CRITICAL}[kind]


def _score(r: Required, position: int, total: int) -> float:
    """The order missing statements are re-added in: most like an instruction first, then
    the newest (SPEC S8's ranking aid)."""
    return directive_score(r.text) + (position + 1) / max(1, total)


def _named(r: Required, text: str) -> bool:
    """A statement the summary names by its node (clipped, or listed as not repeated)."""
    return r.kind == "statement" and bool(r.node_id) and str(r.node_id) in text


def _item(r: Required) -> str:
    return f"({'tool' if r.kind == 'error' else 'user'}) {r.text}"


def _recall_line(evicted: Sequence[Required], quote: bool = True) -> str:
    named: list[str] = []
    size = 0
    for r in evicted:
        entry = (f"{r.kind.replace('_', ' ')} “{clip_words(r.text, 60)}” (node {r.node_id})"
                 if quote else f"{r.kind.replace('_', ' ')} at node {r.node_id}")
        if named and size + len(entry) > RECALL_CHARS:
            break
        named.append(entry)
        size += len(entry) + 2
    more = len(evicted) - len(named)
    return f"{RECALL_PREFIX} " + "; ".join(named) + (f"; and {more} more" if more else "")


class _FloorBreached(Exception):
    """Re-added items would push another kind of content below its floor (S9)."""


def _kinds(ordered: Sequence[Section], count: Count) -> dict[str, int]:
    held: dict[str, int] = {}
    for s in ordered:
        held[s.kind] = held.get(s.kind, 0) + sum(count(f"- {s.box}{i}\n") for i in s.items)
    return held


def _fitted(plan: Plan, text: str, add: Sequence[Required], evicted: Sequence[Required],
            budget: int, count: Count, norms: _Normed, quote: bool = True,
            sources: dict[str, str] | None = None) -> str:
    ordered, sections = empty_sections(plan.profile)
    load_summary(sections, text, plan.profile, sources)
    goal: Section = sections[sections_for(plan.profile)[0]]
    if goal.items:
        goal.pinned.add(norm_item(goal.items[0]))
    critical = sections[CRITICAL]
    critical.items = [i for i in critical.items if not i.startswith(RECALL_PREFIX)]
    before = _kinds(ordered, count)
    holders = _Holders(ordered, norms)
    user = sections[user_section(plan.profile)]
    for r in add:
        # An item that holds it already (with a frame, "[earlier …]") is kept, untrimmed.
        held = holders.last(norms[r.text])
        if held is not None:
            held[0].pinned.add(norm_item(held[1]))
        else:
            target = sections[_target(r.kind, plan)]
            if r.node_id and target.statements:
                target.sources[norm_item(_item(r))] = str(r.node_id)
            holders.add(target, _item(r))
        if r.kind == "statement" and r.node_id in user.omitted_nodes:
            user.omitted_nodes.remove(str(r.node_id))  # carried now, not only named
            user.omitted = max(0, user.omitted - 1)
    added = {_KIND_OF[r.kind] for r in add}
    if not evicted:
        out = fit_sections(ordered, budget, count)
    else:
        # The [Recall] line is added after fitting, in room kept for it: shortening it
        # would cut the node ids it exists to give.
        line = _recall_line(evicted, quote)
        fit_sections(ordered, max(1, budget - count(f"- {line}\n")), count)
        critical.items.append(line)
        out = render_sections(ordered)
        if count(out) > budget:
            critical.items.remove(line)
            critical.add([line], pin=True)
            out = fit_sections(ordered, budget, count)
    # S9: what is re-added takes room from its own kind and from room no kind needs,
    # never below another kind's floor (or what that kind held, when less).
    after = _kinds(ordered, count)
    for kind, share in FLOORS.items():
        if kind not in added and after.get(kind, 0) < min(before.get(kind, 0),
                                                           int(share * budget)):
            raise _FloorBreached(f"re-adding would leave {kind} below its floor")
    return out


def check_summary(plan: Plan, text: str, ledger: Ledger, *, summarizer: str,
                  budget: int, count: Count = estimate_text,
                  required: list[Required] | None = None,
                  readd_named: bool = False) -> tuple[str, Check]:
    """`text` checked against what `plan` folds (S6, S7): the summary to commit and the
    check's result. `ledger`: the one the checkpoint carries. `budget`: the summary's
    token budget (what re-added items must fit in). `required`: the plan's
    `required_items`, when the caller has them already. A statement the summary names by
    its node (clipped, or listed as not repeated for size: S8) counts as named, not
    missing, unless `readd_named` (there is room for it again)."""
    count = remembering(count)  # every attempt re-measures mostly the same lines
    norms = _Normed()
    check = Check()
    if summarizer not in (EXTRACTIVE, FALLBACK):
        # S7: the offline summariser copies what it attributes from the nodes themselves;
        # any other summariser's attributions are traced.
        text, check.ungrounded = ground_summary(
            text, sources_of(plan.newly_old, plan.previous_summary, plan.instructions))
    previous = plan.previous_details.get("check") or {}
    check.required = (required_items(plan.newly_old, previous.get("carried") or ())
                      if required is None else list(required))
    _identifiers(plan, text, ledger, check)
    # The ledger is part of the checkpoint: what it holds (a user's rule, a tool error) the
    # summary need not repeat.
    in_ledger = _norm(render_ledger(ledger))
    present = _norm(text)
    wanted = [r for r in check.required if norms[r.text] not in in_ledger]
    check.named = [r for r in wanted if norms[r.text] not in present and _named(r, text)]
    if not readd_named:
        named = {id(r) for r in check.named}
        wanted = [r for r in wanted if id(r) not in named]
    uncounted: list[Required] = []
    if not names_a_model(summarizer):
        # The offline summary chose which whole messages to carry by the fair shares and
        # counts the rest in its user section's note (S8, S9); a summary of the caller's
        # own function is theirs to shape: whole messages are re-added into a model's
        # summary only (their rules, decisions and next steps still are, into any).
        uncounted = [r for r in wanted if r.kind == "statement"
                     and norms[r.text] not in present]
        gone_ids = {id(r) for r in uncounted}
        wanted = [r for r in wanted if id(r) not in gone_ids]
    missing = [r for r in wanted if norms[r.text] not in present]
    if not missing:
        check.evicted = uncounted
        _held(check, text, norms)
        return text, check
    sources = {norm_item(r.text): str(r.node_id) for r in check.required
               if r.kind == "statement" and r.node_id}
    # Statements most like an instruction, then the newest, first (S8's ranking aid).
    total = len(wanted)
    rank = {id(r): -_score(r, i, total) for i, r in enumerate(wanted) if r.kind == "statement"}
    order = sorted(wanted, key=lambda r: (PRIORITY.index(r.kind), rank.get(id(r), 0.0)))

    def _attempt(add: Sequence[Required], evicted: Sequence[Required]) -> str | None:
        return _attempt_fit(plan, text, add, evicted, budget, count, norms, sources)

    out = _attempt(order, [])
    if out is None:
        # Not all fit: take them in priority order, each one only if it fits whole with
        # those before it; the rest are named in the [Recall] line.
        # The longest prefix that fits (bisected), then each later item that fits alone
        # beside it (a shorter next step may fit where a long decision did not).
        lo, hi = 0, len(order) - 1  # order[:lo] fits, order[:hi + 1] does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _attempt(order[:mid], []) is not None:
                lo = mid
            else:
                hi = mid - 1
        keep = list(order[:lo])
        evicted = []
        for r in order[lo:]:
            if len(evicted) < _GREEDY and _attempt([*keep, r], []) is not None:
                keep.append(r)
            else:
                evicted.append(r)
        while (out := _attempt(keep, evicted)) is None and keep:
            evicted.insert(0, keep.pop())  # room for the [Recall] line itself
        check.evicted = evicted
        if out is None:  # not even the [Recall] line fits: the summary as it can be
            try:
                out = _fitted(plan, text, [], [], budget, count, norms, sources=sources)
            except (SummaryBudgetTooSmall, _FloorBreached):
                out = text
    gone = {id(r) for r in check.evicted}
    check.readded = [r for r in missing if id(r) not in gone]
    check.evicted = [*check.evicted, *uncounted]
    if readd_named:  # those re-added are carried now; those evicted are in the [Recall] line
        final = _norm(out)
        check.named = [r for r in check.named if id(r) not in gone
                       and norms[r.text] not in final and _named(r, out)]
    _held(check, out, norms)
    return out, check


def _held(check: Check, out: str, norms: _Normed) -> None:
    final = _norm(out)
    check.held = [r for r in check.required if r.kind == "statement" and r.node_id
                  and norms[r.text] in final]


def _attempt_fit(plan: Plan, text: str, add: Sequence[Required], evicted: Sequence[Required],
                 budget: int, count: Count, norms: _Normed,
                 sources: dict[str, str] | None = None) -> str | None:
    """The summary holding every item of `add` whole (re-added where missing) and naming
    `evicted`, within `budget` and the other kinds' floors; None when it cannot."""
    # The [Recall] line quotes what it names when there is room, else names kinds and nodes.
    for quote in (True, False) if evicted else (True,):
        try:
            out = _fitted(plan, text, add, evicted, budget, count, norms, quote, sources)
        except (SummaryBudgetTooSmall, _FloorBreached):
            continue
        rendered = _norm(out)
        if count(out) > budget or any(norms[r.text] not in rendered for r in add):
            continue
        if evicted and str(evicted[0].node_id) not in out:
            continue
        return out
    return None


def checked_checkpoint(plan: Plan, checkpoint: Checkpoint,
                       count: Count = estimate_text) -> Checkpoint:
    """`checkpoint` with its summary checked (S6, S7) and the result in its details.

    The user's words outrank tool traffic: when a required item does not fit the summary
    budget, the ledger gives up room for it (its least critical identifiers are evicted
    first, and stay named as evicted) before the item is left to the [Recall] line.
    """
    count = remembering(count)  # both checks and the ledger's refit measure the same lines
    budget = summary_token_budget(plan)
    text, check = check_summary(plan, checkpoint.summary, checkpoint.ledger,
                                summarizer=checkpoint.summarizer, budget=budget, count=count)
    ledger = checkpoint.ledger
    # Only the user's own words take room from the ledger: an error is tool traffic, as
    # the identifiers are. The ledger keeps its floor (S9): what it needs, up to a share.
    # A whole message (S8's statement) asks for no room: it is named by its node, and its
    # rules, decisions and next steps are required on their own.
    users = [r for r in check.evicted if r.kind not in ("error", "statement")]
    if users and ledger.entries:
        held = min(ledger_tokens(ledger, count), plan.budget.ledger_budget)
        floor = min(held, int(LEDGER_FLOOR * plan.budget.summary_budget))
        need = sum(count(f"- {_item(r)}\n") for r in users) + _SLACK
        smaller = merge_ledger(plan.previous_ledger, plan.identifiers(),
                               max(floor, held - need), count)
        freed = held - ledger_tokens(smaller, count)
        if freed > 0:
            retry, again = check_summary(plan, checkpoint.summary, smaller,
                                         summarizer=checkpoint.summarizer,
                                         budget=budget + freed, count=count,
                                         required=check.required)
            if sum(r.kind not in ("error", "statement") for r in again.evicted) < len(users):
                text, check, ledger = retry, again, smaller
    details = {**checkpoint.details, "check": check.to_json()}
    if ledger is not checkpoint.ledger:
        details["ledger"] = {**details.get("ledger", {}), "tokens": ledger_tokens(ledger, count),
                             "entries": len(ledger.entries),
                             "evicted": [e.model_dump(mode="json")
                                         for e in evicted_since(plan.previous_ledger, ledger)]}
    return checkpoint.model_copy(update={"summary": text, "ledger": ledger, "details": details})


def _identifiers(plan: Plan, text: str, ledger: Ledger, check: Check) -> None:
    held = {e.value for e in ledger.entries}
    where: dict[str, str] = {}
    for node_id, entries in plan.message_identifiers.items():
        for e in entries:
            where.setdefault(e.value, node_id)
    folded = plan.identifiers()
    check.identifiers_folded = len(folded)
    for e in folded:
        if e.value in held or e.value in text:
            check.identifiers_kept += 1
        else:
            check.identifiers_evicted.append(
                {"kind": e.kind, "value": e.value, "node_id": where.get(e.value)})
