"""Scale benchmarks through the public paths → bench/results/scale.json (issue 13).

Every figure is taken where a user would be: `Conversation` (with a local model that
reports provider usage, and one that reports none), the `contextfold` command in its own
process, and the store through its API. The large histories are real Pi sessions repeated
deterministically (`bench/scale_data.py`).

1. Fit check: `Conversation.estimate([draft])`, the check before every request, on
   sessions of 500 / 5,000 / 50,000 imported messages, compacted (`Conversation.compact`)
   and continued with one `send`. Goals: ratio 50,000 / 500 ≤ 1.2; without usage ≤ 2× the
   with-usage cost per 1,000 projected tokens. Sizes are interleaved in rounds so machine
   noise hits them alike; ratios are per round (median and range).
2. `contextfold import` then `contextfold compact` of 20,000 and 100,000-message files, each
   in its own process (wall time; peak RSS from `os.wait4`). Goals: compact time ≤ 2× and
   peak memory ≤ 2× those of importing the same file.
3. `Conversation.send` on a freshly imported 50,000-message session without recorded usage,
   in its own process (the send compacts first: the history is far over the window).
4. `Conversation.edit` and `Conversation.history(limit=100)` at 500 vs 50,000 messages.
   Goal: ratio ≤ 1.5.
5. Bytes per stored message on SQLite and PostgreSQL against the source file.

Run: `.venv/bin/python -m bench.scale_bench [--quick]` (quick: small sizes, to try it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from contextfold import Conversation, import_file, open_store
from contextfold.core.values.messages import text_message

from .local_model import LocalModel
from .scale_data import CAPACITY, write_session
from .store_bench import drop_pg, pg_url
from .varied_data import write_varied_session

RESULTS = Path(__file__).parent / "results" / "scale.json"
ROOT = Path(__file__).resolve().parent.parent
DRAFT = text_message("user", "Next: port the selector and keep the theme rules we agreed on.")


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# ---------------------------------------------------------------------- sessions


async def imported(store: Any, path: Path, messages: int, usage: bool,
                   same_end_as: int | None = None) -> str:
    """Write a session file, import it through the store API, return the session id."""
    write_session(path, messages, usage=usage, same_end_as=same_end_as)
    result = import_file(path)
    info = await store.import_tree(result.nodes, result.leaf_id, title=path.name,
                                   metadata=result.metadata)
    return info.id


async def continued(store: Any, sid: str, usage: bool) -> Conversation:
    """Open the imported session, compact it, continue it with one turn: every size then
    has a checkpoint, a kept tail and a turn after it (the usual state of a long session),
    and the latest reply carries usage or not."""
    conv = await Conversation.open(store, sid, model=LocalModel(usage=usage), capacity=CAPACITY)
    await conv.compact()
    await conv.send("Continue where we left off: what is still open?")
    await conv.wait_idle()
    return conv


# ---------------------------------------------------------------------- 1 + 4. in process


async def fit_and_edit(url: str, sizes: list[int], tmp: Path, rounds: int,
                       calls: int) -> dict[str, Any]:
    store = await open_store(url)
    try:
        convs: dict[tuple[int, bool], Conversation] = {}
        setup: dict[str, Any] = {}
        for size in sizes:
            for usage in (True, False):
                started = time.perf_counter()
                sid = await imported(store, tmp / f"fit-{size}-{usage}.jsonl", size, usage,
                                     same_end_as=sizes[0])
                conv = await continued(store, sid, usage)
                convs[(size, usage)] = conv
                setup[f"{size}/{'usage' if usage else 'no_usage'}"] = {
                    "import_and_first_send_s": round(time.perf_counter() - started, 2),
                    "projected_tokens": conv.estimate([DRAFT]).tokens,
                    "estimate_method": conv.estimate([DRAFT]).method,
                    "loaded_nodes": len(conv.branch.nodes),
                    "messages": sum(1 for _ in (tmp / f"fit-{size}-{usage}.jsonl").open()) - 1,
                }
        fit: dict[tuple[int, bool], list[float]] = {k: [] for k in convs}
        for _ in range(rounds):
            for key, conv in convs.items():
                samples = []
                for _ in range(calls):
                    await conv.reload()  # a new branch object, as after every append
                    gc.collect()
                    gc.disable()  # as timeit does: a collection of this whole process (its
                    start = time.perf_counter()  # other sessions) is not the check's cost
                    conv.estimate([DRAFT])
                    samples.append(time.perf_counter() - start)
                    gc.enable()
                fit[key].append(statistics.median(samples) * 1000)
        small, large = sizes[0], sizes[-1]
        per_k = {key: [ms / (convs[key].estimate([DRAFT]).tokens / 1000) for ms in values]
                 for key, values in fit.items()}
        fit_out: dict[str, Any] = {
            f"{size}/{'usage' if usage else 'no_usage'}": {
                "median_ms": spread(fit[(size, usage)]),
                "ms_per_1000_projected_tokens": spread(per_k[(size, usage)]),
            } for size, usage in convs}
        fit_out["ratio_large_small"] = {
            ("usage" if usage else "no_usage"): spread(
                [b / a for a, b in zip(fit[(small, usage)], fit[(large, usage)], strict=True)])
            for usage in (True, False)}
        fit_out["no_usage_over_usage_per_1000_tokens"] = {
            str(size): spread([n / u for u, n in zip(per_k[(size, True)], per_k[(size, False)],
                                                      strict=True)]) for size in sizes}

        edits: dict[int, list[float]] = {s: [] for s in (small, large)}
        pages: dict[int, list[float]] = {s: [] for s in (small, large)}
        for _ in range(rounds):
            for size in (small, large):
                conv = convs[(size, True)]
                e, h = [], []
                for i in range(max(3, calls // 8)):
                    start = time.perf_counter()
                    await conv.edit(f"Continue where we left off (take {i}): what is open?")
                    e.append(time.perf_counter() - start)
                    await conv.wait_idle()
                for _ in range(calls // 2):
                    start = time.perf_counter()
                    await conv.history(limit=100)
                    h.append(time.perf_counter() - start)
                edits[size].append(statistics.median(e) * 1000)
                pages[size].append(statistics.median(h) * 1000)
        compactions = {str(s): len([n for n in (await convs[(s, True)].history(limit=400)).nodes
                                    if n.checkpoint is not None]) for s in (small, large)}
        start = time.perf_counter()
        full = await convs[(large, True)].history()
        full_s = time.perf_counter() - start
        edit_out = {
            "edit_median_ms": {str(s): spread(v) for s, v in edits.items()},
            "history_page_median_ms": {str(s): spread(v) for s, v in pages.items()},
            "edit_ratio": spread([b / a for a, b in zip(edits[small], edits[large],
                                                        strict=True)]),
            "history_ratio": spread([b / a for a, b in zip(pages[small], pages[large],
                                                           strict=True)]),
            "full_history_s": {"nodes": len(full.nodes), "seconds": round(full_s, 2)},
            "checkpoints_in_last_400_nodes": compactions,
        }
        for conv in convs.values():
            await conv.close()
        return {"setup": setup, "fit_check": fit_out, "edit_history": edit_out}
    finally:
        await store.close()


# ---------------------------------------------------------------------- 2 + 3. processes


# Linux keeps a process's peak RSS across exec, and a forked child starts with its parent's
# pages: measured straight from this (large) process, every child would report at least our
# own size. A small launcher process runs the command and reports its child's ru_maxrss.
_LAUNCHER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(f'\\nPEAK_RSS_KB={peak}\\n')\n"
    "sys.exit(code)\n"
)


def measured(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run `cmd` in its own process: wall time, peak RSS (MB, `ru_maxrss`), stdout JSON."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        code = subprocess.call([sys.executable, "-c", _LAUNCHER, *cmd], stdout=out, stderr=err,
                               env=env, cwd=ROOT)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}): {text}{errors[-2000:]}")
    peak_kb = int(errors.rsplit("PEAK_RSS_KB=", 1)[1].split()[0])
    return {"seconds": round(wall, 2), "peak_rss_mb": round(peak_kb / 1024, 1),
            "result": json.loads(text.strip().splitlines()[-1])}


def _short(func: tuple[str, int, str]) -> str:
    """A pstats function key as `package/module.py:line name` (the standard library's
    module path only)."""
    file, line, name = func
    short = file.split("/site-packages/")[-1].split("/src/")[-1]
    if "/lib/python3" in short:
        short = short.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{short}:{line} {name}"


def top_functions(stats_file: Path, limit: int = 12) -> dict[str, list[dict[str, Any]]]:
    """A cProfile dump's `limit` functions with the most own time (tottime), each with its
    calls, own and cumulative seconds and the caller that spent most of it in them (a C
    method's own time says nothing without it); and contextfold's own functions by
    cumulative time."""
    stats = pstats.Stats(str(stats_file))
    table = stats.stats  # type: ignore[attr-defined]  # set by Stats, not in its stubs
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for func, (_cc, calls, tt, ct, callers) in table.items():
        top_caller = max(callers.items(), key=lambda kv: kv[1][2], default=None)
        rows.append({"function": _short(func), "calls": calls, "own_s": round(tt, 2),
                     "cumulative_s": round(ct, 2),
                     "own_share": round(tt / total, 3) if total else 0.0,
                     "main_caller": _short(top_caller[0]) if top_caller else None})
    own = sorted(rows, key=lambda r: r["own_s"], reverse=True)[:limit]
    ours = sorted((r for r in rows if r["function"].startswith("contextfold/")),
                  key=lambda r: r["cumulative_s"], reverse=True)[:limit * 2]
    return {"top_own_time": own, "top_cumulative_contextfold": ours}


def profiled_compact(db: Path, tmp: Path, sid: str, window_args: list[str]) -> dict[str, Any]:
    """`contextfold compact` under cProfile on a copy of the imported database (taken before
    the timed compaction ran on the original): the same work, profiled, not timed."""
    copy = tmp / "profile.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{db}{suffix}").exists():
            shutil.copyfile(f"{db}{suffix}", f"{copy}{suffix}")
    dump = tmp / "compact.prof"
    env = {**os.environ, "CONTEXTFOLD_DB": f"sqlite:///{copy}"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(dump), "-m", "contextfold",
                    "compact", sid, *window_args, "--json"], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    out = {"profiled_seconds": round(time.perf_counter() - start, 2), **top_functions(dump)}
    for suffix in ("", "-wal", "-shm"):
        Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return out


def cli_compaction(sizes: list[int], tmp: Path, *, varied: bool = False,
                   window: int | None = None, profile: bool = False) -> dict[str, Any]:
    """`varied`: sessions that do not repeat (`bench/varied_data.py`), compacted for
    `window` tokens: every fact distinct, so the offline summariser's fit folds them all.
    `profile`: the largest size's compaction again under cProfile (its top functions)."""
    out: dict[str, Any] = {}
    for size in sizes:
        path = tmp / f"cli-{size}{'-varied' if varied else ''}.jsonl"
        written = write_varied_session(path, size) if varied else write_session(path, size)
        db = tmp / f"cli-{size}.db"
        env = {**os.environ, "CONTEXTFOLD_DB": f"sqlite:///{db}"}
        cf = [sys.executable, "-m", "contextfold"]
        imp = measured([*cf, "import", str(path), "--json"], env)
        sid = imp["result"]["session_id"]
        window_args = ["--context-window", str(window)] if window else []
        profile_this = profile and size == max(sizes)
        if profile_this:  # a copy before the timed compaction changes the database
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{db}{suffix}").exists():
                    shutil.copyfile(f"{db}{suffix}", tmp / f"before-{size}.db{suffix}")
        comp = measured([*cf, "compact", sid, *window_args, "--json"], env)
        out[str(size)] = {
            "messages": written, "file_mb": round(path.stat().st_size / 2**20, 1),
            "import": {k: imp[k] for k in ("seconds", "peak_rss_mb")},
            "compact": {k: comp[k] for k in ("seconds", "peak_rss_mb")},
            "compact_result": {k: comp["result"][k] for k in (
                "status", "summarized_messages", "kept_messages", "tokens_before",
                "tokens_after")},
            "time_ratio": round(comp["seconds"] / imp["seconds"], 2),
            "memory_ratio": round(comp["peak_rss_mb"] / imp["peak_rss_mb"], 2),
        }
        path.unlink()
        if profile_this:
            out[str(size)]["profile"] = profiled_compact(tmp / f"before-{size}.db", tmp, sid,
                                                         window_args)
    return out


def send_after_import(size: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"send-{size}.jsonl"
    # Without usage: the estimate then covers the whole history, which must be compacted
    # (a repeated file's recorded usage would claim its last request was small).
    written = write_session(path, size, usage=False)
    env = {**os.environ, "CONTEXTFOLD_DB": f"sqlite:///{tmp}/send-{size}.db"}
    imp = measured([sys.executable, "-m", "contextfold", "import", str(path), "--json"], env)
    sid = imp["result"]["session_id"]
    send = measured([sys.executable, "-m", "bench.scale_bench", "--send-once", sid], env)
    path.unlink()
    return {"messages": written,
            "import": {k: imp[k] for k in ("seconds", "peak_rss_mb")},
            "send_process": {k: send[k] for k in ("seconds", "peak_rss_mb")},
            **send["result"]}


async def send_once(sid: str) -> None:
    """The child of `send_after_import`: open, send one message, report (stdout JSON)."""
    store = await open_store(os.environ["CONTEXTFOLD_DB"])
    try:
        start = time.perf_counter()
        conv = await Conversation.open(store, sid, model=LocalModel(usage=False),
                                       capacity=CAPACITY)
        opened = time.perf_counter() - start
        result = await conv.send("Continue where we left off: what is still open?")
        total = time.perf_counter() - start
        await conv.close()
    finally:
        await store.close()
    print(json.dumps({"open_s": round(opened, 2), "open_and_send_s": round(total, 2),
                      "compactions": len(result.compactions),
                      "request_tokens": result.request_tokens}))


# ---------------------------------------------------------------------- 5. bytes


async def bytes_per_message(size: int, tmp: Path) -> dict[str, Any]:
    path = tmp / f"bytes-{size}.jsonl"
    written = write_session(path, size)
    source = path.stat().st_size
    out: dict[str, Any] = {"messages": written,
                           "source_bytes_per_message": round(source / written)}
    db = tmp / "bytes.db"
    store = await open_store(f"sqlite:///{db}")
    try:
        await imported(store, path, size, True)
    finally:
        await store.close()
    on_disk = sum(p.stat().st_size for p in tmp.glob("bytes.db*"))
    out["sqlite_bytes_per_message"] = round(on_disk / written)
    url, schema = pg_url()
    try:
        store = await open_store(url)
        try:
            await imported(store, path, size, True)
        finally:
            await store.close()
        admin = os.environ.get("CONTEXTFOLD_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
        with psycopg.connect(admin) as conn:
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,)).fetchone()
        out["postgresql_bytes_per_message"] = round(int(row[0]) / written)
    finally:
        drop_pg(schema)
    out["sqlite_over_source"] = round(out["sqlite_bytes_per_message"]
                                      / out["source_bytes_per_message"], 2)
    out["postgresql_over_source"] = round(out["postgresql_bytes_per_message"]
                                          / out["source_bytes_per_message"], 2)
    path.unlink()
    return out


# ---------------------------------------------------------------------- main


async def main(quick: bool, only: set[str], out: Path | None = None,
               varied_sizes: list[int] | None = None, profile: bool = False) -> None:
    fit_sizes = [500, 2_000] if quick else [500, 5_000, 50_000]
    cli_sizes = [2_000, 5_000] if quick else [20_000, 100_000]
    send_size = 5_000 if quick else 50_000
    rounds, calls = (3, 20) if quick else (5, 40)
    report: dict[str, Any] = {
        "generated_by": "bench/scale_bench.py" + (" --quick" if quick else ""),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, "
                   f"{platform.python_implementation()} {platform.python_version()}",
        "model": CAPACITY.model,
        "goals": {"fit_ratio_large_small": 1.2, "no_usage_over_usage_per_1000_tokens": 2.0,
                  "compact_over_import_time": 2.0, "compact_over_import_memory": 2.0,
                  "edit_history_ratio": 1.5},
    }
    target = out or (RESULTS.with_name("scale-quick.json") if quick else RESULTS)
    target.parent.mkdir(parents=True, exist_ok=True)
    if only and target.exists():  # rerun some parts, keep the others' figures
        report = {**json.loads(target.read_text()), **report}

    def save() -> None:  # after every part: a long run that fails later keeps what it has
        target.write_text(json.dumps(report, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if not only or "fit" in only:
            print("fit check, edit, history ...", file=sys.stderr)
            report.update(await fit_and_edit(f"sqlite:///{tmp}/fit.db", fit_sizes, tmp, rounds,
                                             calls))
            save()
        if not only or "bytes" in only:
            print("bytes per message ...", file=sys.stderr)
            report["bytes_per_message"] = await bytes_per_message(cli_sizes[0], tmp)
            save()
        if not only or "send" in only:
            print("send after import ...", file=sys.stderr)
            report["send_after_import"] = send_after_import(send_size, tmp)
            save()
        if not only or "cli" in only:
            print("import / compact on the command line ...", file=sys.stderr)
            report["cli_compact"] = cli_compaction(cli_sizes, tmp)
            save()
        if "varied-profile" in only:  # the profile alone, beside the timed figures kept
            size = max(varied_sizes or [100_000])
            print(f"profile of the compaction of a non-repeating {size:,} ...", file=sys.stderr)
            path = tmp / f"profile-{size}.jsonl"
            write_varied_session(path, size)
            db = tmp / f"profile-{size}.db"
            env = {**os.environ, "CONTEXTFOLD_DB": f"sqlite:///{db}"}
            imp = measured([sys.executable, "-m", "contextfold", "import", str(path), "--json"],
                           env)
            varied = report.setdefault("cli_compact_varied", {}).setdefault(str(size), {})
            varied["profile"] = profiled_compact(db, tmp, imp["result"]["session_id"],
                                                 ["--context-window", "128000"])
            save()
        if "varied" in only:  # issue 26: non-repeating histories, a 128k window
            sizes = varied_sizes or ([2_000] if quick else [20_000, 100_000])
            print(f"import / compact of non-repeating sessions {sizes} ...", file=sys.stderr)
            report["cli_compact_varied"] = cli_compaction(sizes, tmp, varied=True,
                                                          window=128_000, profile=profile)
            save()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (minutes)")
    parser.add_argument("--only", default="",
                        help="comma-separated parts: fit,bytes,send,cli; varied and "
                             "varied-profile (the largest varied compaction's profile alone) "
                             "only when named")
    parser.add_argument("--out", type=Path, help="results file (default: bench/results/)")
    parser.add_argument("--varied-sizes", default="",
                        help="comma-separated message counts for `varied` "
                             "(default 20000,100000; quick: 2000)")
    parser.add_argument("--profile", action="store_true",
                        help="varied: profile the largest size's compaction (cProfile, "
                             "a second run on a copy; its top functions in the results)")
    parser.add_argument("--send-once", metavar="SESSION", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.send_once:
        asyncio.run(send_once(args.send_once))
    else:
        asyncio.run(main(args.quick, {p for p in args.only.split(",") if p}, args.out,
                         [int(n) for n in args.varied_sizes.split(",") if n], args.profile))
