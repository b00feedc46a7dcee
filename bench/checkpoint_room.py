"""Where a checkpoint's room goes on a long session: `python -m bench.checkpoint_room`.

The peers bench (docs/peers.md) finds contextfold holding about a fifth of the planted facts
in front of the model at the end of its 3,600-message session, where peers whose summary is
a flat list hold all of them. This measures why, on the same planted session, the same fair
fake summariser (capped at contextfold's summary budget in o200k tokens) and contextfold's
shipped settings (`bench/peers/cf_system.py` with the 12,000-token tail): at every
checkpoint, how many planted facts the summariser's answer listed and how many the
checkpoint kept; and at the last one, the summary budget's split (the identifier ledger's
share, the prose's room), each section's tokens by contextfold's estimate and by o200k,
and what listing every planted fact would take.

Writes bench/results/checkpoint_room.json; `python -m bench.docs_report` renders it into
docs/benchmarks.md. Takes a few minutes (one pass over the planted session).
"""

from __future__ import annotations

import itertools
import json
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

from bench.peers.cf_system import Contextfold, budget_with
from bench.peers.common import Tokenizer, capped_echo, summary_limit
from bench.peers.continuity import FACT_RE, facts_in, planted_session, run_continuity
from contextfold.core.sizing.estimator import estimate_text, model_text_counter
from contextfold.core.view.projection import render_ledger

RESULTS = Path(__file__).parent / "results" / "checkpoint_room.json"
SIZE = 3_600  # the peers bench's planted session (`bench.peers.run.CONTINUITY`)
SAMPLE_EVERY = 4  # as the peers bench decides
TAIL = 12_000  # the tail contextfold ships (`CompactionSettings.tail_tokens`)
_HEADING = re.compile(r"^#{2,3} ", re.M)
_USER_WORDS = re.compile(r"^- \(user\) \[\[", re.M)  # a user message carried verbatim (S8)


def _sections(text: str, tokens: Tokenizer) -> list[dict[str, Any]]:
    """Each `##`/`###` section of a summary: its tokens (estimate, o200k), the planted facts
    it names and the user messages it carries whole."""
    starts = [m.start() for m in _HEADING.finditer(text)] + [len(text)]
    out = []
    for a, b in itertools.pairwise(starts):
        body = text[a:b]
        out.append({"heading": body.splitlines()[0].lstrip("# ").strip(),
                    "estimate": estimate_text(body), "o200k": tokens.count(body),
                    "facts": len(facts_in(body)),
                    "user_messages_whole": len(_USER_WORDS.findall(body))})
    return out


def _number(check: dict[str, Any], key: str) -> int:
    """A count of the retention check's details (`Check.to_json`: a list, or a count
    beside a shortened list)."""
    value = check.get(f"{key}_count", check.get(key, 0))
    return len(value) if isinstance(value, list) else int(value)


def measure(size: int = SIZE) -> dict[str, Any]:
    tokens = Tokenizer()
    msgs = planted_session(size)
    answers: list[str] = []
    fake = capped_echo(summary_limit("contextfold"), tokens)

    def summarize(prompt: str, request: Any = None) -> str:
        answers.append(fake(prompt, request))
        return answers[-1]

    system = Contextfold(summarize, budget_with(tail_tokens=TAIL))
    decide = system.session.before_request
    checkpoints: list[dict[str, Any]] = []
    last: dict[str, Any] = {}

    def before_request() -> Any:
        projection, extra = decide()
        node = projection.checkpoint
        if node is not None and node.id != last.get("id"):
            summary = node.checkpoint.summary
            checkpoints.append({"answered": len(facts_in(answers[-1])) if answers else 0,
                                "kept": len(facts_in(summary)),
                                "summary_estimate": estimate_text(summary)})
            last.update(id=node.id, node=node, answer=answers[-1] if answers else "")
        return projection, extra

    system.session.before_request = before_request
    started = time.perf_counter()
    result = run_continuity(system, msgs, SAMPLE_EVERY)
    seconds = time.perf_counter() - started
    budget = system.session.budget
    node = last["node"]
    checkpoint = node.checkpoint
    ledger = render_ledger(checkpoint.ledger)
    planted = sorted({f"{c}-{n}" for m in msgs for c, n in FACT_RE.findall(m["text"])})
    # What the fake's own format costs per fact (`cf_system.echo_checkpoint`: one bullet each).
    bullets = "".join(f"- (inferred) FACT-{f}\n" for f in planted)
    check = checkpoint.details.get("check") or {}
    end = result["milestones"]["end"]
    return {
        "run": {"at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                "seconds": round(seconds, 1), "machine": platform.platform(),
                "messages": len(msgs), "tail_tokens": TAIL, "sample_every": SAMPLE_EVERY},
        "budget": {"summary_budget": budget.summary_budget,
                   "ledger_cap": budget.ledger_budget,
                   "summary_cap_o200k": summary_limit("contextfold")},
        "compactions": result["compactions"],
        "per_checkpoint": checkpoints,
        "last": {
            "planted_in_session": len(planted),
            "planted_at_end": end["planted"],
            "held_at_end": round(sum(v for k, v in end.items()
                                     if k not in ("at_message", "planted")) / 6, 4),
            "answered": len(facts_in(last["answer"])),
            "answer_o200k": tokens.count(last["answer"]),
            "kept": len(facts_in(checkpoint.summary)),
            "summary_estimate": estimate_text(checkpoint.summary),
            "summary_o200k": tokens.count(checkpoint.summary),
            "ledger_estimate": estimate_text(ledger),
            "ledger_o200k": tokens.count(ledger),
            # What the ledger's cap is checked by: the session model's own tokenizer family
            # (`core.planning.planner`), where the prose is checked by the generic estimate.
            "ledger_counted": model_text_counter(system.session.capacity)(ledger),
            "ledger_entries": (checkpoint.details.get("ledger") or {}).get("entries"),
            "sections": _sections(checkpoint.summary, tokens),
            "check": {k: _number(check, k) for k in ("required", "readded", "evicted")},
            "every_fact_as_bullets_estimate": estimate_text(bullets),
            "every_fact_as_bullets_o200k": tokens.count(bullets),
            "every_fact_flat_o200k": tokens.count(" ".join(f"FACT-{f}" for f in planted)),
        },
    }


def main(argv: list[str]) -> int:
    size = int(argv[0]) if argv else SIZE
    out = measure(size)
    if size == SIZE:
        RESULTS.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    last = out["last"]
    print(f"{out['compactions']} compactions; held at the end {100 * last['held_at_end']:.1f}%"
          f"; last checkpoint: answered {last['answered']} facts, kept {last['kept']}; "
          f"summary {last['summary_estimate']:,} estimated / {last['summary_o200k']:,} o200k, "
          f"ledger {last['ledger_estimate']:,} / {last['ledger_o200k']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
