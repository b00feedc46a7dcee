"""Split-turn benchmark (SPEC K6): what stays raw after each compaction of real sessions.

Run: `.venv/bin/python -m bench.split_turn_bench` (writes bench/results/split_turn.json and
prints a table; a few minutes).

Each real transcript (two long Claude Code sessions, the Pi session; tests/fixtures) is
replayed through the public replay path (`import_file` → `replay_messages`, what
`contextfold replay` runs) at 32k, 64k and 200k windows, twice: with the split-turn boundary
(K6, the default) and without it (`CompactionSettings(split_turn=False)`: the K1–K3 boundary,
the behaviour before K6). Per compaction it records the raw tokens kept as a share of the tail
budget that compaction used. Figures:

* kept share: median (and p10, min) of kept/tail budget over the compactions whose region
  held at least a full tail budget of raw history ("where the turn has that much"); goal
  median ≥ 50%;
* empty tails: compactions that kept nothing raw although the latest tool round fitted the
  tail budget; goal 0;
* latest round raw: compactions after which the latest tool call and its result are both in
  the projection (whole or clipped); goal 100%, except K6's own exception (a round that does
  not fit the tail budget even with its results clipped, e.g. a file write whose arguments
  alone exceed it), counted apart;
* invalid requests: requests either provider would reject (the validity oracles check every
  replayed request); goal 0;
* compactions per 100 model requests, with and without K6 (the price of keeping more raw).
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from contextfold import (
    CompactionSettings,
    capacity_for,
    derive_budget,
    estimate_message,
    import_file,
    replay_messages,
)
from contextfold.core.values.messages import Node
from contextfold.replay import ReplayReport, active_messages

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "split_turn.json"
FIXTURES = ROOT / "tests" / "fixtures"
TRANSCRIPTS = {
    "claude-code 258c7280": FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "claude-code ae4a77f8": FIXTURES / "claude-code" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "pi large-session": FIXTURES / "pi-mono" / "large-session.jsonl",
}
WINDOWS = (32_000, 64_000, 200_000)
DEFAULT_MODEL = "claude-sonnet-4-5"


def recorded_model(messages: list[Any]) -> str:
    """The transcript's last recorded model if the catalog knows it (as the CLI does)."""
    for _, m in reversed(messages):
        name = m.model or (m.usage.model if m.usage else None)
        if m.role == "assistant" and name:
            try:
                capacity_for(name)
                return name
            except LookupError:
                break
    return DEFAULT_MODEL


def latest_round(chain: list[Node], upto: int) -> tuple[str, set[str]] | None:
    """(call node id, result node ids) of the latest answered tool call before `upto`."""
    answered: dict[str, str] = {}
    for node in chain[:upto]:
        if node.message is not None:
            for r in node.message.tool_results:
                answered[r.call_id] = node.id
    for node in reversed(chain[:upto]):
        msg = node.message
        if msg is None or msg.role != "assistant":
            continue
        calls = [c.id for c in msg.tool_calls if c.id in answered]
        if calls:
            return node.id, {answered[c] for c in calls}
    return None


def analyse(report: ReplayReport, capacity: Any) -> dict[str, Any]:
    """Per-compaction facts from the replayed chain (checkpoints in order of `compactions`)."""
    chain = report.chain
    position = {n.id: i for i, n in enumerate(chain)}
    checkpoints = [i for i, n in enumerate(chain) if n.checkpoint is not None]
    shares: list[float] = []
    empty_while_fits = too_big = 0
    latest_raw = latest_clipped = latest_total = 0
    for record, k in zip(report.compactions, checkpoints, strict=True):
        cp = chain[k].checkpoint
        assert cp is not None
        available = record.kept_tokens + record.folded_tokens
        if record.tail_budget and available >= record.tail_budget:
            shares.append(record.kept_tokens / record.tail_budget)
        latest = latest_round(chain, k)
        if latest is None:
            continue
        call_id, result_ids = latest
        start = position[call_id]
        round_tokens = sum(estimate_message(chain[i].message, capacity)
                           for i in range(start, k) if chain[i].message is not None)
        latest_total += 1
        first = position.get(cp.first_kept_id) if cp.first_kept_id else None
        if first is not None and first <= start:
            latest_raw += 1
            latest_clipped += bool(result_ids & set(cp.tail_clips))
        elif record.kept_messages == 0 and round_tokens <= record.tail_budget:
            empty_while_fits += 1
        elif record.kept_messages == 0:
            too_big += 1  # K6's exception: the round does not fit even with results clipped
    return {
        "kept_shares": shares,
        "empty_tail_while_round_fits": empty_while_fits,
        "latest_round_raw": latest_raw,
        "latest_round_clipped": latest_clipped,
        "latest_round_too_big": too_big,
        "compactions_with_a_tool_round": latest_total,
    }


def run_one(name: str, path: Path, window: int, split: bool) -> dict[str, Any]:
    result = import_file(path)
    messages = active_messages(result.nodes, result.leaf_id)
    capacity = capacity_for(recorded_model(messages), context_window=window)
    budget = derive_budget(capacity, CompactionSettings(split_turn=split))
    started = time.perf_counter()
    report = replay_messages(messages, capacity, budget)
    seconds = time.perf_counter() - started
    facts = analyse(report, capacity)
    requests = len(report.requests)
    shares = facts["kept_shares"] = [round(x, 3) for x in facts["kept_shares"]]
    return {
        "transcript": name,
        "model": capacity.model,
        "window": window,
        "split_turn": split,
        "tail_budget": budget.tail_budget,
        "requests": requests,
        "compactions": len(report.compactions),
        "compactions_per_100_requests": round(100 * len(report.compactions) / requests, 2),
        "invalid_requests": report.invalid_tool_sequences,
        "over_limit_requests": sum(r.over_limit for r in report.requests),
        "dropped_messages": report.dropped_messages,
        # A loop would compact again and again before one request.
        "max_compactions_before_one_request": max(
            Counter(c.before_request for c in report.compactions).values(), default=0),
        "kept_share_median": round(statistics.median(shares), 3) if shares else None,
        "kept_share_p10": round(_quantile(shares, 0.1), 3) if shares else None,
        "kept_share_min": round(min(shares), 3) if shares else None,
        "kept_share_samples": len(shares),
        "kept_raw_messages": [c.kept_messages for c in report.compactions],
        "kept_raw_tokens": [c.kept_tokens for c in report.compactions],
        "replay_seconds": round(seconds, 2),
        **facts,
    }


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    rows = [run_one(name, path, window, split)
            for name, path in TRANSCRIPTS.items()
            for window in WINDOWS
            for split in (False, True)]
    after = [r for r in rows if r["split_turn"]]
    pooled = [s for r in after for s in r["kept_shares"]]
    before = [r for r in rows if not r["split_turn"]]
    summed = ("empty_tail_while_round_fits", "latest_round_raw", "latest_round_clipped",
              "latest_round_too_big", "compactions_with_a_tool_round")
    totals = {
        "compactions_with_split_turn": sum(r["compactions"] for r in after),
        **{key: sum(r[key] for r in after) for key in summed},
        "invalid_requests": sum(r["invalid_requests"] for r in rows),
        "max_compactions_before_one_request":
            max(r["max_compactions_before_one_request"] for r in rows),
        "kept_share_median_pooled": statistics.median(pooled) if pooled else None,
        "kept_share_samples": len(pooled),
        "compactions_without_split_turn": sum(r["compactions"] for r in before),
        "empty_tail_while_round_fits_without_split_turn":
            sum(r["empty_tail_while_round_fits"] for r in before),
    }
    payload = {
        "benchmark": "split_turn",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "summarizer": "extractive",
        "rows": rows,
        "totals": totals,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"{'transcript':22} {'window':>7} {'K6':>3} {'comp/100':>8} {'share med':>9} "
          f"{'p10':>5} {'empty':>5} {'latest raw':>10} {'invalid':>7}")
    for r in rows:
        med = "—" if r["kept_share_median"] is None else f"{r['kept_share_median']:.0%}"
        p10 = "—" if r["kept_share_p10"] is None else f"{r['kept_share_p10']:.0%}"
        latest = f"{r['latest_round_raw']}/{r['compactions_with_a_tool_round']}"
        print(f"{r['transcript']:22} {r['window']:>7} {'on' if r['split_turn'] else 'off':>3} "
              f"{r['compactions_per_100_requests']:>8} {med:>9} {p10:>5} "
              f"{r['empty_tail_while_round_fits']:>5} {latest:>10} {r['invalid_requests']:>7}")
    print(json.dumps(totals, indent=2))


if __name__ == "__main__":
    main()
