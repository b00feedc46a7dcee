"""What the user marked as a rule: sentences of a message that state a constraint.

One detector serves two readers: the offline summary lists these sentences under its
Constraints section, and the identifier ledger keeps the identifiers named in them
("never overwrite refs/library.bib") longer than any other (evicted last). Pure text
functions, deterministic, English and Japanese.
"""

from __future__ import annotations

import re

# Western sentences end with punctuation and a space; CJK ones with 。！？ and no space.
# "e.g." and "i.e." end no sentence: "Keep a list of DOIs, e.g. 10.1000/x" is one.
_SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bcf\.)(?<!\bvs\.)(?<!\bal\.)(?<!\betc\.)"
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bNo\.)(?<!\bpp\.)(?<!\bp\.)\s+"
    r"|(?<=[。！？])|\n+"
)
_CODE_BLOCK = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+")
# A constraint: a modal anywhere ("themes must never explode"), or an imperative near the
# start of the sentence ("ok, use rgb values", "no console logs") not said of oneself
# ("i don't think ..." is an opinion, not a rule).
_CONSTRAINT_ANYWHERE = re.compile(
    r"\b(?:must|mustn't|never|always|make sure|ensure|should|shouldn't|not allowed|no more)\b"
    r"|ください|しないで|しないこと|してはいけない|禁止|必ず|だけ|のみ|べき|守って|使って|使わない",
    re.IGNORECASE,
)
_IMPERATIVE = re.compile(
    r"^(?:\W*\w+\W+){0,2}?(?<!\bi )(?<!\bwe )(?<!\bit )(?<!\bthat )(?<!\byou )"
    r"(?:don't|dont|do not|only|keep|use|avoid|stop|prefer|no)\b",
    re.IGNORECASE,
)
# "Next, do X" is a step of the plan, not a standing rule.
STEP_START = re.compile(r"^(?:(?:next|then|after that|afterwards)\b|次に|その後)", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """The sentences of `text` (code blocks left out, list markers and emphasis stripped)."""
    out = []
    for raw in _SENTENCE_END.split(_CODE_BLOCK.sub("\n", text)):
        s = _NUMBERED.sub("", raw.strip().lstrip("#").strip()).strip("*_ ")
        if len(s) > 2 and not s.startswith("```"):
            out.append(s)
    return out


def is_constraint(sentence: str) -> bool:
    """Whether a sentence the user wrote states a standing rule.

    A question or a plan step ("next, do X") is a request, not a rule.
    """
    if sentence.endswith(("?", "？")) or STEP_START.match(sentence):
        return False
    return bool(_CONSTRAINT_ANYWHERE.search(sentence) or _IMPERATIVE.search(sentence))


def constraint_sentences(text: str) -> list[str]:
    """The sentences of `text` that state a constraint, in order."""
    return [s for s in sentences(text) if is_constraint(s)]
