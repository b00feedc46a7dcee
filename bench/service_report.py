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

