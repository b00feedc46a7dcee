"""The peers bench's timed decision, re-timed in one process: `python -m bench.peers.decision_cost`.

The timing rows (`runner.run_timing`) build a `size`-message session once per round and
time its last `TIMED_CALLS` calls; at 10,000 messages the build takes minutes and the 40
timed calls milliseconds. Here each system's session is built once, exactly as
`run_timing` builds it (sparse checks, then `warmup_calls` dense ones), up to the first
timed call, and the timed calls are replayed on a deep copy of it round after round,
the systems alternating within a round. So a ratio between two systems (or two versions
of the code, run as two processes on the same build rules) is measured on the same state
many times, and both the wall time and the CPU time of the calls are reported: the CPU
time is what the load of a shared machine changes least (issue 40).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from .cf_main import _factories
from .common import call_points, echo_summary
from .run import TIMED_CALLS, TIMED_SETTING, TIMING_SIZES
from .synth import research_session, session_prefix


def build(name: str, msgs: list[Any], warmup_calls: int = 40) -> tuple[Any, int, list[int]]:
    """The system `name` fed and decided up to its first timed call, as `run_timing` does;
    with the index of the messages fed and the timed call points."""
    factory = _factories(name)[0][name]
    system = factory(echo_summary, msgs)
    recall = getattr(getattr(system, "session", None), "auto_recall", None)
    if recall is not None and "apply" in vars(recall):
        del recall.apply  # the bench's own timer of recall: a closure, not copied
    points = call_points(msgs)
    timed_from = max(0, len(points) - TIMED_CALLS)
    # `check_every` as `run._jobs` sets it for this size.
    dense_from, every = max(0, timed_from - warmup_calls), max(1, len(msgs) // 400)
    fed = 0
    for n, k in enumerate(points[:timed_from]):
        if n < dense_from and n % every:
            continue
        system.ingest(msgs[fed:k])
        fed = k
        system.decide()
    return system, fed, points[timed_from:]


def timed(state: tuple[Any, int, list[int]], msgs: list[Any]) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each timed call, on a copy of `state`."""
    system, fed, points = copy.deepcopy(state)
    wall: list[float] = []
    cpu: list[float] = []
    for k in points:
        system.ingest(msgs[fed:k])
        fed = k
        started, started_cpu = time.perf_counter(), time.thread_time()
        system.decide()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return wall, cpu


KINDS_RESULTS = Path(__file__).resolve().parents[1] / "results" / "decision_kinds.json"


def by_kind(state: tuple[Any, int, list[int]], msgs: list[Any], copies: int = 3
            ) -> dict[str, Any]:
    """CPU milliseconds of each timed call by its kind (a tool round, a new turn: the user
    wrote since the last call, or a compaction: the call compacted), each call's median over
    `copies` copies of `state`; what sets the median of the mix."""
    per_call: dict[int, tuple[str, list[float]]] = {}
    for _ in range(copies):
        system, fed, points = copy.deepcopy(state)
        for j, k in enumerate(points):
            new = msgs[fed:k]
            system.ingest(new)
            fed = k
            before = len(system.session.compactions)
            started = time.thread_time()
            system.decide()
            ms = (time.thread_time() - started) * 1000
            kind = ("compaction" if len(system.session.compactions) != before
                    else "new turn" if any(m["role"] == "user" for m in new) else "tool round")
            per_call.setdefault(j, (kind, []))[1].append(ms)
    calls = [(kind, statistics.median(v)) for kind, v in per_call.values()]
    out: dict[str, Any] = {"median_ms": round(statistics.median(ms for _, ms in calls), 3)}
    for kind in ("tool round", "new turn", "compaction"):
        got = sorted(ms for k, ms in calls if k == kind)
        if got:
            out[kind] = {"calls": len(got), "median_ms": round(statistics.median(got), 3),
                         "min_ms": round(got[0], 3), "max_ms": round(got[-1], 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.decision_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000, help="session length (messages)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--systems", nargs="*", default=["contextfold", TIMED_SETTING])
    parser.add_argument("--by-kind", action="store_true",
                        help="time each call by its kind (tool round, new turn, compaction) "
                             f"and write {KINDS_RESULTS.name} for the peers page")
    args = parser.parse_args(argv)
    # The session the bench times: a prefix of the longest one (`run._jobs`).
    msgs = session_prefix(research_session(max(TIMING_SIZES), seed=6), args.size)
    states = {}
    for name in args.systems:
        started = time.perf_counter()
        states[name] = build(name, msgs)
        print(f"{name}: built in {time.perf_counter() - started:.0f} s", flush=True)
    if args.by_kind:
        kinds = {name: by_kind(states[name], msgs) for name in args.systems}
        KINDS_RESULTS.write_text(json.dumps(
            {"size": args.size, "at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
             "load_average": os.getloadavg()[0], "systems": kinds}, indent=2) + "\n",
            encoding="utf-8")
        print(json.dumps(kinds, indent=2))
        return 0
    medians: dict[str, list[tuple[float, float]]] = {name: [] for name in args.systems}
    for r in range(args.rounds):
        for name in args.systems:
            wall, cpu = timed(states[name], msgs)
            medians[name].append((statistics.median(wall) * 1000, statistics.median(cpu) * 1000))
            print(f"round {r} {name}: median {medians[name][-1][0]:.3f} ms wall, "
                  f"{medians[name][-1][1]:.3f} ms CPU", flush=True)
    for name, got in medians.items():
        for i, kind in enumerate(("wall", "CPU")):
            values = [g[i] for g in got]
            print(f"{name}: {kind} median of rounds {statistics.median(values):.3f} ms "
                  f"({min(values):.3f}-{max(values):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
