"""The offline summariser: a checkpoint summary built from the structure of the history.

No model is called, so it is the default when none is configured and the fallback when the
LLM summariser fails. It is deterministic and fills every section of the profile (S2) from
what the history shows: the user's requests and stated constraints, the tool calls done,
failed and pending with their key arguments, the assistant's conclusions and last stated
plan, errors, Zotero resources and files touched. Every bullet says where it came from
(S3): `(user)`, `(tool)` or `(inferred)` (the assistant's words are inferences).

An update (S4) merges the previous summary's sections with the new content, deduplicates,
and trims the oldest items of the largest sections first until the text fits the summary
budget minus what the identifier ledger takes. Trimming is stated in the text, never silent.

The parts: `extractive_facts` (what the history shows), `extractive_sections` (merging with
the previous summary) and `extractive_fit` (fitting the budget).
"""

from __future__ import annotations

from ..core.planning.ledger import ledger_tokens, plan_ledger
from ..core.planning.plan import Plan, Profile
from ..core.planning.split_turn import turn_context_tokens
from ..core.sizing.estimator import estimate_text
from ..core.text.text_estimate import remembering
from .extractive_facts import collect_facts, task_chars
from .extractive_fit import Count, SummaryBudgetTooSmall, fit_sections, render_sections
from .extractive_sections import OMITTED_NOTE, build_sections, empty_sections, load_summary

# The public API of the offline summariser; its parts live in the extractive_* modules.
__all__ = [
    "OMITTED_NOTE",
    "Count",
    "SummaryBudgetTooSmall",
    "fit_summary",
    "smallest_summary_tokens",
    "summarize_extractive",
    "summary_token_budget",
]


def ledger_share(plan: Plan) -> int:
    """Tokens the plan's identifier ledger takes in the checkpoint: what it needs.

    The planner fits the ledger to its cap by the model's own count; the summary is
    measured by the default (more conservative) count, so the two together stay within
    the summary budget by either.
    """
    return min(ledger_tokens(plan_ledger(plan)), plan.budget.ledger_budget)


def summary_token_budget(plan: Plan) -> int:
    """Tokens the summary text may take: the summary budget minus what the ledger takes
    and the split turn's context (SPEC K6), which the checkpoint carries beside it.

    The ledger goes first (up to its cap, `Budget.ledger_budget`); the prose gets the rest.
    """
    return (plan.budget.summary_budget - ledger_share(plan)
            - turn_context_tokens(plan.turn_context))


def _smallest_summaries(guaranteed: bool) -> list[str]:
    texts = []
    for profile in ("research", "coding"):
        ordered, sections = empty_sections(profile)
        if guaranteed:
            for section in sections.values():
                section.omitted = 9999
        texts.append(render_sections(ordered))
    return texts


def smallest_summary_tokens(count: Count = estimate_text, *, guaranteed: bool = True) -> int:
    """Tokens of the shortest summary the offline summariser may have to write.

    `guaranteed`: every heading of the larger profile with an "N items omitted" note, what
    fitting falls back to when everything was trimmed: a budget this large always holds a
    checkpoint, whatever the history. Otherwise every heading with an empty list: a budget
    below that can never hold one.
    """
    return max(count(text) for text in _smallest_summaries(guaranteed))


def summarize_extractive(plan: Plan, count: Count = estimate_text) -> str:
    """A checkpoint summary of `plan` without a model: deterministic, valid, within budget.

    Fills every section of `plan.profile` from the newly old nodes, merged with the
    previous summary in update mode (S4), honouring `plan.instructions` where an
    extractive summariser can (M6): they are recorded in Critical Context, and the
    identifiers they name ("keep all DOIs") are listed there in full.
    """
    budget = summary_token_budget(plan)
    if budget <= 0:
        raise SummaryBudgetTooSmall(
            f"no room for a summary: summary budget {plan.budget.summary_budget} minus "
            f"identifier ledger {ledger_share(plan)}"
            + (f" and the split turn's context ({turn_context_tokens(plan.turn_context)})"
               if plan.turn_context is not None else "")
            + f" is {budget} tokens"
        )
    facts = collect_facts(plan.newly_old, plan.profile, plan.identifiers(),
                          task_chars(budget))
    ordered = build_sections(plan, facts)
    return fit_sections(ordered, budget, remembering(count))


def fit_summary(text: str, profile: Profile, budget: int, count: Count = estimate_text) -> str:
    """A summary in the profile's sections (a model's answer) fitted to `budget` tokens by
    the offline summariser's rules: lowest-priority lists trimmed first, long items
    shortened, every trimmed item counted as in the history."""
    ordered, sections = empty_sections(profile)
    load_summary(sections, text, profile)
    return fit_sections(ordered, budget, remembering(count))
