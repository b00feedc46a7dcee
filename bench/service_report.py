"""`bench/results/service_load.json` -> the "Service under load" section of
docs/benchmarks.md (rendered by `bench/docs_report.py`; figures are never typed by hand)."""

from __future__ import annotations

from typing import Any

HEAD = ("## Service under load and a killed worker (`bench/service_load.py` → "
        "`bench/results/service_load.json`)")


def service_section(data: dict[str, Any] | None) -> list[str]:
    if data is None:
        return [HEAD, "", "Not run yet: `python -m bench.service_load` (needs PostgreSQL).", ""]
    audit = data["audit"]
    fault = data.get("fault") or {}
    failures = ", ".join(f"{k} × {v}" for k, v in sorted(data["failures"].items())) or "none"
    replaced = fault.get("replacement_seconds")
    verdict = "clean" if audit["invariants_ok"] and not audit["cross_tenant_rows"] \
        else "**violated**"
    lines = [
        HEAD, "",
        f"{data['sessions']} sessions × {data['turns_per_session']} turns, all concurrent, "
        f"against `contextfold serve --workers {data['workers']} --auth` on "
        f"{data['database']} with the `{data['model']}` model and a "
        f"{data['context_window']:,}-token window (so sessions compact), "
        f"{data['tenants']} tenants. One worker was SIGKILLed after "
        f"{fault.get('killed_after_turns', '?')} acknowledged turns; uvicorn's supervisor "
        + (f"had a new one serving {replaced} s later. " if replaced is not None
           else "did not replace it. ")
        + "Every send carried an `Idempotency-Key`; a send whose answer was lost (its worker "
        "was killed) or that was told to wait (503 / 429 / 409 `in_progress`, honouring "
        "Retry-After) was sent again with the same key, up to 8 attempts. The machine has "
        f"{data['cpus']} shared cores (1-minute load average "
        f"{data['load_average_at_start'][0]} at the start of the run, "
        f"{data['load_average_at_end'][0]} at the end): latencies are what a busy small box "
        "gives, not a target.", "",
        "| figure | value |", "| --- | --- |",
        f"| acknowledged turns | {data['acknowledged_turns']:,} of "
        f"{data['attempted_turns']:,} planned |",
        f"| sessions cut short by the {data.get('max_seconds', 0):,.0f} s time bound | "
        f"{data.get('sessions_stopped_by_time_bound', 0)} |",
        f"| throughput | {data['turns_per_second']} turns/s over "
        f"{data['elapsed_seconds']} s |",
        f"| send (POST …/messages), p50 / p99 | {data['send_ms']['p50']:,.0f} / "
        f"{data['send_ms']['p99']:,.0f} ms |",
        f"| size check (GET /v1/sessions/{{id}}: re-read, estimate, gauge), p50 / p99 | "
        f"{data['size_check_ms']['p50']:,.0f} / {data['size_check_ms']['p99']:,.0f} ms |",
        f"| compactions committed (checkpoints) | {audit['checkpoints']:,} |",
        f"| failed requests (kind × count) | {failures} |",
        f"| sends retried by the client | {data['retried_sends']} |",
        f"| retries answered with the stored turn (`replayed`) | {data['replayed_sends']} |",
        f"| sessions stopped by a send that failed every attempt | "
        f"{data['sessions_stopped_by_failed_send']} |",
        f"| acknowledged messages lost | "
        f"{'0' if audit['invariants_ok'] else 'see problems'} "
        f"(of {audit['counts'].get('acknowledged', 0):,} checked) |",
        f"| acknowledged replies missing | {audit['missing_replies']} |",
        f"| stale checkpoint commits | {'0' if audit['invariants_ok'] else 'see problems'} |",
        f"| cross-tenant rows | {audit['cross_tenant_rows']} |",
        f"| invariant checker | {verdict} |", "",
    ]
    if audit["problems"] or audit["cross_tenant"]:
        lines += ["Problems found:", ""]
        lines += [f"* {p}" for p in audit["problems"] + audit["cross_tenant"]] + [""]
    return lines



def _settled_ratio(run: dict[str, Any]) -> float:
    """After the warm-up: the second half's last tenth of RSS samples against its first."""
    settled = [x["rss_bytes"][0] for x in run["samples"][1:]
               if x["conversations"] > run["conversations"] // 2]
    k = max(1, len(settled) // 10)
    return (sum(settled[-k:]) / k) / (sum(settled[:k]) / k)


SOAK_HEAD = ("## Service memory over many conversations (issue 38, SPEC Y14: "
             "`bench/service_soak.py` → `bench/results/service_soak.json`)")


def service_soak_section(data: dict[str, Any] | None,
                         before: dict[str, Any] | None = None,
                         previous: dict[str, Any] | None = None) -> list[str]:
    """One `contextfold serve` process serving thousands of short conversations, on SQLite
    and on PostgreSQL: its resident memory and a turn's latency over the run, first tenth
    against last, and the second half's slope per finished conversation (the proxy's
    counterpart is `proxy_report.proxy_soak_section`). `before`: the same script's run on
    the code before the worker's cache was bounded by bytes, for comparison; `previous`: the
    last shorter run of this code's predecessor (its figures in one sentence)."""
    lines = [SOAK_HEAD, ""]
    if not data:
        return [*lines, "_not measured yet: run `python -m bench.service_soak`_", ""]
    runs = data["runs"]
    first = next(iter(runs.values()))
    lines += [
        f"`bench/service_soak.py`: one `contextfold serve` process ({data['workers']} worker, "
        f"real HTTP, the `{data['model']}` model, no `--auth`, no rate limit) on each store "
        "serves short conversations one after another (as many as the table says: the run "
        "asked for 100,000 and stopped at the time bound it was given, `--until`), "
        f"{data['clients']} at a time: each creates its session, sends "
        f"{data['turns_per_conversation']} turns of agent-style text that never repeats "
        "(`bench/varied_data.py`: prose, about 10% Japanese, and half the time a pasted tool "
        "output of 200–5,000 characters; its own seed per conversation) and is never heard of "
        f"again. The server's resident set is read every {data['sample_every']} "
        "conversations (the proxy soak's sampling, `bench/proxy_soak.py`); the first and last "
        "tenth of the samples are compared (a ratio above 1 is growth), and the second half's "
        "least-squares slope is what a finished conversation keeps (goal: at most 4 KB). "
        f"The machine has {data['cores']} shared cores, shared with other jobs (the table "
        "gives the 1-minute load average at each run's start and end); the two stores' runs "
        "overlapped each other and the proxy soak's, so each had a fraction of 2 cores. The "
        "server's CPU per conversation was read by `bench/cpu_sampler.py` over the part of "
        "the run the table names (the soak reads it at every sample itself since). The "
        "PostgreSQL run's first try stopped at conversation 1,000: a client reused a "
        "keep-alive connection as uvicorn closed it after 5 idle seconds (connection reset; "
        "no error in the server's log); the clients now drop a connection idle for 2 s "
        "(`proxy_soak.keep_alive_client`), and the run was started again."
        + _still_growing(runs),
        "", *soak_tables(runs, "turns", "turn")]
    lines += [
        "",
        "The worker ran with `--memory-cache "
        f"{data['memory_cache_mib']}` (MiB: its open sessions and the store's write memos, "
        "in one cache bounded by their estimated bytes, least recently used out: "
        "`server/sessions.py`; the default, 256, fills after some five thousand such "
        "conversations and stays flat from there the same way): memory climbs while the "
        "cache fills during the first few hundred conversations, which the whole run's "
        "first / last tenth shows, and what follows is the second half's slope and ratio. "
        "Outside that cache, the offline summariser's memos of the message texts it read "
        "(`summarize/`: typed and pasted parts, statements, constraints, the compared form "
        "of a bullet) are bounded by bytes too (`core.values.held.held_memo`, 4 MB each, least "
        "recently used out), filled within the first half. Until they were (the run of "
        "the same script on the code whose memos were `functools.lru_cache`s of 32,768 or "
        "65,536 texts, bounded by count), a finished conversation kept about 4.8 KB on "
        "either store, and the recall memo counted a sixth of what it held. "
        + _before_sentence(before, runs) +
        "A turn's latency is the `POST /v1/sessions/{id}/messages` round trip as the client "
        "saw it (the offline model answers at once, so it is the service's own work: store "
        "the message, size the context, store the reply; a session whose pasted outputs "
        "outgrow the default window compacts, hence the checkpoints). The first tenth includes the "
        "warm-up (imports, the first connections, the store's first pages). The store grows "
        "by every conversation (a session, its nodes, recall rows and leaf moves are never "
        "deleted), so the latency's last tenth against its first is also a turn's cost on a "
        "store that holds the whole run (see \"Latency against stored history\" below). The "
        "issue's 100,000 conversations would take some "
        f"{100_000 * first['seconds'] / first['conversations'] / 3600:.1f} hours at this run's "
        "rate on this machine, so this run is the part a bench session allows."
        + _previous_sentence(previous),
        ""]
    return lines


def soak_tables(runs: dict[str, Any], unit: str, what: str) -> list[str]:
    """The two tables of a one-process soak per store (`bench/service_soak.py`,
    `bench/proxy_soak.py`): memory (RSS at start, first and last tenth of the samples, the
    second half's ratio and least-squares slope per finished conversation) and latency
    (first and last tenth of the windows' p50 and p95, the p50's slope over the run). `unit`:
    the run's key counting its requests (`turns`, `requests`); `what`: one of them."""
    lines = [
        f"| store | conversations ({unit}) | wall time | load (1 min) start / end | RSS at "
        "start | RSS first tenth | RSS last tenth | last / first (2nd half's last / first "
        "tenth) | kept per conversation (2nd half) | goal met | log errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name, run in runs.items():
        p = run["per_process"][0]
        load = f"{run['load_average_at_start']} / {run['load_average_at_end']}" \
            if "load_average_at_start" in run else "n/a"
        lines.append(
            f"| {name} | {run['conversations']:,} ({run[unit]:,}) | {run['seconds']:,.0f} s "
            f"| {load} | {p['rss_start_mb']} MB | {p['rss_first_decile_mb']} MB | "
            f"{p['rss_last_decile_mb']} MB | {p['rss_ratio_last_first']:.3f} "
            f"({_settled_ratio(run):.3f}) | "
            f"{p['retained_bytes_per_conversation']:,} B | "
            f"{'met' if run['meets_goal'] else '**missed**'} | {run['log_errors']} |")
    stored = all("stored" in run for run in runs.values())
    lines += [
        "",
        f"| store | {what} p50: first / last tenth (ratio) | {what} p95: first / last tenth "
        "(ratio) | p50 slope per 1,000 conversations | server CPU per conversation: first / "
        "last tenth (ratio)" + (" | sessions / checkpoints stored |" if stored else " |"),
        "|---|---:|---:|---:|---:|" + ("---:|" if stored else "")]
    for name, run in runs.items():
        lines.append(
            f"| {name} | {run['p50_ms_first_decile']} / {run['p50_ms_last_decile']} ms "
            f"({run['p50_ratio_last_first']:.2f}) | {run['p95_ms_first_decile']} / "
            f"{run['p95_ms_last_decile']} ms ({run['p95_ratio_last_first']:.2f}) | "
            f"{run['p50_slope_ms_per_1000_conversations']} ms | {_cpu_cell(run)} |" +
            (f" {run['stored']['sessions']:,} / {run['stored']['checkpoints']:,} |"
             if stored else ""))
    return lines


def _cpu_cell(run: dict[str, Any]) -> str:
    """The server's CPU per conversation, first tenth against last: of the whole run (the
    soak read it at every sample), else of the part `bench/cpu_sampler.py` watched."""
    cpu = run if "cpu_ratio_last_first" in run else run.get("cpu_sampled")
    if not cpu:
        return "not read"
    part = "" if cpu is run else (f" (conversations {cpu['from_conversations']:,}–"
                                  f"{cpu['to_conversations']:,})")
    return (f"{cpu['cpu_ms_per_conversation_first_decile']} / "
            f"{cpu['cpu_ms_per_conversation_last_decile']} ms "
            f"({cpu['cpu_ratio_last_first']:.2f}){part}")


def _still_growing(runs: dict[str, Any]) -> str:
    """A sentence for the stores whose memory still grew in the second half by more than
    1 KB per conversation (within the 4 KB goal, but not flat yet)."""
    grew = {name: run["per_process"][0]["retained_bytes_per_conversation"]
            for name, run in runs.items()
            if run["per_process"][0]["retained_bytes_per_conversation"] > 1024}
    if not grew:
        return ""
    which = "; ".join(f"{name}: {kept:,} B per conversation" for name, kept in grew.items())
    return (f" Memory still rose in the second half ({which}, within the goal): a longer "
            "run would show whether it levels off.")


def _previous_sentence(previous: dict[str, Any] | None) -> str:
    """The previous, shorter run of the same script (`service_soak_previous.json`)."""
    if not previous:
        return ""
    figures = "; ".join(
        f"{name}: {run['conversations']:,} conversations in {run['seconds']:,.0f} s, "
        f"{run['per_process'][0]['retained_bytes_per_conversation']:,} B kept per "
        f"conversation, turn p50 first / last tenth {run['p50_ms_first_decile']} / "
        f"{run['p50_ms_last_decile']} ms" for name, run in previous["runs"].items())
    return (" The previous run (`bench/results/service_soak_previous.json`, the same code "
            f"but for issue 38's last changes, a quieter machine): {figures}.")


def _before_sentence(before: dict[str, Any] | None, runs: dict[str, Any]) -> str:
    """The same script's figures on the code that kept up to a count of sessions open."""
    if not before:
        return ""
    cap = before.get("live_sessions_cap")
    what = f"kept up to {cap:,} idle sessions open, a bound by count" if cap else \
        "had no cache bounded by bytes"
    figures = "; ".join(
        f"{name}: {run['conversations']:,} conversations, "
        f"{run['per_process'][0]['retained_bytes_per_conversation']:,} B kept per "
        f"conversation, RSS {run['per_process'][0]['rss_end_mb']} MB at the end, "
        f"second half's ratio {_settled_ratio(run):.3f}"
        for name, run in before["runs"].items() if name in runs)
    return (f"Before (`bench/results/service_soak_before.json`: the same script on the "
            f"code whose worker {what}, and whose store memos were bounded by count): "
            f"{figures}. ")
