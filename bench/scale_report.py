"""`bench/results/scale.json` -> the "Scale through the public paths" section of
docs/benchmarks.md (rendered by `bench/docs_report.py`; figures are never typed by hand)."""

from __future__ import annotations

from typing import Any


def _range(x: dict[str, float], digits: int = 2) -> str:
    return f"{x['median']:.{digits}f} ({x['min']:.{digits}f}–{x['max']:.{digits}f})"


def _met(ok: bool) -> str:
    return "yes" if ok else "**missed**"


def _fit_rows(d: dict[str, Any]) -> list[str]:
    f, goals = d["fit_check"], d["goals"]
    sizes = sorted({int(k.split("/")[0]) for k in d["setup"]})
    rows = []
    for size in sizes:
        for usage in ("usage", "no_usage"):
            key, setup = f"{size}/{usage}", d["setup"][f"{size}/{usage}"]
            rows.append(
                f"| fit check, {setup.get('messages', size):,} messages, "
                f"{'with' if usage == 'usage' else 'without'} usage "
                f"({setup['projected_tokens']:,} projected tokens, {setup['loaded_nodes']} "
                f"nodes loaded) | {_range(f[key]['median_ms'], 3)} ms; "
                f"{_range(f[key]['ms_per_1000_projected_tokens'], 4)} ms per 1,000 tokens "
                "| — | — |")
    small, large = sizes[0], sizes[-1]
    limit = goals["fit_ratio_large_small"]
    for usage in ("usage", "no_usage"):
        r = f["ratio_large_small"][usage]
        rows.append(f"| ratio {large:,} / {small:,}, {'with' if usage == 'usage' else 'without'}"
                    f" usage | {_range(r)} | ≤ {limit} | {_met(r['median'] <= limit)} |")
    limit = goals["no_usage_over_usage_per_1000_tokens"]
    for size in sizes:
        r = f["no_usage_over_usage_per_1000_tokens"][str(size)]
        rows.append(f"| without / with usage, per 1,000 projected tokens, {size:,} messages | "
                    f"{_range(r)} | ≤ {limit} | {_met(r['median'] <= limit)} |")
    e, limit = d["edit_history"], goals["edit_history_ratio"]
    for name, label in (("edit", "`Conversation.edit`"),
                        ("history_page", "`Conversation.history(limit=100)`")):
        ms = e[f"{name}_median_ms"]
        ratio = e[f"{name.split('_')[0]}_ratio"]
        rows.append(f"| {label}, {small:,} / {large:,} messages | {_range(ms[str(small)], 1)} / "
                    f"{_range(ms[str(large)], 1)} ms | — | — |")
        rows.append(f"| {label} ratio {large:,} / {small:,} | {_range(ratio)} | ≤ {limit} | "
                    f"{_met(ratio['median'] <= limit)} |")
    full = e["full_history_s"]
    rows.append(f"| the whole branch, `history()` without a limit, {full['nodes']:,} nodes | "
                f"{full['seconds']} s | — (not a page) | — |")
    return rows


def _cli_rows(d: dict[str, Any]) -> list[str]:
    goals = d["goals"]
    rows = []
    for v in d.get("cli_compact", {}).values():
        r = v["compact_result"]
        rows.append(
            f"| {v['messages']:,} messages ({v['file_mb']} MB) | {v['import']['seconds']} s, "
            f"{v['import']['peak_rss_mb']:,} MB | {v['compact']['seconds']} s, "
            f"{v['compact']['peak_rss_mb']:,} MB ({r['summarized_messages']:,} summarised, "
            f"{r['tokens_before']:,} → {r['tokens_after']:,} tokens) | {v['time_ratio']} "
            f"({_met(v['time_ratio'] <= goals['compact_over_import_time'])}) | "
            f"{v['memory_ratio']} ({_met(v['memory_ratio'] <= goals['compact_over_import_memory'])}"
            ") |")
    return rows


def scale_section(d: dict[str, Any] | None) -> list[str]:
    head = ["## Scale through the public paths (`bench/scale_bench.py` → "
            "`bench/results/scale.json`)", ""]
    if d is None:
        return [*head, "Not run yet: `make bench`.", ""]
    lines = [*head,
             "Real Pi sessions repeated to size (`bench/scale_data.py`); `Conversation` with a "
             "local model that reports provider usage and one that reports none "
             "(`bench/local_model.py`); the `contextfold` command in its own processes. The "
             "fit check is `Conversation.estimate([draft])`, the check before every request, "
             "after a reload (a new branch object, as after every append), on sessions that "
             "were compacted and continued by one turn and end with the same messages at "
             "every size. Sizes are interleaved in rounds; figures are the median over rounds "
             "with the range in brackets. Ratios are taken within a round.", "",
             "| figure | measured | goal | met |", "| --- | --- | --- | --- |",
             *_fit_rows(d), ""]
    if d.get("cli_compact"):
        lines += ["`contextfold import FILE` then `contextfold compact SESSION` (extractive "
                  "summariser), each in its own process; peak memory is the process's "
                  "`ru_maxrss`.", "",
                  "| file | import: time, peak memory | compact: time, peak memory | "
                  "time ratio (goal ≤ 2) | memory ratio (goal ≤ 2) |",
                  "| --- | --- | --- | --- | --- |", *_cli_rows(d), ""]
    send = d.get("send_after_import")
    if send:
        lines += [f"`Conversation.send` right after importing {send['messages']:,} messages "
                  f"without recorded usage (so the whole history must be compacted first), "
                  f"in its own process: {send['open_and_send_s']} s ({send['open_s']} s of it "
                  f"opening the session, which reads the whole uncompacted branch), "
                  f"{send['compactions']} compaction, peak memory "
                  f"{send['send_process']['peak_rss_mb']:,} MB; importing the same file took "
                  f"{send['import']['seconds']} s and {send['import']['peak_rss_mb']:,} MB.", ""]
    b = d.get("bytes_per_message")
    if b:
        lines += ["| bytes per stored message | source file | SQLite | PostgreSQL |",
                  "| --- | ---: | ---: | ---: |",
                  f"| {b['messages']:,} messages | {b['source_bytes_per_message']:,} | "
                  f"{b['sqlite_bytes_per_message']:,} ({b['sqlite_over_source']}×) | "
                  f"{b['postgresql_bytes_per_message']:,} ({b['postgresql_over_source']}×) |",
                  "", "SQLite: the database file and its WAL; PostgreSQL: every table of the "
                  "schema with its indexes and TOAST (`pg_total_relation_size`).", ""]
    return [*lines, f"Machine: {d['machine']}; model {d['model']}.", ""]
