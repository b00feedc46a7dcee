"""Natural user rules: what a person tells an agent in their own words (issue 37).

The rules are the hand-written set of `contextfold.data.user_words` (written by someone else
before the code, in the ways people write to agents: terse, lowercase, with reasons, as
questions; English, Japanese and Chinese), of five kinds: what the agent may do (`action`),
what to keep or disclose (`information`), how to work (`process`), taste (`preference`) and
the shape of replies (`output`). `contextfold eval` plants only the ones the cue-word
detector (`core.text.constraints.is_constraint`) does not recognise, so what it measures is
whether a rule survives *without* a pattern knowing it (SPEC S8). Each rule's `probe` is a
verbatim substring of it: what must be in the request for the rule to count as kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ..core.text.constraints import is_constraint, sentences

RULE_KINDS = ("action", "information", "process", "preference", "output")


@dataclass(frozen=True)
class NaturalRule:
    """One hand-written rule: its id, kind, language, whole text and probe substring."""

    id: str
    kind: str
    lang: str
    text: str
    probe: str


def cue_word_rule(text: str) -> bool:
    """Whether the old cue-word detector recognises any sentence of `text` as a rule."""
    return any(is_constraint(s) for s in (sentences(text) or [text]))


@cache
def natural_rules() -> tuple[NaturalRule, ...]:
    """The packaged rules no cue word gives away, in file order. Raises ValueError naming
    the rule when the data is malformed (a probe that is not part of its text, a kind
    outside `RULE_KINDS`)."""
    raw = json.loads(resources.files("contextfold.data.user_words")
                     .joinpath("natural_rules.json").read_text(encoding="utf-8"))
    rules = []
    for entry in raw:
        rule = NaturalRule(**{k: str(entry[k]) for k in ("id", "kind", "lang", "text", "probe")})
        if rule.kind not in RULE_KINDS or rule.probe not in rule.text:
            raise ValueError(f"natural rule {rule.id}: kind {rule.kind!r} must be one of "
                             f"{RULE_KINDS} and its probe a substring of its text")
        if not cue_word_rule(rule.text):
            rules.append(rule)
    return tuple(rules)
