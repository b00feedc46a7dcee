"""Run one system over the benchmark's tasks; the same code in both venvs (stdlib only).

A *job* (JSON) names the system and its tasks:

* `quality`: a workload file (written by `run.py`): every call point is measured
  (`Recorder`), and the estimator is compared with real token counts where the workload has
  intervals;
* `timing`: a synthetic session of `size` messages; only the last `timed_calls` call points
  are timed (well before them, the system decides every `check_every`-th call, enough to
  keep its state realistic; just before them, at every call).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .common import (
    Neutral,
    Recorder,
    System,
    Tokenizer,
    body_of,
    call_points,
    capped_echo,
    dump,
    echo_summary,
    replay,
    summarize_times,
    summary_limit,
)
from .synth import research_session, session_prefix

# (summarize callback, workload messages) -> system
Factory = Callable[[Callable[[str], str], Sequence[Neutral]], System]
# (messages, recorded model name) -> the system's own token estimate of them
Estimator = Callable[[Sequence[Neutral], str], int]


def load_workload(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if "messages" not in data or "name" not in data:
        raise ValueError(f"{path}: a workload needs 'name' and 'messages'")
    return data


def run_quality(factory: Factory, workload: dict[str, Any], tokens: Tokenizer,
                limit: int | None = None) -> dict[str, Any]:
    """Every figure of one system on one transcript; `limit`: the system's summary cap."""
    recorder = Recorder(tokens, summary_limit=limit)
    msgs = workload["messages"]
    system = factory(recorder.summarize, msgs)
    started = time.perf_counter()
    replay(system, msgs, recorder)
    result = recorder.result()
    # contextfold: exporter repairs, summaries replaced / fitted, automatic recall (SPEC L5)
    for extra in ("repairs", "fallbacks", "fitted", "recall_requests", "recall_tokens",
                  "recall_seconds"):
        if hasattr(system, extra):
            result[f"contextfold_{extra}"] = getattr(system, extra)
    if hasattr(system, "checkpoint_calls"):
        # SPEC Q5: each prefix break attributed to a checkpoint (a request whose checkpoint is
        # not the previous request's) or not; the calls of the others, to find them.
        at = set(system.checkpoint_calls)
        result["prefix_breaks_at_checkpoint"] = sum(b[0] in at for b in recorder.break_calls)
        result["prefix_breaks_elsewhere"] = [
            {"call": c + 1, "kept": kept, "of": of, "last_extended": grew}
            for c, kept, of, grew in recorder.break_calls if c not in at]
    result["wall_seconds"] = round(time.perf_counter() - started, 2)
    return result


def run_timing(factory: Factory, size: int, *, timed_calls: int, check_every: int,
               warmup_calls: int = 40, seed: int = 6,
               session: list[Neutral] | None = None) -> dict[str, Any]:
    """Per-call decision time near the end of a `size`-message synthetic session.

    The last `timed_calls` call points are timed; the `warmup_calls` before them decide at
    every call too, so a backlog from sparse checks is compacted before timing starts.
    """
    # `session`: a longer session of the same seed, generated once by the run (deterministic).
    msgs = session_prefix(session, size) if session else research_session(size, seed=seed)
    system = factory(echo_summary, msgs)
    n_calls = len(call_points(msgs))
    timed_from = max(0, n_calls - timed_calls)
    started = time.perf_counter()
    if getattr(system, "stateless", False):
        # Its decision reads only the messages (no summary, no state carried between
        # calls), so deciding before the timed calls cannot change them: no warm-up.
        warmup_calls, check_every = 0, n_calls + 1
    timings = replay(system, msgs, timed_from_call=timed_from,
                     dense_from_call=max(0, timed_from - warmup_calls), check_every=check_every)
    out = summarize_times([s for _, s in timings])
    out.update(size=size, calls=n_calls, wall_seconds=round(time.perf_counter() - started, 2))
    return out


def estimator_figure(estimate: Estimator, workload: dict[str, Any],
                     tokens: Tokenizer) -> dict[str, Any] | None:
    """How often the estimate of the messages between two model calls is below the truth.

    The truth is the recorded usage delta (the provider's own tokenizer) and, as a second
    reference, the exact `o200k_base` count of the same text. Markers are removed first.
    Each estimator gets the recorded model's name, so one with per-model settings (LangChain's
    Anthropic ratio, contextfold's tokenizer families) is configured as a user of that model
    would have it.
    """
    intervals = workload.get("intervals") or []
    if not intervals:
        return None
    msgs = workload["messages"]
    under_usage = under_o200k = 0
    ratios: list[float] = []
    for iv in intervals:
        chunk = [dict(m, text=body_of(m["text"])) for m in msgs[iv["start"]:iv["end"]]]
        est = estimate(chunk, iv.get("model", ""))
        exact = sum(tokens.count(m["text"]) + sum(tokens.count(json.dumps(c["args"]))
                                                  for c in m["calls"]) for m in chunk)
        under_usage += est < iv["real"]
        under_o200k += est < exact
        ratios.append(est / iv["real"])
    ratios.sort()
    return {
        "intervals": len(intervals),
        "under_count_rate_vs_usage": under_usage / len(intervals),
        "under_count_rate_vs_o200k": under_o200k / len(intervals),
        "median_estimate_over_usage": ratios[len(ratios) // 2],
    }


def run_job(job: dict[str, Any], factories: dict[str, Factory],
            estimators: dict[str, Estimator], describe: dict[str, Any]) -> dict[str, Any]:
    """Run every task of `job` for `job['system']` and write the result to `job['out']`."""
    name = job["system"]
    if name not in factories:
        raise SystemExit(f"unknown system {name!r}; known: {', '.join(sorted(factories))}")
    # Loading o200k takes seconds: only for the runs that count tokens.
    tokens = Tokenizer() if job.get("quality") or job.get("continuity") else None
    out: dict[str, Any] = {"system": name, **describe.get(name, {}),
                           "quality": {}, "timing": [], "estimator": {}}
    for task in job.get("quality", []):
        workload = load_workload(task["path"])
        assert tokens is not None
        out["quality"][workload["name"]] = run_quality(factories[name], workload, tokens,
                                                       summary_limit(name))
        if name in estimators:
            figure = estimator_figure(estimators[name], workload, tokens)
            if figure is not None:
                out["estimator"][workload["name"]] = figure
    for task in job.get("continuity", []):
        from .continuity import planted_session, run_continuity

        # The run writes the planted session once (`path`); generating it takes seconds.
        msgs = (json.loads(Path(task["path"]).read_text(encoding="utf-8")) if "path" in task
                else planted_session(task["size"]))
        started = time.perf_counter()
        # The same fair fake as the quality runs: clipped at the system's own summary cap.
        system = factories[name](capped_echo(summary_limit(name), tokens), msgs)
        out["continuity"] = run_continuity(system, msgs, task["sample_every"])
        out["continuity"]["wall_seconds"] = round(time.perf_counter() - started, 2)
        for extra in ("fallbacks", "fitted", "recall_requests", "recall_tokens",
                      "recall_seconds"):
            if hasattr(system, extra):
                out["continuity"][f"contextfold_{extra}"] = getattr(system, extra)
    session = None
    for task in job.get("timing", []):
        if session is None and "session_path" in task:
            session = json.loads(Path(task["session_path"]).read_text(encoding="utf-8"))
        out["timing"].append(run_timing(factories[name], task["size"],
                                        timed_calls=task["timed_calls"],
                                        check_every=task["check_every"], session=session))
    dump(Path(job["out"]), out)
    return out
