"""The session `contextfold eval` plants its probes in: a Zotero research session where every
turn has a topic of its own and two facts about it, one in the user's prose and one in a
tool's result.

Turn t's topic is a unique pair of words ("amber lantern"); the user's message names it and
its Zotero item, runs on in prose that never repeats (English, Japanese, code), and states
one fact of category `CATEGORIES[t % 6]` in the middle; a tool of the turn returns one fact
of category `CATEGORIES[(t + 3) % 6]`, next to a full-text result of a few hundred tokens.
So every six turns plant each category once from each source. Each fact carries the
question a later user message would ask about it: it names the topic, never the fact (a
fact counts as continued only when the request holds it, not because the question quoted
it).

With `rules_at` (three turns: the first user message, a middle one — halfway through what
the first compaction folds — and the latest one when the first compaction runs; the runner
finds them for the model's window), the
natural rules (`evaluate.rules`: hand-written, phrased without cue words) are dealt over
those three turns, every kind to each, and written one paragraph each right after the
turn's planted sentence (a third of the way in: neither head nor tail of the message).
Every fact of those turns says where it was stated (`Fact.stated`). Deterministic for a
seed and `rules_at`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from itertools import islice

from .facts import CATEGORIES, STATED, Fact, ScriptedTurn, Session, ToolRound
from .material import Prose, fulltext, prose_sentence, zotero_items, zotero_key
from .rules import RULE_KINDS, NaturalRule, natural_rules

_FIRST = ("amber", "copper", "velvet", "granite", "ivory", "cobalt", "saffron", "obsidian",
          "crimson", "silver", "hazel", "marble")
_SECOND = ("lantern", "ledger", "compass", "telegram", "monograph", "carriage", "sextant",
           "almanac", "cipher", "atlas", "locket", "pendulum")
MAX_TURNS = len(_FIRST) * len(_SECOND)  # topics are unique up to here
SYSTEM = "You are a research assistant working in the user's Zotero library."


def topic(t: int) -> str:
    """Turn `t`'s topic: two words no other turn below `MAX_TURNS` shares as a pair."""
    return f"{_FIRST[t % len(_FIRST)]} {_SECOND[(t // len(_FIRST) + t) % len(_SECOND)]}"


def _user_fact(category: str, t: int, name: str, keys: tuple[str, str],
               rng: random.Random) -> Fact:
    """The fact the user states in turn `t`'s prose, and how a later question asks it."""
    the = f"the {name}"
    if category == "recall":
        text = f"{rng.randint(11, 97)}.{rng.randint(10, 99)} per cent"
        return Fact(category, text, t, question=f"What figure did I give for {the}?")
    if category == "artifact":
        slug = name.replace(" ", "_")
        return Fact(category, f"notes/eval/{slug}_{t:02d}.md", t, identifier=True,
                    question=f"Where did I ask you to save the notes on {the}?")
    if category == "continuation":
        return Fact(category, f"Next step: compare {keys[0]} against {keys[1]} on how each "
                    f"dates {the}.", t, question=f"What was the next step for {the}?")
    if category == "decision":
        return Fact(category, f"We decided to read {the} in the serial version because the "
                    "book edition was revised by the printer.", t,
                    question=f"What did we decide about {the}, and why?")
    if category == "constraint":
        return Fact(category, f"Never quote {the} from a secondary source.", t,
                    question=f"Which rule did I set for {the}?")
    return Fact(category, f"{name}の要旨は必ず日本語でまとめてください。", t,
                question=f"What did I ask for in Japanese about {the}?")


def _tool_fact(category: str, t: int, name: str, key: str, rng: random.Random
               ) -> tuple[Fact, ToolRound]:
    """The fact a tool of turn `t` returns, with the round that returns it."""
    the = f"the {name}"
    if category == "recall":
        text = f"Error: attachment {key}.pdf ({name}) not found in storage (HTTP 404, " \
               f"code ZS{t:03d})"
        return (Fact(category, text, t, source="tool",
                     question=f"What error did the attachment of {the} give?"),
                ToolRound("zotero_attachment", {"item_key": key}, text, is_error=True,
                          text="Let me open the PDF as well."))
    if category == "artifact":
        doi = f"10.{rng.randint(1000, 9999)}/{name.split()[0]}.{t}.{rng.randint(100, 999)}"
        return (Fact(category, doi, t, identifier=True, source="tool",
                     question=f"What is the DOI of {the}?"),
                ToolRound("zotero_record", {"item_key": key},
                          f"Zotero record {key} ({name}): DOI {doi}, journal article."))
    if category == "continuation":
        text = f"Next step for {the}: check the footnotes of {key} against the index."
        return (Fact(category, text, t, source="tool",
                     question=f"Which task is open for {the}?"),
                ToolRound("todo_list", {}, f"Open tasks:\n- {text}"))
    if category == "decision":
        text = f"Decision ({name}): we chose the 1892 text because the 1901 reprint drops " \
               "the preface."
        return (Fact(category, text, t, source="tool",
                     question=f"Which text did the decision log choose for {the}?"),
                ToolRound("read_file", {"path": "notes/decisions.md"},
                          f"# Decision log\n\n{text}\n"))
    if category == "constraint":
        text = f"Rule for {the}: never rename its files, the index links to them."
        return (Fact(category, text, t, source="tool",
                     question=f"What does the project's rule say about {the}?"),
                ToolRound("read_file", {"path": "CONTRIBUTING.md"},
                          f"# Contributing\n\n{text}\n"))
    text = f"要旨（{name}）：連載版と単行本では結末の日付が異なる。"
    return (Fact(category, text, t, source="tool",
                 question=f"What does the Japanese abstract say about {the}?"),
            ToolRound("zotero_abstract", {"item_key": key}, text))


def deal_rules(seed: int, rules_at: tuple[int, int, int]
               ) -> dict[int, tuple[str, list[NaturalRule]]]:
    """turn → (where it stands, the natural rules stated in it): each kind's rules, in a
    seeded order, dealt round-robin over the first, middle and latest turn, so every
    position gets every kind. Raises ValueError unless the turns are increasing and within
    the session."""
    if len(rules_at) != len(STATED) or list(rules_at) != sorted(set(rules_at)) \
            or rules_at[0] < 0 or rules_at[-1] >= MAX_TURNS:
        raise ValueError(f"rules_at is three increasing turns below {MAX_TURNS}, "
                         f"not {rules_at!r}")
    rng = random.Random(f"{seed}-rules")  # its own stream: the session's prose is unchanged
    dealt: list[list[NaturalRule]] = [[] for _ in STATED]
    n = 0
    for kind in RULE_KINDS:
        of_kind = [r for r in natural_rules() if r.kind == kind]
        rng.shuffle(of_kind)
        for rule in of_kind:
            dealt[n % len(STATED)].append(rule)
            n += 1
    return {t: (where, dealt[i]) for i, (where, t) in enumerate(zip(STATED, rules_at,
                                                                      strict=True))}


def _rule_fact(rule: NaturalRule, t: int, name: str, where: str) -> Fact:
    """A natural rule as a probed fact: its probe must be in the request; the question
    names the turn's topic, never the rule."""
    return Fact(rule.kind, rule.probe, t, source="user", stated=where,
                question=f"Which ways of working did I ask of you when we discussed "
                         f"the {name}?")


def planted_turns(seed: int = 27, user_tokens: tuple[int, int] = (150, 400),
                  tool_tokens: tuple[int, int] = (400, 1_200),
                  rules_at: tuple[int, int, int] | None = None) -> Iterator[ScriptedTurn]:
    """The planted session's turns, one at a time, `MAX_TURNS` in all (see the module
    doc): user prose of `user_tokens` and a full text of `tool_tokens` (estimated) per
    turn, the natural rules in the turns `rules_at` when given. Every prefix is the same
    whatever is read after it, and the same with or without rules but for their
    paragraphs and facts."""
    dealt = deal_rules(seed, rules_at) if rules_at is not None else {}
    rng = random.Random(seed)
    key_rng = random.Random(f"{seed}-keys")  # its own stream: turn t never depends on later
    prose = Prose(rng)
    items = zotero_items()
    keys: list[str] = []

    def key(i: int) -> str:
        while len(keys) <= i:
            n = len(keys)
            keys.append(items[n]["key"] if n < len(items) else zotero_key(key_rng))
        return keys[i]

    for t in range(MAX_TURNS):
        name = topic(t)
        said = _user_fact(CATEGORIES[t % 6], t, name, (key(t), key(t + 1)), rng)
        sentence = {"recall": f"For the {name} the pilot agreement was {said.text}.",
                    "artifact": f"Save your notes on the {name} to {said.text}."
                    }.get(said.category, said.text)
        body = prose.paragraph(rng.randint(*user_tokens), [sentence])
        user = f"Zotero item {key(t)} today, on the {name}. {body}"
        returned, round_ = _tool_fact(CATEGORIES[(t + 3) % 6], t, name, key(t), rng)
        rounds = [ToolRound("zotero_fulltext", {"item_key": key(t)},
                            fulltext(rng, key(t), name, rng.randint(*tool_tokens))), round_]
        reply = f"Read {key(t)} on the {name}: {prose_sentence(rng, 10_000 + t)}"
        facts = [said, returned]
        if t in dealt:
            where, rules = dealt[t]
            # Each rule a paragraph of its own, as people list what they want.
            block = "\n\n".join(r.text for r in rules)
            user = user.replace(sentence, f"{sentence}\n\n{block}\n\n", 1)
            facts = [replace(f, stated=where) for f in facts]
            facts += [_rule_fact(r, t, name, where) for r in rules]
        yield ScriptedTurn(user=user, rounds=rounds, reply=reply, facts=facts)


def planted_session(turns: int, seed: int = 27,
                    rules_at: tuple[int, int, int] | None = None) -> Session:
    """The first `turns` planted turns (1 to `MAX_TURNS`) as a session (with the natural
    rules in the turns `rules_at`, when given)."""
    if not 1 <= turns <= MAX_TURNS:
        raise ValueError(f"a planted session has 1 to {MAX_TURNS} turns, not {turns}")
    return Session(name=f"planted-{turns}",
                   turns=list(islice(planted_turns(seed, rules_at=rules_at), turns)),
                   system=SYSTEM)
