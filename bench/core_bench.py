"""Core benchmark: planning a 1M-character history with the public `plan_compaction`.

Run: `.venv/bin/python -m bench.core_bench` (writes bench/results/core.json, prints a table).

One manual `plan_compaction` of a 1,000,000-character history (boundary, newly-old set,
chunking), its serialisation for the summariser, and the extractive summary of it. The
check before each model call is measured where users run it, `Conversation.estimate`, in
`bench/scale_bench.py` (issue 13: no figure from a path users do not run).
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from tests.builders import tool_call, tool_result

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.planning.planner import plan_compaction
from contextfold.core.render.serialize import serialize_nodes
from contextfold.core.values.messages import Message, Node, Usage, text_message
from contextfold.core.values.tree import Branch
from contextfold.summarize.extractive import summarize_extractive

RESULTS = Path(__file__).parent / "results" / "core.json"
CAPACITY = ModelCapacity(model="claude-sonnet-4-5", context_window=200_000, max_output=64_000)


def history(n_messages: int, chars: int = 400) -> list[Message]:
    """Realistic turns: question, tool call, tool result, answer (with usage)."""
    msgs: list[Message] = []
    i = 0
    while len(msgs) < n_messages:
        msgs.append(text_message("user", f"step {i}: " + "please look into this. " * (chars // 24)))
        msgs.append(tool_call(f"c{i}", "read", {"path": f"src/file_{i}.py"}))
        msgs.append(tool_result(f"c{i}", "def f():\n    return 42\n" * (chars // 24)))
        msgs.append(text_message("assistant", "done. " * (chars // 6),
                                 usage=Usage(input=9_000, output=200, cache_read=30_000)))
        i += 1
    return msgs[:n_messages]


def million_char_planning() -> dict[str, float]:
    msgs = history(2_200, chars=400)  # about 1,000,000 characters of JSON
    nodes = []
    parent = None
    for i, m in enumerate(msgs):
        nodes.append(Node(id=f"m{i}", parent_id=parent, payload=m))
        parent = nodes[-1].id
    chars = sum(len(m.model_dump_json()) for m in msgs)
    branch = Branch(nodes=tuple(nodes))
    start = time.perf_counter()
    plan = plan_compaction(branch, derive_budget(CAPACITY), "manual", capacity=CAPACITY)
    planned = time.perf_counter() - start
    assert isinstance(plan, Plan)
    start = time.perf_counter()
    text = serialize_nodes(plan.newly_old)
    serialised = time.perf_counter() - start
    start = time.perf_counter()
    summarize_extractive(plan)
    summarised = time.perf_counter() - start
    return {"history_chars": chars, "plan_ms": planned * 1000,
            "serialize_ms": serialised * 1000, "serialized_chars": len(text),
            "extractive_summary_ms": summarised * 1000, "chunks": len(plan.chunks)}


def main() -> None:
    results = {
        "machine": f"{platform.machine()} {platform.python_implementation()} "
                   f"{platform.python_version()}",
        "million_chars": million_char_planning(),
        "targets": {"million_chars_ms": 100},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    m = results["million_chars"]
    print("| figure | measured | target |")
    print("| --- | --- | --- |")
    print(f"| plan 1M-char history ({m['history_chars']:,} chars) | {m['plan_ms']:.0f} ms "
          f"| ≤ 100 ms |")
    print(f"| serialise newly-old of it | {m['serialize_ms']:.0f} ms | ≤ 100 ms |")
    print(f"| extractive summary of it | {m['extractive_summary_ms']:.0f} ms | — |")


if __name__ == "__main__":
    main()
