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
        + _retry_sentence(data) + f" The machine has {data['cpus']} shared cores "
        f"({_load(data)}): latencies are what a busy small box gives, not a target.", "",
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
        *([f"| retries answered with the stored turn (`replayed`) | {data['replayed_sends']} |",
           f"| sessions stopped by a send that failed every attempt | "
           f"{data.get('sessions_stopped_by_failed_send', 0)} |"]
          if "replayed_sends" in data else []),
        f"| acknowledged messages lost | "
        f"{'0' if audit['invariants_ok'] else 'see problems'} "
        f"(of {audit['counts'].get('acknowledged', 0):,} checked) |",
        f"| acknowledged replies missing | {audit['missing_replies']} |",
        f"| stale checkpoint commits | {'0' if audit['invariants_ok'] else 'see problems'} |",
        f"| cross-tenant rows | {audit['cross_tenant_rows']} |",
        f"| invariant checker | {verdict} |", "",
    ]
    dup = [p for p in audit["problems"] if " is stored " in p and p.endswith(" times")]
    if dup and len(dup) == len(audit["problems"]) and "replayed_sends" not in data:
        lines += [
            "What the checker flagged: acknowledged user messages stored twice. The results "
            "file keeps the first 20 problems and all of them are of this kind (so this run "
            "does not show whether any other kind occurred; no acknowledged reply is missing). "
            "A send whose answer never arrived (its worker was killed, or it failed with a 500 "
            "after the message was stored) was sent again by the client, and the service has "
            "no idempotency key yet, so the retry stored a second copy. The 500s are the "
            "database connection pool of a worker (SQLAlchemy's default 5 + 10) timing out "
            "after 30 s with 200 concurrent sessions on this overloaded machine: they "
            "should be a 503 with Retry-After and the pool sized for the workers' "
            "concurrency (open work).", ""]
    if audit["problems"] or audit["cross_tenant"]:
        lines += ["Problems found:", ""]
        lines += [f"* {p}" for p in audit["problems"] + audit["cross_tenant"]] + [""]
    return lines


def _retry_sentence(data: dict[str, Any]) -> str:
    if "replayed_sends" not in data:  # runs before idempotent sends
        return "A send that failed with its worker was retried once by the client."
    return ("Every send carried an `Idempotency-Key`; a send whose answer was lost (its "
            "worker was killed) or that was told to wait (503 / 429 / 409 `in_progress`, "
            "honouring Retry-After) was sent again with the same key, up to 8 attempts.")


def _load(data: dict[str, Any]) -> str:
    end = data["load_average_at_end"][0]
    start = data.get("load_average_at_start")
    if start is None:
        return f"load average {end} at the end of the run"
    return f"1-minute load average {start[0]} at the start of the run, {end} at the end"
