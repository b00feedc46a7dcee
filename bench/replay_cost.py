"""Recorded cost against contextfold's, on real sessions with recorded usage (issue 28, Q2/Q4).

`python -m bench.replay_cost` replays the real Pi and Claude Code sessions in
`tests/fixtures` through `contextfold.replay` (the engine of `contextfold replay`) at a 200k
window, once per trigger (`size`, `cost`), and writes `bench/results/replay_cost.json`:
what the agent's requests were billed as recorded, the same requests through the modelled
prompt cache (`core.money.prices`), and contextfold's requests through the same cache, with the
compactions each trigger committed, each explained (issue 40). The summaries are the offline
ones (no model call), so
contextfold's figure has no summariser cost; a model summariser adds its calls (the peers
bench prices those, docs/peers.md).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from contextfold.core.sizing.resolver import ModelResolver
from contextfold.formats import import_file
from contextfold.replay import recorded_session, replay_overhead, replay_recorded

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "replay_cost.json"
WINDOW = 200_000
SESSIONS = {  # the fixture, and whose agent wrote it
    "pi-mono/large-session.jsonl": "Pi",
    "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl": "Claude Code",
    "claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl": "Claude Code",
}


def one(path: Path, trigger: str) -> dict[str, Any]:
    """One replay of `path` with `trigger`: its cost object and compaction count."""
    result = import_file(path)
    session = recorded_session(result.nodes, result.leaf_id)
    resolved = ModelResolver().resolve(None, recorded=session.model, context_window=WINDOW)
    budget = resolved.budget.model_copy(update={"trigger": trigger})
    fixed = replay_overhead(session, resolved.capacity, budget, None, "--overhead", resolved)
    started = time.perf_counter()
    report = replay_recorded(session, resolved.capacity, budget, fixed).to_json()
    # The models the agent's own requests ran on (Claude Code sends side requests to a
    # smaller model): the replay prices every request at the session's model.
    used = Counter(m.usage.model or m.model or "?" for _, m in session.messages
                   if m.usage is not None)
    return {"trigger": trigger, "model": resolved.name, "messages": len(session.messages),
            "recorded_models": dict(used.most_common()),
            "compactions": report["compactions"], "cost": report["cost"],
            # Issue 40: each compaction explained (trigger, before -> after, expected saving,
            # break-even request, realised saving over the requests after it).
            "compaction_log": [{"before_request": c["before_request"], **c["explanation"]}
                               for c in report["compaction_log"] if c.get("explanation")],
            "seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    rows = []
    for rel, label in SESSIONS.items():
        for trigger in ("size", "cost"):
            row = one(ROOT / "tests" / "fixtures" / rel, trigger)
            rows.append({"session": rel, "label": label, **row})
            print(rel, trigger, row["compactions"], row["cost"]["contextfold"]["usd"])
    OUT.write_text(json.dumps({"window": WINDOW, "rows": rows}, indent=1) + "\n",
                   encoding="utf-8")


if __name__ == "__main__":
    main()
