"""A planted-fact continuity probe shared by every system (stdlib only; both venvs).

What does an agent still have in front of it after K compactions, and does it get an early
fact back when the user asks about it? A synthetic research session gets facts planted every
few turns, each a unique token `FACT-<category>-<n>` in a sentence with a *hook*: two rare
words no other message of the session has ("amber lantern"), one pair per planted message:

* **recall** and **constraint**: in user messages ("Remember: the codename of the amber
  lantern study is ...", "Constraint: for the ... files, never modify ...");
* **decision** and **continuation**: in the assistant's closing answer of a turn;
* **identifiers**: at the start of a tool result; **artifact**: at its end (a file written,
  after a long output), where a summariser shown only a prefix does not see it.

Later in the session, before every `PROBE_EVERY_TURNS`-th user turn, a *probe turn* asks
about one earlier fact (a user question naming the fact's hook, never its token, and a short
neutral answer that names neither, so no probe plants anything again); the facts asked are
planted at least `MIN_AGE` messages before, alternately the oldest not yet asked (folded
many times) and one drawn at random (seeded), the categories in turn. After the last message
a battery asks `END_PER_CATEGORY` more per category. Every fact is asked at most once.

Two measures, both on the request itself (so a system's retrieval counts as much as its
summary):

* **held without asking** (`milestones`): the share of the facts planted so far that are in
  the request right after the 1st, 5th, 10th and 20th compaction and at the last call before
  the battery, per category (never taken at a probe's call, which a retrieval step serves);
* **probes** (`probes`): for each probe, is its fact token in the request the question goes
  out with (the call point right after it)? Counted per category, over the probes asked after
  at least 1, 5, 10 and 20 compactions and over the end battery.

The shared fake summariser (`common.echo_summary`) is an ideal extractor: it repeats every
fact token it is shown, until its answer reaches the system's own summary cap. So a fact
survives K compactions only if the system showed it to its summariser (or kept it raw) and
carried its summary forward each time, or finds it again when asked: the probe measures each
system's information flow, not a model's writing. Deterministic for a seed.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Sequence
from typing import Any

from .common import Neutral, call_points, mark, markers, neutral
from .synth import research_session

CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "identifiers")
MILESTONES = (1, 5, 10, 20)
BUCKETS = (*(str(k) for k in MILESTONES), "end")  # probe buckets: >= K compactions, battery
PROBE_EVERY_TURNS = 4
MIN_AGE = 300  # messages between a fact and the probe that asks about it
END_PER_CATEGORY = 4
PROBE_ANSWER = "Let me check what we have on that before we go on."
FACT_RE = re.compile(r"FACT-([a-z]+)-(\d+)")
_BODY_RE = re.compile(r"^\[\[m\d+\]\] ?(.*?) ?\[\[/m\d+\]\]$", re.S)

# Hook words: none occurs in the research session's own text (a test checks it), and the
# pairing below gives each planted message a pair no other has (unique below 40 x 40).
_FIRST = (
    "amber", "copper", "velvet", "granite", "ivory", "cobalt", "saffron", "obsidian",
    "crimson", "silver", "hazel", "marble", "indigo", "scarlet", "jade", "opal", "pewter",
    "bronze", "ochre", "teal", "violet", "walnut", "cedar", "maple", "birch", "ebony",
    "coral", "pearl", "topaz", "ruby", "garnet", "quartz", "slate", "umber", "russet",
    "lilac", "mauve", "tawny", "sable", "azure",
)
_SECOND = (
    "lantern", "ledger", "compass", "telegram", "monograph", "carriage", "sextant",
    "almanac", "cipher", "atlas", "locket", "pendulum", "lighthouse", "harbour",
    "orchard", "bellows", "anvil", "hourglass", "kettle", "lattice", "quill", "satchel",
    "spindle", "thimble", "trellis", "turret", "weathervane", "windmill", "abacus",
    "barometer", "canteen", "chisel", "easel", "furnace", "gazebo", "hammock", "inkwell",
    "jigsaw", "kiln", "loom",
)
MAX_HOOKS = len(_FIRST) * len(_SECOND)

# Per category: the planted sentence, and the question that names its hook, not its token.
# A question's words are the sentence's but one ("what", "where"): a text search for it
# ranks the planted sentence above every other question of its category (they share the
# template, not the hook).
_PLANTED = {
    "recall": "Remember: the codename of the {hook} study is {fact}.",
    "constraint": "Constraint: for the {hook} files, never modify {fact}.",
    "identifiers": "key {fact} is the {hook} record",
    "artifact": "wrote the {hook} notes to /tmp/{fact}.txt",
    "decision": "Decision: for the {hook} chapter we cite {fact}.",
    "continuation": "Next step on the {hook}: {fact}.",
}
_QUESTION = {
    "recall": "What is the codename of the {hook} study?",
    "constraint": "What do I never modify for the {hook} files?",
    "identifiers": "What is the key of the {hook} record?",
    "artifact": "Where are the {hook} notes?",
    "decision": "What do we cite for the {hook} chapter?",
    "continuation": "What is the next step on the {hook}?",
}


def hook(n: int) -> str:
    """The `n`-th hook: two words no other hook below `MAX_HOOKS` has as a pair."""
    if not 0 <= n < MAX_HOOKS:
        raise ValueError(f"only {MAX_HOOKS} hooks, not {n + 1}")
    return f"{_FIRST[n % len(_FIRST)]} {_SECOND[(n // len(_FIRST) + n) % len(_SECOND)]}"


def _body(m: Neutral) -> str:
    return _BODY_RE.match(m["text"]).group(1)  # type: ignore[union-attr]


def _insert(m: Neutral, line: str, *, at_end: bool) -> None:
    body = _body(m)
    m["text"] = mark(m["i"], f"{body}\n{line}" if at_end else f"{line}\n{body}")


def facts_in(text: str) -> set[str]:
    """The planted facts (`category-n`) whose token `text` holds."""
    return {f"{cat}-{n}" for cat, n in FACT_RE.findall(text)}


def _plant(msgs: list[Neutral], every_turns: int) -> list[dict[str, Any]]:
    """Plant the facts in place; return them in order (fact, category, hook, message).
    The two facts of one message share its hook (two hooks in one message would make
    other hooks of their words: "amber lantern" and "copper ledger" hold "amber ledger")."""
    planted: list[dict[str, Any]] = []
    hooks = 0

    def lines(k: int, serial: int, *categories: str) -> list[str]:
        nonlocal hooks
        h = hook(hooks)
        hooks += 1
        out = []
        for category in categories:
            planted.append({"fact": f"{category}-{serial}", "category": category, "hook": h,
                            "at": k})
            out.append(_PLANTED[category].format(hook=h, fact=f"FACT-{category}-{serial}"))
        return out

    turn = -1
    serial = 0
    for k, m in enumerate(msgs):
        if m["role"] == "user":
            turn += 1
        if turn % every_turns:
            continue
        if m["role"] == "user":
            serial += 1
            _insert(m, " ".join(lines(k, serial, "recall", "constraint")), at_end=True)
        elif m["role"] == "tool" and msgs[k - 1]["role"] != "tool":
            serial += 1
            first, last = lines(k, serial, "identifiers", "artifact")
            _insert(m, first, at_end=False)
            _insert(m, last, at_end=True)
        elif m["role"] == "assistant" and not m["calls"]:
            serial += 1
            _insert(m, " ".join(lines(k, serial, "decision", "continuation")), at_end=True)
    return planted


def _choose(planted: list[dict[str, Any]], asked: set[str], category: str, before: int,
            oldest: bool, rng: random.Random) -> dict[str, Any] | None:
    """A fact of `category` planted at least `MIN_AGE` messages before `before`, not yet
    asked: the oldest, or one at random."""
    eligible = [f for f in planted if f["category"] == category and f["fact"] not in asked
                and f["at"] <= before - MIN_AGE]
    if not eligible:
        return None
    return eligible[0] if oldest else rng.choice(eligible)


def _probe_turn(fact: dict[str, Any], *, end: bool) -> list[Neutral]:
    question = neutral(0, "user", _QUESTION[fact["category"]].format(hook=fact["hook"]))
    question["probe"] = {"fact": fact["fact"], "category": fact["category"],
                         "hook": fact["hook"], "end": end}
    return [question, neutral(0, "assistant", PROBE_ANSWER)]


def planted_session(n_messages: int, every_turns: int = 3, seed: int = 11) -> list[Neutral]:
    """The synthetic research session of `n_messages` with facts planted every
    `every_turns` turns, then the probe turns inserted (see the module doc), renumbered:
    `n_messages` plus two per probe. A question's message carries `probe` (its fact)."""
    base = research_session(n_messages, seed=seed)
    planted = _plant(base, every_turns)
    rng = random.Random(f"probes-{seed}")
    asked: set[str] = set()
    out: list[Neutral] = []
    turn = -1
    probes = 0
    for k, m in enumerate(base):
        if m["role"] == "user":
            turn += 1
            if turn and turn % PROBE_EVERY_TURNS == 0:
                for shift in range(len(CATEGORIES)):  # the category in turn, else the next
                    category = CATEGORIES[(probes + shift) % len(CATEGORIES)]
                    fact = _choose(planted, asked, category, k, probes % 2 == 0, rng)
                    if fact is not None:
                        asked.add(fact["fact"])
                        out += _probe_turn(fact, end=False)
                        probes += 1
                        break
        out.append(m)
    for n in range(END_PER_CATEGORY):
        for category in CATEGORIES:
            fact = _choose(planted, asked, category, len(base), n % 2 == 0, rng)
            if fact is not None:
                asked.add(fact["fact"])
                out += _probe_turn(fact, end=True)
    for i, m in enumerate(out):
        m["text"] = mark(i, _body(m))
        m["i"] = i
    return out


def probe_points(msgs: Sequence[Neutral]) -> dict[int, dict[str, Any]]:
    """Call point (message index of the reply) -> the probe its request answers."""
    return {k + 1: m["probe"] for k, m in enumerate(msgs)
            if m.get("probe") and k + 1 < len(msgs) and msgs[k + 1]["role"] == "assistant"}


class Probe:
    """Follows one system through the planted session: the milestone snapshots (held
    without asking) and each probe's outcome (in the request that asks about it)."""

    def __init__(self, msgs: Sequence[Neutral]) -> None:
        self.planted_by = []  # facts planted in msgs[:k], per position k
        seen: set[str] = set()
        for m in msgs:
            self.planted_by.append(set(seen))
            seen |= facts_in(m["text"])
        self.planted_in = {f: k for k, m in enumerate(msgs) for f in facts_in(m["text"])}
        self.probes = probe_points(msgs)
        self.compactions = 0
        self.evicted: set[int] = set()
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.outcomes: list[dict[str, Any]] = []
        self._due: list[str] = []  # milestones reached at a probe's call, taken at the next
        self._cache: dict[str, tuple[set[str], set[int], set[int]]] = {}

    def _scan(self, text: str) -> tuple[set[str], set[int], set[int]]:
        hit = self._cache.get(text)
        if hit is None:
            heads, tails = markers(text)
            hit = self._cache[text] = (facts_in(text), heads, tails)
        return hit

    def observe(self, k: int, request: list[dict[str, Any]], last: bool = False) -> None:
        """The request made at call point `k` (the message index of the reply); `last`:
        the last call before the end battery."""
        facts: set[str] = set()
        heads: set[int] = set()
        tails: set[int] = set()
        for m in request:
            content = m.get("content")
            if isinstance(content, str):
                f, h, t = self._scan(content)
                facts |= f
                heads |= h
                tails |= t
        # A compaction: a message of the history that was never out of the request is now.
        # (Counted against every message ever out, not the previous request, so an excerpt
        # a retrieval step brought back and took away again is no compaction.)
        left = set(range(k)) - (heads | tails)
        if left - self.evicted:
            self.compactions += 1
            if self.compactions in MILESTONES:
                self._due.append(str(self.compactions))
        self.evicted |= left
        probe = self.probes.get(k)
        if probe is not None:
            at = self.planted_in[probe["fact"]]
            self.outcomes.append({**probe, "compactions": self.compactions,
                                  "in_request": probe["fact"] in facts,
                                  "whole": at in heads and at in tails, "age": k - at})
            return
        for label in self._due:
            self.snapshots[label] = self._shares(k, facts)
        self._due = []
        if last:
            self.snapshots["end"] = self._shares(k, facts)

    def _shares(self, k: int, facts: set[str]) -> dict[str, Any]:
        planted = self.planted_by[k]
        out: dict[str, Any] = {"at_message": k, "planted": len(planted)}
        for cat in CATEGORIES:
            mine = {f for f in planted if f.startswith(cat + "-")}
            out[cat] = len(mine & facts) / len(mine) if mine else None
        return out

    def probe_shares(self) -> dict[str, dict[str, Any]]:
        """Per bucket (>= K compactions when asked, or the end battery): probes asked,
        found in the request, and per category [found, asked]; also how many of the found
        had their planted message whole in the request."""
        out: dict[str, dict[str, Any]] = {}
        for label in BUCKETS:
            chosen = [o for o in self.outcomes if o["end"]] if label == "end" else \
                [o for o in self.outcomes if not o["end"] and o["compactions"] >= int(label)]
            if not chosen:
                continue
            out[label] = {
                "asked": len(chosen),
                "found": sum(o["in_request"] for o in chosen),
                "whole": sum(o["in_request"] and o["whole"] for o in chosen),
                "median_age": sorted(o["age"] for o in chosen)[len(chosen) // 2],
                "categories": {cat: [sum(o["in_request"] for o in chosen
                                         if o["category"] == cat),
                                     sum(o["category"] == cat for o in chosen)]
                               for cat in CATEGORIES},
                "missed": [o["fact"] for o in chosen if not o["in_request"]][:12],
            }
        return out


def run_continuity(system: Any, msgs: Sequence[Neutral], sample_every: int = 1) -> dict:
    """Drive `system` through `msgs` (deciding at every `sample_every`-th call point, at
    every probe's and at the last before the end battery) and return the milestone shares
    and the probe shares (see the module doc), with the median time of a decision."""
    probe = Probe(msgs)
    points = call_points(msgs)
    plain = [k for k in points if k not in probe.probes]
    last_plain = plain[-1] if plain else -1
    fed = 0
    seconds: list[float] = []
    for n, k in enumerate(points):
        if n % sample_every and k not in probe.probes and k != last_plain:
            continue
        system.ingest(msgs[fed:k])
        fed = k
        started = time.perf_counter()
        request = system.decide()
        seconds.append(time.perf_counter() - started)
        probe.observe(k, system.to_openai(request), last=k == last_plain)
    seconds.sort()
    return {"compactions": probe.compactions, "messages": len(msgs),
            "calls": len(points), "sample_every": sample_every,
            "decisions": len(seconds),
            "median_decide_ms": seconds[len(seconds) // 2] * 1000 if seconds else 0.0,
            "milestones": probe.snapshots, "probes": probe.probe_shares()}
