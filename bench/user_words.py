"""The user's words on real sessions (issue 37, SPEC S8–S10): does a rule survive?

Run: `.venv/bin/python -m bench.user_words` (writes bench/results/user_words.json; part of
`make bench`). Deterministic: real sessions nobody here wrote, rules written by hand before
the code (`tests/fixtures/user_words/natural_rules.json`), the offline summariser.

One case: a real session (Pi, Claude Code) with one natural rule appended, as a paragraph of
its own, to its first, middle or last user-typed message, replayed through contextfold's
engine (`replay.ManagedSession`: the sizing driver, automatic compaction, L5 recall) on a
model window of 16k, 32k or 128k. Once the rule's message is folded, a manual compaction
follows every `CADENCE` user turns (new turns between), and the session goes on with turns
of another real session when its own run out. After the 1st, 3rd and 10th compaction that
the rule's message has been folded through, the next request is built (checkpoint, pins,
recall block, raw tail) and searched for the rule's probe; the latest checkpoint is
searched for the probe or the message's node id (named when not carried).

Goals (issue 37): 100% of rules in the next request at 32k and 128k; at 16k each in the
checkpoint or named by node id. The same harness measures the hand-labelled asks of the
real users (`real_session_asks.json`): the share of them in each session's latest
checkpoint, by kind.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from contextfold.core.recall.recall_text import message_text
from contextfold.core.sizing.resolver import ModelResolver
from contextfold.core.values.messages import Message, TextPart
from contextfold.core.view.projection import Projection, checkpoint_text
from contextfold.formats import import_file
from contextfold.replay import ManagedSession, recorded_session
from contextfold.summarize.user_words import injected, split_typed

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
RULES = FIXTURES / "user_words" / "natural_rules.json"
ASKS = FIXTURES / "user_words" / "real_session_asks.json"
RESULTS = Path(__file__).parent / "results" / "user_words.json"
SESSIONS: dict[str, Path] = {
    "pi-large": FIXTURES / "pi-mono" / "large-session.jsonl",
    "cc-258c": FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "cc-ae4a": FIXTURES / "claude-code" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "cc-tool-heavy": FIXTURES / "claude-code" / "tool_heavy.jsonl",
    "cc-short": FIXTURES / "claude-code" / "short.jsonl",
}
# What a session goes on with when its own turns run out: another real session's turns.
FILLER = ("cc-258c", "pi-large")
WINDOWS = (16_000, 32_000, 128_000)
MILESTONES = (1, 3, 10)
POSITIONS = ("first", "middle", "last")
CADENCE = 3  # user turns between two manual compactions once the rule's message is fed
MAX_STEPS = 8_000  # a case that reaches no milestone by then reports what it reached
MODEL = "claude-sonnet-4-5"


def load_rules() -> list[dict[str, Any]]:
    """The hand-written natural rules."""
    return json.loads(RULES.read_text(encoding="utf-8"))


def session_messages(name: str) -> list[tuple[str, Message]]:
    """The active branch of a real session, (node id, message), oldest first."""
    return list(_imported(name))


@cache
def _imported(name: str) -> tuple[tuple[str, Message], ...]:
    result = import_file(SESSIONS[name])
    return tuple(recorded_session(result.nodes, result.leaf_id).messages)


def typed_positions(messages: Sequence[tuple[str, Message]]) -> list[int]:
    """Indexes of the messages a user typed (not notices an agent put in the user role,
    not tool results, not all-pasted messages)."""
    return [i for i, (_, m) in enumerate(messages)
            if m.role == "user" and not m.tool_results and m.text.strip()
            and not injected(m.text) and split_typed(m.text).typed]


def with_rule(message: Message, rule: str) -> Message:
    """`message` with `rule` appended as a paragraph of its own."""
    return message.model_copy(update={"parts": (*message.parts, TextPart(text="\n\n" + rule))})


def request_text(projection: Projection) -> str:
    """Everything the next request carries besides system prompt and tools."""
    parts = []
    if projection.summary is not None:
        parts.append(checkpoint_text(projection.summary))
    parts += [b.text for b in projection.recalled]
    parts += [message_text(projection.message_of(n)) for n in projection.messages]
    return "\n".join(parts)


def _filler(exclude: str) -> Iterator[tuple[str, Message]]:
    n = 0
    while True:  # endless: real turns of other sessions, with fresh node ids
        for name in FILLER:
            if name == exclude:
                continue
            for node_id, message in session_messages(name):
                n += 1
                yield f"filler-{n}-{node_id}", message


@dataclass
class CaseResult:
    """One rule in one session, position and window."""

    session: str
    position: str
    window: int
    rule: str
    node_id: str
    milestones: dict[int, dict[str, bool]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "position": self.position, "window": self.window,
                "rule": self.rule, "node_id": self.node_id,
                "milestones": {str(k): v for k, v in self.milestones.items()}}


def run_case(session: str, rules: Sequence[dict[str, Any]], position: str, window: int,
             milestones: Sequence[int] = MILESTONES, *,
             messages: Sequence[tuple[str, Message]] | None = None) -> list[CaseResult]:
    """Inject `rules` (one, or all at once) into the user-typed message at `position` of
    `session`, replay it on `window`, and check each rule at each milestone."""
    base = list(messages if messages is not None else session_messages(session))
    typed = typed_positions(base)
    at = {"first": typed[0], "middle": typed[len(typed) // 2], "last": typed[-1]}[position]
    node_id, message = base[at]
    text = "\n\n".join(r["text"] for r in rules)
    base[at] = (node_id, with_rule(message, text))
    resolved = ModelResolver().resolve(MODEL, context_window=window)
    managed = ManagedSession(resolved.capacity, resolved.budget)
    results = [CaseResult(session, position, window, r["id"], node_id) for r in rules]
    wanted = sorted(milestones)
    folded_at: int | None = None  # compactions before the one that folded the message
    fed = False
    turns = 0
    for steps, (step_id, step) in enumerate(_chain(iter(base), _filler(session))):
        turn = step.role == "user" and not step.tool_results
        if turn and fed:
            turns += 1
            if turns >= CADENCE:  # new turns between compactions
                managed.compact("manual")
                turns = 0
        if folded_at is None and node_id in managed.summarized_ids:
            folded_at = len(managed.compactions) - 1
        if turn and folded_at is not None:
            done = len(managed.compactions) - folded_at
            while wanted and done >= wanted[0]:
                _check(managed, results, rules, wanted.pop(0))
            if not wanted:
                break
        if steps > MAX_STEPS:
            break
        managed.step(step_id, step)
        fed = fed or step_id == node_id
    return results


def _chain(first: Iterator[tuple[str, Message]], then: Iterator[tuple[str, Message]]
           ) -> Iterator[tuple[str, Message]]:
    yield from first
    yield from then


def _check(managed: ManagedSession, results: list[CaseResult],
           rules: Sequence[dict[str, Any]], milestone: int) -> None:
    projection, _ = managed.before_request()
    sent = request_text(projection)
    cp = projection.summary
    held = checkpoint_text(cp) if cp is not None else ""
    for result, rule in zip(results, rules, strict=True):
        result.milestones[milestone] = {
            "in_request": rule["probe"] in sent,
            "in_checkpoint": rule["probe"] in held,
            "named": result.node_id in held,
        }


def summarise(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Shares by window and milestone: in the next request; in the checkpoint or named."""
    table: dict[str, Any] = {}
    for window in WINDOWS:
        for k in MILESTONES:
            rows = [r.milestones[k] for r in results if r.window == window and k in r.milestones]
            if not rows:
                continue
            table[f"{window // 1000}k/K={k}"] = {
                "cases": len(rows),
                "in_request": sum(r["in_request"] for r in rows),
                "in_checkpoint_or_named": sum(r["in_checkpoint"] or r["named"] for r in rows),
            }
    return table


def main(argv: Sequence[str] = ()) -> None:
    """`python -m bench.user_words [--every N] [SESSION …]`: every N-th rule (1: all 38)
    one at a time, and all of them at once, in each session, position and window."""
    args = list(argv)
    every = 1
    if "--every" in args:
        at = args.index("--every")
        every = int(args[at + 1])
        del args[at:at + 2]
    rules = load_rules()
    sessions = [s for s in SESSIONS if not args or s in args]
    started = time.time()
    results: list[CaseResult] = []
    cache = {name: session_messages(name) for name in sessions}
    for name in sessions:
        for position in POSITIONS:
            for window in WINDOWS:
                for rule in rules[::every]:
                    results += run_case(name, [rule], position, window,
                                        messages=cache[name])
                all_at_once = run_case(name, rules, position, window, messages=cache[name])
                for r in all_at_once:
                    r.position = f"{position}+all"
                results += all_at_once
                print(name, position, window, summarise(
                    [r for r in results if r.session == name and r.window == window]),
                    file=sys.stderr, flush=True)
    payload = {"seconds": round(time.time() - started, 1), "every": every,
               "sessions": sessions, "rules": len(rules[::every]),
               "single": summarise([r for r in results if "+all" not in r.position]),
               "all_at_once": summarise([r for r in results if "+all" in r.position]),
               "misses": [r.to_json() for r in results
                          if any(not (m["in_request"] or (r.window == 16_000 and (
                              m["in_checkpoint"] or m["named"])))
                                 for m in r.milestones.values())][:200]}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    print(json.dumps({k: payload[k] for k in ("single", "all_at_once")}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
