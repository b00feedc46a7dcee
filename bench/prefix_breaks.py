"""Prefix breaks and the cache-read share over the real sessions (SPEC Q5, issue 40).

`python -m bench.prefix_breaks` replays the real Pi and Claude Code sessions in
`tests/fixtures` (copies of `/work/shared/data`) through `contextfold.replay` at a 200k
window, with compaction, automatic recall (L5) and the default trigger, and writes
`bench/results/prefix_breaks.json`: per session, the requests that did not start with the
previous request's content (`core.money.prefix_breaks`), how many a checkpoint explains, and the
share of contextfold's modelled input tokens read from the prompt cache (`core.money.prices`,
Anthropic's cache rules: `cached / (input + cached + cache writes)`).

Each session is replayed with the default recall share and with recall off (L5 off), the
figure recall is compared with; `--before FILE` keeps an earlier commit's rows beside them.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from contextfold.core.sizing.resolver import ModelResolver
from contextfold.formats import import_file
from contextfold.replay import recorded_session, replay_overhead, replay_recorded

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "prefix_breaks.json"
WINDOW = 200_000
SESSIONS = {
    "pi-mono/large-session.jsonl": "Pi",
    "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl": "Claude Code",
    "claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl": "Claude Code",
}


def cache_read_share(cost: dict[str, Any]) -> float:
    """The share of the modelled input tokens read from the cache."""
    total = cost["input_tokens"] + cost["cached_tokens"] + cost["cache_write_tokens"]
    return round(cost["cached_tokens"] / total, 4) if total else 0.0


def one(path: Path, trigger: str | None, recall_share: float | None) -> dict[str, Any]:
    """One replay of `path`: its prefix breaks, cache-read share and cost."""
    result = import_file(path)
    session = recorded_session(result.nodes, result.leaf_id)
    resolved = ModelResolver().resolve(None, recorded=session.model, context_window=WINDOW)
    budget = resolved.budget
    if trigger is not None:
        budget = budget.model_copy(update={"trigger": trigger})
    if recall_share is not None:
        safe = budget.safe_input_limit
        budget = budget.model_copy(update={"recall_budget": int(safe * recall_share)})
    fixed = replay_overhead(session, resolved.capacity, budget, None, "--overhead", resolved)
    started = time.perf_counter()
    report = replay_recorded(session, resolved.capacity, budget, fixed).to_json()
    ours = report["cost"]["contextfold"]
    return {"model": resolved.name, "trigger": budget.trigger,
            "recall_budget": budget.recall_budget, "requests": report["requests"],
            "compactions": report["compactions"],
            "recall_requests": report["recall_requests"],
            "prefix_breaks": report["cost"].get("prefix_breaks"),
            "cache_read_share": cache_read_share(ours), "usd": ours["usd"],
            "seconds": round(time.perf_counter() - started, 1)}


PEER_ROWS = ("contextfold", "contextfold (L5 off)")


def peer_totals(results: dict[str, Any]) -> dict[str, Any]:
    """The peers bench's totals of contextfold's rows (prefix breaks, compactions, price
    under each provider's cache rules, the share read from Anthropic's cache)."""
    from bench.peers.report import totals

    out = {}
    for name in PEER_ROWS:
        t = totals(results["systems"][name])
        out[name] = {"calls": t["calls"], "prefix_breaks": t["prefix_breaks"],
                     "compactions": t["compactions"],
                     "usd_anthropic": round(t["usd_anthropic"], 2),
                     "usd_openai": round(t["usd_openai"], 2),
                     "cached_anthropic": round(t["cached_anthropic"] /
                                               (t["input_tokens"] or 1), 4)}
    return out


def keep_peers_before(out: Path, peers: Path, commit: str | None) -> None:
    """Keep the peers bench's contextfold rows at an earlier commit in the results file."""
    data = json.loads(out.read_text(encoding="utf-8"))
    data["peers_before"] = {"commit": commit,
                            "rows": peer_totals(json.loads(peers.read_text(encoding="utf-8")))}
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trigger", choices=("size", "cost"), default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--before", type=Path, default=None,
                        help="a results file of this bench at an earlier commit, kept beside "
                             "the new rows as `before` (with --before-commit)")
    parser.add_argument("--before-commit", default=None)
    parser.add_argument("--peers-before", type=Path, default=None,
                        help="the peers bench's results file (bench/results/peers.json) at "
                             "--before-commit: its contextfold rows are kept in the results "
                             "file beside the current run's, and nothing is replayed")
    args = parser.parse_args()
    if args.peers_before is not None:
        keep_peers_before(args.out, args.peers_before, args.before_commit)
        return
    rows = []
    for rel, label in SESSIONS.items():
        for share in (None, 0.0):  # the default recall share, then L5 off
            row = one(ROOT / "tests" / "fixtures" / rel, args.trigger, share)
            rows.append({"session": rel, "label": label, "recall": share is None, **row})
            print(json.dumps(rows[-1]), flush=True)
    out: dict[str, Any] = {"window": WINDOW, "rows": rows}
    if args.before is not None:
        before = json.loads(args.before.read_text(encoding="utf-8"))
        out["before"] = {"commit": args.before_commit, "rows": before["rows"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
