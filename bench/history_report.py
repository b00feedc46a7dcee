"""The docs section of `bench/history_latency.py`: a request's cost on an empty store and on
one holding many finished conversations (issue 38: one database, for months)."""

from __future__ import annotations

from typing import Any

HEAD = ("## Latency against stored history (issue 38: `bench/history_latency.py` → "
        "`bench/results/history_latency.json`)")


def history_section(data: dict[str, Any] | None) -> list[str]:
    """Per store and face: p50 on the empty and the filled store, the ratio per round, and
    the server's CPU per conversation (the steadier figure on a shared machine)."""
    lines = [HEAD, ""]
    if not data:
        return [*lines, "_not measured yet: run `python -m bench.history_latency`_", ""]
    lines += [
        "A store is filled with finished conversations through the store's API ("
        + "; ".join(f"{store}: {res['filled_store']['sessions']:,} sessions"
                    for store, res in data["stores"].items()) +
        "), shaped as the proxy leaves them (a session with its `proxy` "
        "metadata, eight mirrored messages with their `mirror_index`, recall and leaf-move "
        "rows); then one `contextfold proxy` and one `contextfold serve` process on it and "
        "one of each on an empty store serve the same new short conversations (the proxy "
        "soak's and the service soak's), in "
        f"{data['rounds']} alternating rounds of {data['conversations_per_round']} "
        "conversations. The server's CPU time (its own threads, from the kernel) is the "
        "steadier figure: the wall-clock p50 moves with the machine's load (1-minute load "
        f"average {data['load_average_at_start'][0]} at the start, "
        f"{data['load_average_at_end'][0]} at the end).",
        "",
        "| store | face | p50 empty / filled | p50 ratio per round | CPU per conversation "
        "empty / filled | CPU ratio per round (median) |",
        "|---|---|---:|---|---:|---|"]
    for store, res in data["stores"].items():
        for face in ("proxy", "serve"):
            r = res[face]
            cpu = r["cpu_ms_per_conversation"]
            lines.append(
                f"| {store} | {face} | {r['empty']['p50_ms']} / {r['filled']['p50_ms']} ms | "
                f"{', '.join(f'{x:.2f}' for x in r['p50_ratio_per_round'])} | "
                f"{cpu['empty']} / {cpu['filled']} ms | "
                f"{', '.join(f'{x:.2f}' for x in r['cpu_ratio_per_round'])} "
                f"({r['cpu_ratio_median']:.2f}) |")
    lines += [
        "",
        "A request's cost does not grow with the stored history: each statement the proxy "
        "and `serve` send for a new conversation (and for the next turns of it) was "
        "explained on the filled stores (SQLite `EXPLAIN QUERY PLAN`, PostgreSQL `EXPLAIN` "
        "with the values sent) and reads an index, never a whole table and never a sort; "
        "what is left is the B-trees' depth and the page cache, a few percent of the "
        "server's CPU on SQLite. (The first try of this bench reused a store that already "
        "held the timed conversations of an earlier run: sent again, they returned to their "
        "stored sessions, the dearer path of a conversation its process no longer holds, "
        "2.5× the CPU. The timed conversations are now numbered anew in every run.)"]
    found = data.get("lookups")
    if found:
        lines += [
            "",
            "What did read every session: `contextfold mcp` finding the conversation a client "
            "means (`mcp/which.py`) read the whole `sessions` table on each tool call. It now "
            "reads the newest 200 at a time on the index of migration 0009 and stops at the "
            f"first that settles the answer ({found['store']}, "
            f"{found['sessions']:,} sessions; `--lookups`; before: the code of "
            f"{found['before_commit']}):",
            "",
            "| `which_session` | before | after |",
            "|---|---:|---:|"]
        for key, after in found["after"].items():
            lines.append(f"| {key.removeprefix('which_session ')} | "
                         f"{found['before'][key]:,.0f} ms | {after:,.0f} ms |")
        lines += [
            "",
            "A value nothing matches still reads every page (a directory no session stated, "
            "a label nobody sent, an id prefix given as `session_id`, since labels are "
            "looked for first). Listing every session (`GET /v1/sessions`, `contextfold "
            "sessions`) reads them all and checks each one's tail (SPEC D2)"
            + (f": {found['list_sessions_ms'] / 1000:,.0f} s for this store on the loaded "
               "machine (`store.list_sessions()` alone)" if found.get("list_sessions_ms")
               else "") + ". So `contextfold sessions` reads only the newest 50 (`--limit N`; "
            "`--limit 0` every one) and `GET /v1/sessions?limit=N&before=ID` a page, each one "
            "range of the (created_at, id) index; the page of `contextfold serve` still asks "
            "for the whole listing."]
    return [*lines, ""]
