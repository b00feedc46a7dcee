"""The raw tail's size on real sessions (issue 40): cost and continuity for tails of 4k-20k.

Run: `.venv/bin/python -m bench.tail_bench` (writes bench/results/tail.json and prints a
table). Deterministic: the real Pi and Claude Code sessions in `tests/fixtures`, replayed
at a 200k window through contextfold's engine (`contextfold.replay`, the engine of
`contextfold replay`) with the default (cost) trigger and the offline summariser, once per
tail budget (`CompactionSettings.tail_tokens`: 20k is Pi's default and ours so far).

Per session and tail:

* **cost** - contextfold's requests through the modelled prompt cache at the session
  model's prices (`replay_cost`), the compactions, and each compaction's realised saving
  (`core.report.explain`, issue 40; the minimum shows whether any of them lost money);
* **rules kept** - the hand-written natural rules of issue 37
  (`tests/fixtures/user_words/natural_rules.json`), all appended to the session's first
  typed user message: after each compaction that has folded that message, the share of
  the rules' probes in the next request (checkpoint, recall block and raw tail);
* **last exchange kept** - in the first request after each compaction (where the raw
  tail is at its smallest), whether the previous turn's user message and the model's last
  reply in it (their first 200 characters) are in the request, raw or in the checkpoint:
  what a smaller tail could lose first;
* **recent tool output kept** - in the same requests, the share of the previous turn's
  last `RECENT_RESULTS` tool results (their first 200 characters): the working material
  a smaller raw tail gives up to the summary.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.user_words import RULES, request_text, with_rule
from contextfold.core.sizing.resolver import ModelResolver
from contextfold.core.values.messages import Message
from contextfold.formats import import_file
from contextfold.replay import (
    ManagedSession,
    RecordedSession,
    recorded_session,
    replay_overhead,
    replay_recorded,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
OUT = Path(__file__).parent / "results" / "tail.json"
WINDOW = 200_000
TAILS = (4_000, 8_000, 12_000, 20_000)
SESSIONS = {
    "pi-large": "pi-mono/large-session.jsonl",
    "cc-258c": "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "cc-ae4a": "claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
}
SNIPPET = 200  # characters of a message searched for in the next request
RECENT_RESULTS = 3  # tool results probed before each user turn


def load(name: str) -> RecordedSession:
    result = import_file(FIXTURES / SESSIONS[name])
    return recorded_session(result.nodes, result.leaf_id)


def typed(message: Message) -> bool:
    return message.role == "user" and not message.tool_results and bool(message.text.strip())


def cost_row(session: RecordedSession, tail: int) -> dict[str, Any]:
    """One replay (the product's path) with a tail budget of `tail` tokens."""
    resolved = ModelResolver().resolve(None, recorded=session.model, context_window=WINDOW)
    budget = resolved.budget.model_copy(update={"tail_budget": tail})
    fixed = replay_overhead(session, resolved.capacity, budget, None, "--overhead", resolved)
    report = replay_recorded(session, resolved.capacity, budget, fixed)
    realised = [c.explanation.realised_saving for c in report.compactions
                if c.explanation is not None and c.explanation.realised_saving is not None]
    cost = report.cost or {}
    return {"model": resolved.name, "usd": cost["contextfold"]["usd"],
            "recorded_modelled_usd": cost["recorded_modelled"]["usd"],
            "compactions": len(report.compactions),
            "triggers": [c.explanation.trigger for c in report.compactions
                         if c.explanation is not None],
            "realised_min_usd": round(min(realised), 6) if realised else None,
            "realised_sum_usd": round(sum(realised), 6) if realised else None,
            "max_projected_tokens": report.max_projected_tokens}


def continuity_row(session: RecordedSession, tail: int, rules: Sequence[dict[str, Any]]
                   ) -> dict[str, Any]:
    """The rules and the last exchange, probed through one managed replay (module doc)."""
    resolved = ModelResolver().resolve(None, recorded=session.model, context_window=WINDOW)
    budget = resolved.budget.model_copy(update={"tail_budget": tail})
    fixed, _ = replay_overhead(session, resolved.capacity, budget, None, "--overhead",
                               resolved)
    from contextfold.core.sizing.fit import budget_after_overhead

    managed = ManagedSession(resolved.capacity, budget_after_overhead(budget, fixed))
    messages = list(session.messages)
    first = next(i for i, (_, m) in enumerate(messages) if typed(m))
    rule_id, rule_message = messages[first]
    messages[first] = (rule_id, with_rule(rule_message, "\n\n".join(r["text"] for r in rules)))
    rule_checks = rule_hits = 0
    exchange_checks = exchange_hits = 0
    tool_checks = tool_hits = 0
    last_user = last_reply = ""
    recent: list[str] = []  # the latest tool results' openings
    # What the previous turn left, as it stood when the current turn began.
    before_turn: tuple[str, str, list[str]] = ("", "", [])
    seen = 0  # compactions already probed
    for node_id, message in messages:
        message = message.model_copy(update={"usage": None}) if message.usage else message
        if message.role == "assistant":
            managed.before_request()  # the request that produces it, compacting if due
        if message.role == "assistant" and len(managed.compactions) > seen:
            # The first request after a compaction: what its raw tail gave up shows here.
            seen = len(managed.compactions)
            projection, _ = managed.before_request()
            text = request_text(projection)
            if rule_id in managed.summarized_ids:
                rule_checks += len(rules)
                rule_hits += sum(r["probe"] in text for r in rules)
            user_text, reply_text, results = before_turn
            if user_text and reply_text:
                exchange_checks += 1
                exchange_hits += user_text[:SNIPPET] in text and reply_text[:SNIPPET] in text
            for opening in results:
                tool_checks += 1
                tool_hits += opening in text
        if typed(message):
            before_turn = (last_user, last_reply, list(recent))
        managed.step(node_id, message)
        if typed(message):
            last_user = message.text.strip()
        elif message.role == "assistant" and message.text.strip():
            last_reply = message.text.strip()
        for result in message.tool_results:
            if (result.output or "").strip():
                recent = [*recent, result.output.strip()[:SNIPPET]][-RECENT_RESULTS:]
    return {"rule_checks": rule_checks,
            "rules_in_request": round(rule_hits / rule_checks, 4) if rule_checks else None,
            "exchange_checks": exchange_checks,
            "last_exchange_in_request": round(exchange_hits / exchange_checks, 4)
            if exchange_checks else None,
            "tool_checks": tool_checks,
            "recent_tool_output_in_request": round(tool_hits / tool_checks, 4)
            if tool_checks else None}


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    names = [a for a in argv if a in SESSIONS] or list(SESSIONS)
    rules = json.loads(RULES.read_text(encoding="utf-8"))
    rules = rules["rules"] if isinstance(rules, dict) else rules
    started = time.perf_counter()
    rows = []
    for name in names:
        session = load(name)
        for tail in TAILS:
            t0 = time.perf_counter()
            row = {"session": name, "tail": tail, **cost_row(session, tail),
                   **continuity_row(session, tail, rules),
                   "seconds": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            print(f"{name:9} tail {tail // 1000:>2}k  ${row['usd']:.2f}  "
                  f"{row['compactions']:>2} compactions  realised min {row['realised_min_usd']}"
                  f"  rules {row['rules_in_request']}  last exchange "
                  f"{row['last_exchange_in_request']}  tools "
                  f"{row['recent_tool_output_in_request']}", flush=True)
    result = {"benchmark": "tail", "window": WINDOW, "tails": list(TAILS),
              "trigger": "cost", "summarizer": "offline", "rules": len(rules),
              "rows": rows, "seconds": round(time.perf_counter() - started, 1)}
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
