"""Is this text a usable checkpoint summary? (SPEC S2, S5)

A model can answer a summary request with an apology, a provider error page, a rate-limit
notice, a summary with sections missing or shuffled, or one far over budget. Committing such
a text would replace real history with junk, so every summary is checked before commit; the
LLM summariser retries once with the strict prompt and then falls back to the extractive one.
"""

from __future__ import annotations

import re

from ..core.planning.plan import Profile
from ..core.sizing.estimator import estimate_text
from ..core.text.text_estimate import Count
from ..errors import ContextfoldError
from .prompts import canonical_section, iter_headings, parse_sections, sections_for

# Checked only before the first heading (or in a text without headings): a real summary may
# well mention "rate limit" or "error:" inside a section.
_NOT_A_SUMMARY = re.compile(
    r"^\s*(?:I'm sorry|I am sorry|I apologi[sz]e|Sorry[,.!]|I can(?:no|')t\b|I'm unable|"
    r"I am unable|As an AI\b)"
    r"|^\s*(?:error|exception|traceback)\b\s*[:(]"
    r"|<!doctype html|<html\b|<head\b|<body\b"
    r"|\brate[ -]?limit|\btoo many requests\b|\binternal server error\b|\bbad gateway\b"
    r"|\bservice unavailable\b|\bgateway time-?out\b|\bcontext[_ ]length[_ ]exceeded\b"
    r"|\bmaximum context length\b|\boverloaded_error\b|\"error\"\s*:",
    re.IGNORECASE | re.MULTILINE,
)


class SummaryInvalid(ContextfoldError, ValueError):
    """A summary failed validation; `problems` lists every reason."""

    # A summariser's answer is checked before anything is committed; one that reaches a face
    # is a summariser's fault, not the request's.
    kind = "internal"
    code = "summary_invalid"

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid summary: " + "; ".join(self.problems))


def validate_summary(
    text: str,
    profile: Profile,
    max_tokens: int,
    count: Count = estimate_text,
) -> list[str]:
    """Every problem with `text` as a checkpoint summary; an empty list means valid.

    Checks: not empty; not an error text or refusal; every section of the profile present
    exactly once, in order; not every section empty; within `max_tokens`.
    """
    if not text or not text.strip():
        return ["the summary is empty"]
    problems: list[str] = []
    headings = iter_headings(text)
    lines = text.splitlines()
    preamble = "\n".join(lines[: headings[0][0]]) if headings else text
    m = _NOT_A_SUMMARY.search(preamble)
    if m:
        problems.append(f"looks like an error or refusal, not a summary: {m.group(0).strip()!r}")
    expected = sections_for(profile)
    found = [name for _, h in headings if (name := canonical_section(h, profile)) is not None]
    missing = [name for name in expected if name not in found]
    if missing:
        problems.append("missing sections: " + ", ".join(f"'## {n}'" for n in missing))
    duplicated = sorted({n for n in found if found.count(n) > 1}, key=expected.index)
    if duplicated:
        problems.append("sections appear more than once: " + ", ".join(duplicated))
    present = [n for n in dict.fromkeys(found)]
    if present != [n for n in expected if n in present]:
        problems.append(
            "sections out of order: got " + " → ".join(present)
            + "; expected " + " → ".join(expected)
        )
    if found and not missing:
        bodies = parse_sections(text, profile)
        if all(_is_blank(bodies.get(name, "")) for name in expected):
            problems.append("every section is empty")
    tokens = count(text)
    if tokens > max_tokens:
        problems.append(f"the summary is {tokens} tokens, over its budget of {max_tokens}")
    return problems


def _is_blank(body: str) -> bool:
    stripped = re.sub(r"^\s*(?:###.*|[-*]\s*(?:\[[ x]\]\s*)?(?:\(none\))?)\s*$", "", body,
                      flags=re.MULTILINE | re.IGNORECASE)
    return not stripped.strip()


def ensure_valid(text: str, profile: Profile, max_tokens: int, count: Count = estimate_text) -> str:
    """Return `text` if it is a valid summary, else raise `SummaryInvalid` with every problem."""
    problems = validate_summary(text, profile, max_tokens, count)
    if problems:
        raise SummaryInvalid(problems)
    return text
