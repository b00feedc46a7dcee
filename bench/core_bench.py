"""Core benchmarks (issue: core engine): check cost per model call, and 1M-character planning.

Run: `.venv/bin/python -m bench.core_bench` (writes bench/results/core.json, prints a table).

* check cost = projection + estimate + the auto-compaction decision, per model call, on a
  branch with a checkpoint, for 2,000 and 20,000 durable messages. The branch object is
  built fresh (cold caches) before each timed call, outside the timing: building it is the
  store's job and is measured in the store benchmark.
* planning and serialising a 1,000,000-character history: one manual `plan_compaction`
  (boundary, newly-old set, chunking with serialisation), and the extractive summary of it.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

from tests.builders import tool_call, tool_result

from contextfold.core.budget import ModelCapacity, derive_budget
from contextfold.core.estimator import estimate_request
from contextfold.core.messages import Checkpoint, Message, Node, Usage, text_message
from contextfold.core.plan import Plan
from contextfold.core.planner import plan_compaction
from contextfold.core.projection import project
from contextfold.core.serialize import serialize_nodes
from contextfold.core.tree import Branch
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


def checkpointed_nodes(n_messages: int, tail_turns: int = 12) -> list[Node]:
    """n durable messages with a checkpoint keeping the last `tail_turns` turns raw."""
    msgs = history(n_messages)
    nodes: list[Node] = []
    parent = None
    for i, m in enumerate(msgs):
        nodes.append(Node(id=f"m{i}", parent_id=parent, payload=m))
        parent = nodes[-1].id
    first_kept = nodes[len(nodes) - 4 * tail_turns].id
    cp = Checkpoint(summary="## Goal\n" + "summary line\n" * 200, first_kept_id=first_kept,
                    tokens_before=150_000)
    nodes.append(Node(id="cp", parent_id=parent, payload=cp))
    parent = "cp"
    for j, m in enumerate(history(8)):  # a few turns after the checkpoint
        nodes.append(Node(id=f"a{j}", parent_id=parent, payload=m))
        parent = nodes[-1].id
    return nodes


def check_cost(nodes: list[Node], repeats: int = 400) -> dict[str, float]:
    budget = derive_budget(CAPACITY)
    samples = []
    for _ in range(repeats):
        branch = Branch(nodes=tuple(nodes))  # fresh object: no cached indexes
        start = time.perf_counter()
        projection = project(branch)
        estimate = estimate_request(projection, CAPACITY)
        decision = plan_compaction(branch, budget, "auto", capacity=CAPACITY, estimate=estimate)
        samples.append(time.perf_counter() - start)
    assert decision.is_noop  # below the threshold: the common case per call
    samples.sort()
    return {"median_ms": statistics.median(samples) * 1000,
            "p99_ms": samples[int(len(samples) * 0.99) - 1] * 1000}


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
    small = check_cost(checkpointed_nodes(2_000))
    large = check_cost(checkpointed_nodes(20_000))
    results = {
        "machine": f"{platform.machine()} {platform.python_implementation()} "
                   f"{platform.python_version()}",
        "check_cost": {"2000": small, "20000": large,
                       "ratio_median": large["median_ms"] / small["median_ms"]},
        "million_chars": million_char_planning(),
        "targets": {"check_median_ms": 0.5, "check_ratio": 1.5, "million_chars_ms": 100},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    c = results["check_cost"]
    m = results["million_chars"]
    print("| figure | measured | target |")
    print("| --- | --- | --- |")
    print(f"| check cost median, 2,000 msgs | {small['median_ms']:.3f} ms | ≤ 0.5 ms |")
    print(f"| check cost median, 20,000 msgs | {large['median_ms']:.3f} ms | ≤ 0.5 ms |")
    print(f"| ratio 20,000 / 2,000 | {c['ratio_median']:.2f} | ≤ 1.5 |")
    print(f"| plan 1M-char history ({m['history_chars']:,} chars) | {m['plan_ms']:.0f} ms "
          f"| ≤ 100 ms |")
    print(f"| serialise newly-old of it | {m['serialize_ms']:.0f} ms | ≤ 100 ms |")
    print(f"| extractive summary of it | {m['extractive_summary_ms']:.0f} ms | — |")


if __name__ == "__main__":
    main()
