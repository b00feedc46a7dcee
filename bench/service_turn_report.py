"""`bench/results/service_turn*.json` and the varied compaction of `scale*.json` → the
"Service turn" and "Offline summariser on non-repeating history" sections of
docs/benchmarks.md (issue 26; rendered by `bench/docs_report.py`, never typed by hand).

`*_before.json` are the same benchmarks run on the source before issue 26's changes
(`--src` / `PYTHONPATH` pointing at that tree), shown beside the current figures;
`service_turn_previous.json` is the service turn's run before its latest changes.
"""

from __future__ import annotations

from typing import Any

TURN_HEAD = "## Service turn (`bench/service_turn.py` → `bench/results/service_turn.json`)"
FIT_HEAD = ("## Offline summariser on non-repeating history (`bench/scale_bench.py --only "
            "varied` → `bench/results/scale.json`)")


def _met(ok: bool) -> str:
    return "yes" if ok else "**missed**"


def _tps(runs: list[dict[str, Any]]) -> str:
    values = sorted(r["turns_per_second"] for r in runs)
    return f"{values[len(values) // 2]:g}"


def _lat(runs: list[dict[str, Any]]) -> str:
    p50 = sorted(r["p50_ms"] for r in runs)[len(runs) // 2]
    p99 = sorted(r["p99_ms"] for r in runs)[len(runs) // 2]
    return f"{p50:,.0f} / {p99:,.0f}"


# The 200-session load run (bench/service_load.py) before issue 26's store work, kept beside
# the current one: turns/s, send p50 / p99 ms.
LOAD_BEFORE = (6.76, 18586.1, 46646.3)


def _handoffs(data: dict[str, Any]) -> str:
    n = data["backends"].get("sqlite", {}).get("in_process", {}).get("thread_handoffs_per_turn")
    return f" ({n:g} hand-offs a turn, counted in process)" if n is not None else ""


def service_turn_section(data: dict[str, Any] | None,
                         before: dict[str, Any] | None,
                         load_run: dict[str, Any] | None = None,
                         previous: dict[str, Any] | None = None) -> list[str]:
    """The Service turn section: `data` (this run), `before` (the source before issue 26),
    `previous` (the run before this one's changes), `load_run` (the 200-session run)."""
    if data is None:
        return [TURN_HEAD, "", "Not run yet: `python -m bench.service_turn` (needs "
                "PostgreSQL).", ""]
    goals = data["goals"]
    load = data["machine"]
    lines = [
        TURN_HEAD, "",
        f"`contextfold serve` (1 worker, the `{data['model']}` model) against the floor: a "
        "minimal FastAPI app on the same store that appends the user row and the reply row "
        "in one transaction. Clients over real sockets, 1 session, then 8 sessions in "
        f"parallel; {data['rounds']} interleaved rounds, the ratio per round (median, "
        "range). Statements per turn are every statement the driver ran for one turn (BEGIN "
        "included; PostgreSQL sends none), counted in process; CPU ms per turn is the "
        "server process's CPU time, median of turns 2–11 and of the last ten of 60. "
        "The machine has "
        f"{load['cpus']} shared cores (1-minute load average {load['load_average_at_start'][0]} "
        f"at the start, {load['load_average_at_end'][0]} at the end): absolute rates are a "
        "busy box's, and even the ratios swing widely between rounds (the range column); "
        "the statement counts are exact.", "",
        "| database | sessions | turns/s contextfold / floor | ratio (range) | goal "
        f"≥ {goals['floor_ratio']}× | turn p50 / p99 ms | before: turns/s, ratio, p50 / p99 |",
        "| --- | ---: | --- | --- | --- | --- | --- |",
    ]
    for db, table in data["backends"].items():
        for sessions in ("1", "8"):
            row = table[sessions]
            old = (before or {}).get("backends", {}).get(db, {}).get(sessions)
            was = (f"{_tps(old['contextfold'])} / {_tps(old['floor'])}, "
                   f"{old['ratio_median']}×, {_lat(old['contextfold'])}") if old else "—"
            lines.append(
                f"| {db} | {sessions} × {row['turns_each']} turns | {_tps(row['contextfold'])} "
                f"/ {_tps(row['floor'])} | {row['ratio_median']}× "
                f"({row['ratio_range'][0]}–{row['ratio_range'][1]}) | "
                f"{_met(row['ratio_median'] >= goals['floor_ratio'])} | "
                f"{_lat(row['contextfold'])} | {was} |")
    lines += ["", "| database | statements per turn (goal ≤ "
              f"{goals['statements_per_turn']}) | before | CPU ms per turn, turns 2–11 → "
              "last 10 of 60 | before | flat (goal: last ≤ 1.2× first, and statements equal) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for db, table in data["backends"].items():
        cost = table["in_process"]
        old = (before or {}).get("backends", {}).get(db, {}).get("in_process")
        flat = cost["cpu_ms_last_10"] <= goals["flat"] * cost["cpu_ms_turns_2_11"]
        lines.append(
            f"| {db} | {cost['statements_per_turn']:g} "
            f"({_met(cost['statements_per_turn'] <= goals['statements_per_turn'])}) | "
            f"{old['statements_per_turn'] if old else '—'} | {cost['cpu_ms_turns_2_11']} → "
            f"{cost['cpu_ms_last_10']} | "
            + (f"{old['cpu_ms_turns_2_11']} → {old['cpu_ms_last_10']}" if old else "—")
            + f" | {_met(flat)} |")
    lines += ["", "Where the statements go now (per turn, both databases): one read of the "
              "session row with its compaction lease (no BEGIN; PostgreSQL in autocommit, so no "
              "COMMIT either); the user message's append and the reply's, one statement each "
              "sent outside a transaction (the node with its recall rows and the guarded leaf "
              "move with its log row: every check it needs was remembered, and one statement "
              "is atomic on its own; when the guess fails it runs again in a transaction, "
              "reading what it needs); the state the reply reports uses the lease that first "
              "read found (no second read). Each "
              "store instance remembers what it read or wrote: nodes and recall places never "
              "change, and the session row is a guess the guarded leaf move proves. The writes "
              "are folded, not dropped: PostgreSQL uses a data-modifying CTE whose inserts all "
              "hang off the guarded update, SQLite a connection's temp view with an INSTEAD OF "
              "trigger. On SQLite a statement is at most one hand-off to aiosqlite's thread "
              "instead of four (open a cursor, execute, fetch, close), and those of a turn "
              "none: a statement on its own (the point read, a remembered append) is tried in "
              "the event loop's thread without a busy wait and goes to the driver's thread "
              "only when another process holds the lock; no rollback is sent with no "
              "transaction open" + _handoffs(data) + "; on PostgreSQL no BEGIN or "
              "COMMIT is sent around the one-statement reads and appends (each was a round "
              "trip of its own), and the event hub joins a streamed reply's deltas into one "
              "notification, sends a batch as one JSON array and drops its own notifications "
              "unread (the offline reply is 18 deltas: 18 notifications were sent and read "
              "back). `tests/server/test_server_turn_cost.py` asserts the exact statement counts "
              "and their order; the tail is not re-read while `(leaf_id, branch_revision)` is "
              "unchanged.", ""]
    if previous is not None:
        old_rows = []
        for db, table in previous["backends"].items():
            cost = table["in_process"]
            old_rows.append(f"{db} {cost['statements_per_turn']:g} statements, "
                            f"{cost['cpu_ms_turns_2_11']} ms CPU per turn, ratios "
                            f"{table['1']['ratio_median']}× / {table['8']['ratio_median']}× "
                            "(1 / 8 sessions)")
        lines += ["The previous run (1-minute load average "
                  f"{previous['machine']['load_average_at_start'][0]}): "
                  + "; ".join(old_rows) + ".", ""]
    profiled = {db: t["profile"] for db, t in data["backends"].items() if "profile" in t}
    if profiled:
        lines += ["Where a turn's time goes: a cProfile of "
                  f"{next(iter(profiled.values()))['turns']} in-process turns per database "
                  "(`python -m bench.service_turn --profile N` prints it; wall time with "
                  "the profiler's overhead, client and server in one process; own time leaves "
                  "out the event loop's idle poll). A wait for the database or for aiosqlite's "
                  "thread counts where it happens (SQLite's hand-off shows as "
                  "`SimpleQueue.put_nowait`: the wake-up of the driver's thread on a busy "
                  "box).", "",
                  "| database | top functions, own ms per turn | contextfold's functions, own "
                  "ms per turn |", "| --- | --- | --- |"]
        for db, prof in profiled.items():
            own = "; ".join(f"`{w}` {ms:g}" for w, ms in prof["own_ms_per_turn"][:8])
            ours = "; ".join(f"`{w}` {ms:g}" for w, ms in
                             prof.get("contextfold_own_ms_per_turn", [])[:8])
            lines.append(f"| {db} | {own} | {ours} |")
        lines.append("")
    low = [f"{db} {s}" for db, t in data["backends"].items() for s in ("1", "8")
           if t[s]["ratio_median"] < goals["floor_ratio"]]
    if low:
        lines += ["Still missed: turns/s ≥ 0.5× the floor's (" + ", ".join(low) + "): the "
                  "floor is one transaction and no runtime; a turn is two appends and two "
                  "reads plus the runtime's projection, estimate, gauge and events ("
                  + " / ".join(f"{t['in_process']['cpu_ms_turns_2_11']} ms on {db}"
                               for db, t in data["backends"].items())
                  + " of CPU per turn). What is left is the database's own round trips and "
                  "the driver machinery around them (the profile above), and the lease read "
                  "after the turn, kept so the reply's state sees a compaction another worker "
                  "started meanwhile. A row whose median is within its range's swing of 0.5× "
                  "can change verdict between runs of the same code on this box.", ""]
    growing = [db for db, t in data["backends"].items()
               if t["in_process"]["cpu_ms_last_10"] > goals["flat"] *
               t["in_process"]["cpu_ms_turns_2_11"]]
    if growing:
        lines += ["Per-turn CPU grew over 60 turns on " + ", ".join(growing) + " in this "
                  "run (the statements are flat; read it as the box's noise unless it "
                  "repeats).", ""]
    if load_run is not None:
        send = load_run["send_ms"]
        lines += [f"Beside it, the {load_run['sessions']}-session load run (Service under "
                  f"load, below: {load_run['workers']} workers, {load_run['database']}, a "
                  f"killed worker): {load_run['turns_per_second']} turns/s, send p50 / p99 "
                  f"{send['p50']:,.0f} / {send['p99']:,.0f} ms, invariants "
                  f"{'clean' if load_run['audit']['invariants_ok'] else '**broken**'}; "
                  f"before the folded writes {LOAD_BEFORE[0]} turns/s, "
                  f"{LOAD_BEFORE[1]:,.0f} / {LOAD_BEFORE[2]:,.0f} ms.", ""]
    return lines


def _varied_rows(data: dict[str, Any] | None, label: str) -> list[str]:
    rows = []
    for _size, r in sorted(((data or {}).get("cli_compact_varied") or {}).items(),
                          key=lambda kv: int(kv[0])):
        rows.append(f"| {label} | {r['messages']:,} ({r['file_mb']} MB) | "
                    f"{r['import']['seconds']} s | {r['compact']['seconds']} s | "
                    f"{r['time_ratio']}× | {_met(r['time_ratio'] <= 2.0)} | "
                    f"{r['compact_result']['summarized_messages']:,} → "
                    f"{r['compact_result']['tokens_after']:,} tokens |")
    return rows


# The compaction's stages, found in a profile by module and function (not line).
_STAGES = (("store/sql/loading.py", "load_tail", "loading the branch"),
           ("core/planning/planner.py", "plan_compaction", "planning"),
           ("summarize/extractive_fit.py", "fit_sections", "fitting the sections"),
           ("summarize/retention.py", "check_summary", "the summary's retention check"),
           ("core/text/text_estimate.py", "estimate_text", "token estimates (within the others)"))


def _stages(prof: dict[str, Any]) -> str:
    total = prof["profiled_seconds"]
    found = []
    for module, name, label in _STAGES:
        for r in prof.get("top_cumulative_contextfold", []):
            where, _, func = r["function"].partition(" ")
            if where.split(":")[0].endswith(module) and func == name:
                found.append(f"{label} {100 * r['cumulative_s'] / total:.0f}%")
                break
    return ("Where the time goes (cumulative, of the profiled run; stages overlap): "
            + ", ".join(found) + ".") if found else ""


def _profile_rows(data: dict[str, Any] | None) -> tuple[str, list[str]]:
    """The largest varied size's compaction profile (`--profile`): its size and rows."""
    runs = ((data or {}).get("cli_compact_varied") or {})
    sized = [(int(k), v["profile"]) for k, v in runs.items() if v.get("profile")]
    if not sized:
        return "", []
    size, prof = max(sized, key=lambda kv: kv[0])
    total = prof["profiled_seconds"]
    rows = [f"| `{r['function']}` | {r['calls']:,} | {r['own_s']:.1f} s "
            f"({100 * r['own_share']:.0f}%) | {r['cumulative_s']:.1f} s | "
            + (f"`{r['main_caller']}`" if r.get("main_caller") else "-") + " |"
            for r in prof["top_own_time"][:10]]
    ours = [f"| `{r['function']}` | {r['calls']:,} | {r['cumulative_s']:.1f} s |"
            for r in prof.get("top_cumulative_contextfold", [])
            if r["cumulative_s"] < 0.95 * total][:12]
    return f"{size:,}", [
        f"Profile of the {size:,}-message compaction (`--profile`: the same `contextfold "
        f"compact` under cProfile, on a copy of the imported database; {total:,.0f} s under "
        "the profiler), by own time, with the caller that spent most of it:", "",
        "| function | calls | own time | cumulative | main caller |",
        "| --- | ---: | ---: | ---: | --- |", *rows, "",
        "contextfold's functions by cumulative time (below the command itself):", "",
        "| function | calls | cumulative |", "| --- | ---: | ---: |", *ours, "",
        _stages(prof), ""]


def varied_fit_section(data: dict[str, Any] | None, before: dict[str, Any] | None,
                       fit_only: dict[str, Any] | None = None) -> list[str]:
    """Issue 26's non-repeating compaction: `before` any of it was linear, `fit_only` with
    the fit's trims linear (the check and the estimate not yet), and now."""
    rows = (_varied_rows(before, "before") + _varied_rows(fit_only, "fit's trims linear")
            + _varied_rows(data, "now"))
    if not rows:
        return [FIT_HEAD, "", "Not run yet: `python -m bench.scale_bench --only varied`.", ""]
    now = ((data or {}).get("cli_compact_varied") or {})
    missed = [f"{int(k):,} messages ({v['time_ratio']}×)" for k, v in now.items()
              if v["time_ratio"] > 2.0]
    goal = ("Goal (issue 26): compact ≤ 2× the import time of the same file at 20,000 and "
            "100,000 messages: " + (f"**missed** at {', '.join(missed)}. " if missed else
                                    "met at every size. "))
    ratios = sorted(((int(k), v) for k, v in now.items()), key=lambda kv: kv[0])
    growth = ""
    if len(ratios) >= 2:
        (n0, r0), (n1, r1) = ratios[0], ratios[-1]
        grew_import = r1['import']['seconds'] / r0['import']['seconds']
        grew_compact = r1['compact']['seconds'] / r0['compact']['seconds']
        growth = (f"From {n0:,} to {n1:,} messages ({n1 / n0:.0f}× the messages) the import "
                  f"took {grew_import:.1f}× longer and the compaction {grew_compact:.1f}× "
                  "longer" + (": the compaction still grows faster than the history. "
                              if grew_compact > 1.25 * n1 / n0 else
                              ": the compaction grows in proportion to the history. "))
    _size, profile = _profile_rows(data)
    return [
        FIT_HEAD, "",
        "`contextfold import` then `contextfold compact --context-window 128000` of a "
        "session whose messages do not repeat (`bench/varied_data.py`: varied prose, ~10% "
        "Japanese, tool results of 200–5,000 characters), each in its own process, wall "
        "time (`python -m bench.scale_bench --only varied --profile`; `--varied-sizes` picks "
        "the sizes). The offline summariser's fit used to re-scan every item on each trim "
        "(quadratic in the distinct facts); it now keeps each list's state as items go. "
        "That left the compaction superlinear (the *fit's trims linear* rows): each fit "
        "re-estimated the whole summary after every trim and every shortened item, the "
        "retention check (S6) fitted the summary again on each of its attempts (dozens "
        "here), "
        "normalising every summary item once per required item, and repeated tool calls "
        "were counted by a scan of the list. Now a `LineCounter` re-measures a text from "
        "its lines' remembered counts (exact: no count of the estimate spans a line break), "
        "the check normalises each text once and finds an item's holder by one search per "
        "section, the ledger's bisection measures unvalidated trial ledgers, and each "
        "identifier scanner skips a text that lacks what its pattern must match. Same "
        "output: the checkpoint of 5,000, 20,000 and 50,000-message histories is the one "
        "the code before gave, byte for byte (`tests/summarize/test_offline_compaction_linear.py` "
        "pins 2,000-message ones and compares each new helper with the one it replaced). "
        "The runs were not "
        "interleaved, on a shared box: read each ratio within its own run. The import has "
        "become much faster since the *before* run, so the same compaction is now a larger "
        "multiple of it. The repeated-session figures are in the Scale section above.", "",
        "| code | messages | import | compact | compact ÷ import | goal ≤ 2× | folded |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
        *rows, "", goal + growth, "", *profile]
