"""Observation masking vs summarise-only on real transcripts (SPEC V1-V2).

Run: `.venv/bin/python -m bench.masking_bench` (writes bench/results/masking.json, prints a
table). Each real transcript in tests/fixtures (Pi, Claude Code) is replayed through the
public replay path (`replay_messages`, what `contextfold replay` runs) with the offline
extractive summariser, on windows small enough that compaction happens, once per masking
mode (off = summarise-only, auto = the default, always). Per run:

* summariser calls (compactions that asked the summariser) and masking steps (no model call);
* compactions per 100 user turns;
* tokens freed: the sum over compactions of the estimated request before minus after it,
  and the part of it freed by masking steps;
* the share of the transcript's estimated tokens that are tool output;
* tokens the model reads over the session: all chat requests, and the summariser's input
  (tokens folded into each summary plus a full previous summary, an upper bound);
* the mean and maximum projected request, invalid requests, over-limit requests and dropped
  messages (all three must be 0);
* wall time of the replay (auto / off ratio within the same run; the machine is noisy).

"Summariser calls saved" is off minus auto (and minus always) for the same transcript and
window. Deterministic except for the wall times.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.mask_planner import MASKING_SUMMARIZER
from contextfold.core.sizing.estimator import MessageCosts
from contextfold.core.values.messages import Message, Node
from contextfold.formats import import_file
from contextfold.replay import ReplayReport, active_messages, replay_messages

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
RESULTS = Path(__file__).parent / "results" / "masking.json"
CC = FIXTURES / "claude-code"
TRANSCRIPTS = [
    ("pi large-session", FIXTURES / "pi-mono" / "large-session.jsonl"),
    ("claude-code 258c7280", CC / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"),
    ("claude-code ae4a77f8", CC / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"),
    ("claude-code tool_heavy", CC / "tool_heavy.jsonl"),
]
WINDOWS = (32_000, 64_000, 128_000)
MODES = ("off", "auto", "always")


def user_turns(messages: list[tuple[str, Message]]) -> int:
    return sum(1 for _, m in messages if m.role == "user" and not m.tool_results)


def tool_share(messages: list[tuple[str, Message]], capacity: ModelCapacity) -> float:
    """Share of the transcript's estimated tokens that are tool messages."""
    costs = MessageCosts(capacity)
    sizes = [(m.role, costs(Node(id=i, payload=m))) for i, m in messages]
    total = sum(s for _, s in sizes)
    return sum(s for role, s in sizes if role == "tool") / total if total else 0.0


def run(messages: list[tuple[str, Message]], window: int, mode: str) -> dict[str, Any]:
    capacity = ModelCapacity(model="bench-claude", context_window=window, max_output=8_192,
                             family="claude")
    budget = derive_budget(capacity, CompactionSettings(masking=mode))
    start = time.perf_counter()
    report: ReplayReport = replay_messages(messages, capacity, budget)
    seconds = time.perf_counter() - start
    masked = [c for c in report.compactions if c.summarizer == MASKING_SUMMARIZER]
    summaries = [c for c in report.compactions if c.summarizer != MASKING_SUMMARIZER]
    turns = user_turns(messages)
    projected = [r.estimated_tokens for r in report.requests]
    return {
        "window": window,
        "mode": mode,
        "requests": len(report.requests),
        "user_turns": turns,
        "summarizer_calls": len(summaries),
        "masking_steps": len(masked),
        "compactions_per_100_turns": round(100 * len(report.compactions) / max(1, turns), 2),
        "summaries_per_100_turns": round(100 * len(summaries) / max(1, turns), 2),
        "tokens_freed": sum(c.tokens_before - c.tokens_after for c in report.compactions),
        "tokens_freed_by_masking": sum(c.tokens_before - c.tokens_after for c in masked),
        "mean_projected_tokens": round(statistics.fmean(projected)) if projected else 0,
        # What the model reads over the session: every chat request, plus what the
        # summariser reads (the tokens folded into each summary, and the previous summary).
        "request_tokens_total": sum(projected),
        "summarizer_input_tokens": sum(c.folded_tokens + budget.summary_budget
                                       for c in summaries),
        "max_projected_tokens": max(projected, default=0),
        "safe_input_limit": budget.safe_input_limit,
        "invalid_tool_sequences": report.invalid_tool_sequences,
        "over_limit_requests": sum(1 for r in report.requests if r.over_limit),
        "dropped_messages": report.dropped_messages,
        "seconds": round(seconds, 3),
    }


def main() -> None:
    rows: list[dict[str, Any]] = []
    shares: dict[str, float] = {}
    for name, path in TRANSCRIPTS:
        result = import_file(path)
        messages = active_messages(result.nodes, result.leaf_id)
        shares[name] = round(tool_share(messages, ModelCapacity(
            model="bench-claude", context_window=128_000, max_output=8_192, family="claude")), 3)
        for window in WINDOWS:
            by_mode = {mode: run(messages, window, mode) for mode in MODES}
            off = by_mode["off"]
            for row in by_mode.values():
                row["transcript"] = name
                row["summarizer_calls_saved"] = off["summarizer_calls"] - row["summarizer_calls"]
                row["time_ratio_vs_off"] = round(row["seconds"] / off["seconds"], 3) \
                    if off["seconds"] else None
                rows.append(row)
            print(f"{name:24} {window:>7,}  " + "  ".join(
                f"{m}: {r['summarizer_calls']:>3} summaries + {r['masking_steps']:>3} masks, "
                f"{r['compactions_per_100_turns']:>6}/100 turns" for m, r in by_mode.items()))
    totals = {}
    for mode in MODES:
        picked = [r for r in rows if r["mode"] == mode]
        totals[mode] = {
            "summarizer_calls": sum(r["summarizer_calls"] for r in picked),
            "masking_steps": sum(r["masking_steps"] for r in picked),
            "tokens_freed": sum(r["tokens_freed"] for r in picked),
            "tokens_freed_by_masking": sum(r["tokens_freed_by_masking"] for r in picked),
            "request_tokens_total": sum(r["request_tokens_total"] for r in picked),
            "summarizer_input_tokens": sum(r["summarizer_input_tokens"] for r in picked),
            "invalid_or_over_limit_or_dropped": sum(
                r["invalid_tool_sequences"] + r["over_limit_requests"] + r["dropped_messages"]
                for r in picked),
        }
    out = {
        "what": "replay of real transcripts: masking off (summarise-only) vs auto vs always",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tool_output_share": shares,
        "totals": totals,
        "runs": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(totals, indent=2))


if __name__ == "__main__":
    main()
