"""A planted-fact continuity probe shared by every system (stdlib only; both venvs).

What does an agent still have in front of it after K compactions? A synthetic research
session gets one fact planted every few turns, each a unique token `FACT-<category>-<n>`:

* **recall** and **constraint**: in user messages ("Remember: ...", "Constraint: never ...");
* **decision** and **continuation**: in the assistant's closing answer of a turn;
* **identifiers**: at the start of a tool result; **artifact**: at its end (a file written,
  after a long output), where a summariser shown only a prefix does not see it.

The shared fake summariser (`common.echo_summary`) is an ideal extractor: it repeats every
fact token it is shown. So a fact survives K compactions only if the system showed it to its
summariser (or kept it raw) and carried its summary forward each time: the probe measures
each system's information flow, not a model's writing. That favours systems that show the
summariser everything and re-summarise their own summary (no model ever drops a fact), and
it handicaps none on what they would show a real model.

Bench-owned (issue 14) because `bench/continuity.py` of the continuity work was not on main
when this was written; it uses the same categories.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .common import Neutral, call_points, mark
from .synth import research_session

CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "identifiers")
MILESTONES = (1, 5, 10, 20)
FACT_RE = re.compile(r"FACT-([a-z]+)-(\d+)")
_BODY_RE = re.compile(r"^(\[\[m\d+\]\] )(.*?)( \[\[/m\d+\]\])$", re.S)


def _insert(m: Neutral, fact: str, *, at_end: bool) -> None:
    head, body, tail = _BODY_RE.match(m["text"]).groups()  # type: ignore[union-attr]
    body = f"{body}\n{fact}" if at_end else f"{fact}\n{body}"
    m["text"] = f"{head}{body}{tail}"


def planted_session(n_messages: int, every_turns: int = 3, seed: int = 11) -> list[Neutral]:
    """The synthetic research session with one fact per category every `every_turns` turns."""
    msgs = research_session(n_messages, seed=seed)
    turn = -1
    serial = 0
    for k, m in enumerate(msgs):
        if m["role"] == "user":
            turn += 1
        if turn % every_turns:
            continue
        serial += 1
        if m["role"] == "user":
            _insert(m, f"Remember: the project codename is FACT-recall-{serial}. "
                       f"Constraint: never modify FACT-constraint-{serial}.", at_end=True)
        elif m["role"] == "tool" and msgs[k - 1]["role"] != "tool":
            _insert(m, f"key FACT-identifiers-{serial}", at_end=False)
            _insert(m, f"wrote /tmp/FACT-artifact-{serial}.txt", at_end=True)
        elif m["role"] == "assistant" and not m["calls"]:
            _insert(m, f"Decision: we cite FACT-decision-{serial}. "
                       f"Next step: FACT-continuation-{serial}.", at_end=True)
    assert all(m["text"].startswith(mark(m["i"], "")[:6]) for m in msgs)
    return msgs


def facts_in(text: str) -> set[str]:
    return {f"{cat}-{n}" for cat, n in FACT_RE.findall(text)}


class Probe:
    """Follows one system through the planted session; snapshots at each milestone."""

    def __init__(self, msgs: Sequence[Neutral]) -> None:
        self.planted_by = []  # facts planted in msgs[:k], per position k
        seen: set[str] = set()
        for m in msgs:
            self.planted_by.append(set(seen))
            seen |= facts_in(m["text"])
        self.compactions = 0
        self.present_before: set[int] = set()
        self.snapshots: dict[str, dict[str, Any]] = {}
        self._cache: dict[str, tuple[set[str], set[int]]] = {}

    def _scan(self, text: str) -> tuple[set[str], set[int]]:
        hit = self._cache.get(text)
        if hit is None:
            from .common import markers

            heads, tails = markers(text)
            hit = self._cache[text] = (facts_in(text), heads | tails)
        return hit

    def observe(self, k: int, request: list[dict[str, Any]], last: bool = False) -> None:
        """The request made at call point `k` (the message index of the reply)."""
        facts: set[str] = set()
        present: set[int] = set()
        for m in request:
            content = m.get("content")
            if isinstance(content, str):
                f, p = self._scan(content)
                facts |= f
                present |= p
        if self.present_before - present:
            self.compactions += 1
            label = str(self.compactions)
            if self.compactions in MILESTONES:
                self.snapshots[label] = self._shares(k, facts)
        self.present_before = present
        if last:
            self.snapshots["end"] = self._shares(k, facts)

    def _shares(self, k: int, facts: set[str]) -> dict[str, Any]:
        planted = self.planted_by[k]
        out: dict[str, Any] = {"at_message": k, "planted": len(planted)}
        for cat in CATEGORIES:
            mine = {f for f in planted if f.startswith(cat + "-")}
            out[cat] = len(mine & facts) / len(mine) if mine else None
        return out


def run_continuity(system: Any, msgs: Sequence[Neutral], sample_every: int = 1) -> dict:
    """Drive `system` through `msgs` (deciding at every `sample_every`-th call point) and
    return the per-category shares at 1, 5, 10 and 20 compactions and at the end."""
    probe = Probe(msgs)
    points = call_points(msgs)
    fed = 0
    for n, k in enumerate(points):
        last = n == len(points) - 1
        if n % sample_every and not last:
            continue
        system.ingest(msgs[fed:k])
        fed = k
        probe.observe(k, system.to_openai(system.decide()), last=last)
    return {"compactions": probe.compactions, "messages": len(msgs),
            "calls": len(points), "sample_every": sample_every,
            "milestones": probe.snapshots}
