"""The fair continuity section of `docs/peers.md`: probe questions (issue 27 item 7).

Every figure comes from `bench/results/peers.json` through `figures.py`: the probe shares
per bucket and per category, the goals and whether each is met, and what automatic recall
(SPEC L5) costs per request beside the same row without it.
"""

from __future__ import annotations

from typing import Any

from .figures import (
    COLUMN_LABELS,
    COLUMNS,
    is_own,
    l5_cost,
    pct,
    probe_category,
    probe_share,
    probe_targets,
    recall_budget,
)


def _cell(entry: dict[str, Any], bucket: str) -> str:
    b = entry.get("continuity", {}).get("probes", {}).get(bucket)
    v = probe_share(entry, bucket)
    return "-" if v is None else f"{pct(v)} ({b['found']}/{b['asked']})"


def probe_section(results: dict[str, Any], systems: dict[str, Any],
                  names: list[str]) -> list[str]:
    """The section: how the probes are asked, the goals, the tables, the L5 cost."""
    from .continuity import (
        BUCKETS,
        CATEGORIES,
        END_PER_CATEGORY,
        MIN_AGE,
        PROBE_EVERY_TURNS,
    )

    rows = [n for n in names if systems[n].get("continuity", {}).get("probes")]
    if not rows:
        return []
    c = results["settings"].get("continuity", {})
    lines = ["## Fair continuity: probe questions about early facts", "",
             "The same planted session asks about its facts. Each fact is planted in a "
             "sentence with a hook, two words no other message has (e.g. \"amber lantern\"; "
             "the two facts of one message share its hook); before every "
             f"{PROBE_EVERY_TURNS}th user turn a probe turn asks about one fact planted at "
             f"least {MIN_AGE} messages earlier (the question names the hook, never the fact; "
             "the answer is a neutral line that names neither, so nothing is planted again), "
             "alternately the oldest not yet asked and one drawn at random, the categories in "
             f"turn; after the last message a battery asks {END_PER_CATEGORY} more per "
             "category. Each fact is asked at most once. A probe counts when its fact is in "
             "the request the question goes out with (every probe's call is decided, whatever "
             f"the sampling of every {c.get('sample_every', 1)} calls): kept in a summary, "
             "kept raw, or found again by a retrieval step (contextfold's automatic recall, "
             "SPEC L5; no peer row here retrieves by itself). The fake summariser and its "
             "caps are the ones of the section above. Cells: share of the probes asked after "
             "at least K compactions (found/asked); '-' = never that many compactions.", ""]
    lines += ["| goal | met | evidence |", "| --- | --- | --- |"]
    for goal, met, evidence in probe_targets(systems):
        lines.append(f"| {goal} | {'n/a' if met is None else ('yes' if met else '**no**')} "
                     f"| {evidence} |")
    heads = [f">= {b} compactions" if b != "end" else "end battery" for b in BUCKETS]
    lines += ["", "| system | compactions | " + " | ".join(heads) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in BUCKETS) + " |"]
    for name in rows:
        lines.append(f"| {name} | {systems[name]['continuity']['compactions']} | "
                     + " | ".join(_cell(systems[name], b) for b in BUCKETS) + " |")
    lines += _end_battery_note(systems, rows, END_PER_CATEGORY * len(CATEGORIES))
    lines += ["", "Per category (the probes asked after the first compaction and the end "
              "battery together, found/asked):", "",
              "| system | " + " | ".join(CATEGORIES) + " |",
              "| --- | " + " | ".join("---:" for _ in CATEGORIES) + " |"]
    for name in rows:
        cells = []
        for cat in CATEGORIES:
            found, asked = probe_category(systems[name], cat)
            cells.append(f"{found}/{asked}" if asked else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, "", *_recall_budget(systems), *_l5_cost(systems)]


def _share(x: float | None) -> str:
    return "-" if x is None else pct(x)


def _recall_budget(systems: dict[str, Any]) -> list[str]:
    """The recall budget at half the default share (the default before issue 40) and at the
    default (issue 40: the end battery found the smaller budget's blocks full), side by
    side."""
    pairs = recall_budget(systems)
    if not pairs:
        return []
    lines = ["### The recall budget (L5 with Q5)", "",
             "Each row at half the default recall budget (`auto_recall_share` 0.03 of the safe "
             "limit, the default before issue 40) beside the same row at the default (0.06): "
             "the end battery's probes found in "
             "the request that asks, the probes asked during the session (after the first "
             "compaction), the planted facts held in the request at the end, the price on the "
             "quality transcripts under each cache rule set, prefix breaks and compactions.",
             "",
             "| rows (0.03 / 0.06) | end battery | probes during the session | held at the end"
             " | " + " | ".join(f"price, {COLUMN_LABELS[c]}" for c in COLUMNS)
             + " | prefix breaks | compactions |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS)
             + " | ---: | ---: |"]
    for p in pairs:
        cells = [" / ".join(_share(x) for x in p[k]) for k in ("end_battery", "during",
                                                               "held_end")]
        cells += [" / ".join(f"${x:.2f}" for x in p["usd"][c]) for c in COLUMNS]
        cells += [" / ".join(f"{x:,}" for x in p[k]) for k in ("prefix_breaks",
                                                               "compactions")]
        lines.append(f"| {p['rows'][0]} / {p['rows'][1]} | " + " | ".join(cells) + " |")
    return [*lines, "", _recall_budget_verdict(pairs), ""]


def _recall_budget_verdict(pairs: list[dict[str, Any]]) -> str:
    """What the table says about the default (issue 40: the default became twice the former
    0.03 when the end battery rose for a small price). The prices are the cost model's over
    fixed transcripts, so a difference between the two rows is the setting's, not noise."""
    dearer = [p for p in pairs if any(b > a for a, b in p["usd"].values())]
    held_less = [p for p in pairs if None not in p["held_end"]
                 and p["held_end"][1] < p["held_end"][0]]
    rises = [f"{p['rows'][1]}: {_share(p['end_battery'][0])} to {_share(p['end_battery'][1])}"
             for p in pairs if None not in p["end_battery"]
             and p["end_battery"][1] > p["end_battery"][0]]
    out = ("Twice the former budget finds more of the end battery (" + "; ".join(rises) + ")"
           if rises else "Twice the former budget finds no more of the end battery")
    if not dearer and not held_less:
        return out + ", at no higher price."
    costs = "; ".join(
        f"{p['rows'][1]} " + ", ".join(
            f"{(b - a) / a:+.1%} under {COLUMN_LABELS[c].split(' (')[0]}"
            for c, (a, b) in p["usd"].items()) for p in dearer)
    return (out + (f", but costs more ({costs}: the prices are the cost model's over the same "
                   "transcripts, so the difference is the setting's, not noise)" if dearer
                   else "")
            + (", and holds fewer planted facts in the request without asking at the end"
               if held_less else "")
            + ". The default is 0.06 (`core/models/budget.py` auto_recall_share, since issue "
              "40): the end battery's facts are what automatic recall is for; 0.03 is a "
              "setting for a session that never asks back past the checkpoint.")


def _end_battery_note(systems: dict[str, Any], rows: list[str], battery: int) -> list[str]:
    """Why a contextfold row with automatic recall finds fewer probes in the end battery
    than during the session (SPEC Q5 keeps each turn's recall block to the next checkpoint,
    within the recall budget)."""
    low = []
    for name in rows:
        if not is_own(name) or systems[name]["continuity"].get("contextfold_recall_requests",
                                                                 0) == 0:
            continue
        during, end = probe_share(systems[name], "1"), probe_share(systems[name], "end")
        if during is not None and end is not None and end + 1e-9 < during:
            low.append(f"{name} {pct(end)} against {pct(during)}")
    if not low:
        return []
    return ["", "contextfold's rows with automatic recall find fewer of the end battery's "
            "facts than of the probes asked during the session: " + "; ".join(low) + ". "
            f"The battery asks its {battery} questions one after another. With SPEC Q5 a "
            "turn's recall block stays in every later request until the next checkpoint, and "
            "the blocks of the turns since the checkpoint share one recall budget "
            "(`auto_recall_share`, 6% of the safe limit; 3% before issue 40); a turn that "
            "finds that budget spent "
            "gets no block (the check after it then counts the full blocks as a reason to "
            "compact, `core.sizing.fit.recall_compaction_due`). That is the cause found when Q5 "
            "was measured here (commit fcca100: the end battery of the `contextfold` row "
            "went from 100% to 66.7%): a question that finds the blocks full goes out without "
            "the fact it asks about. The recall budget table below sets each row beside "
            "the same row at half its budget."]


def _l5_cost(systems: dict[str, Any]) -> list[str]:
    pairs = l5_cost(systems)
    if not pairs:
        return []
    lines = ["### What automatic recall (L5) costs", "",
             "Each contextfold row beside the same row with `auto_recall_share=0`. On the "
             "quality transcripts: the requests that carried a recall block, the block's "
             "tokens per request (contextfold's estimate), the recall step's own time per "
             "request (search included, timed inside the decision), input tokens per request "
             "(o200k), prefix breaks and the price. In the planted session: blocks per "
             "decision, their time, the median time of a whole decision, and the probes "
             "found in the end battery.", "",
             "| rows (with / without L5) | requests with a block | block tokens per "
             "request | recall ms per request | input tokens per request | prefix breaks | "
             + " | ".join(f"price, {COLUMN_LABELS[c].split(' (')[0]}" for c in COLUMNS)
             + " | planted: blocks, tokens per block, recall ms | planted: decision ms | "
             "end battery |",
             "| --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS)
             + " | ---: | ---: | ---: |"]
    for p in pairs:
        on, off = p["input_per_request"]
        ms_on, ms_off = p["decide_ms"]
        ends = ["-" if v is None else pct(v) for v in p["probe_end"]]
        blocks, decisions = p["planted_blocks"]
        lines.append(
            f"| {p['with']} / {p['without']} | {p['blocks']:,} of {p['calls']:,} | "
            f"{p['block_tokens'] / p['calls']:.1f} | {p['recall_ms']:.2f} | "
            f"{on:,.0f} / {off:,.0f} | "
            f"{p['prefix_breaks'][0]} / {p['prefix_breaks'][1]} | "
            + " | ".join(f"${p['usd'][c][0]:.2f} / ${p['usd'][c][1]:.2f}" for c in COLUMNS)
            + f" | {blocks:,} of {decisions:,}, "
            f"{p['planted_block_tokens'] / (blocks or 1):,.0f}, {p['planted_recall_ms']:.2f} | "
            + (f"{ms_on:.2f} / {ms_off:.2f}" if ms_on is not None and ms_off is not None
               else "-")
            + f" | {ends[0]} / {ends[1]} |")
    timed = next((p for p in pairs if p["check_ms"]), None)
    if timed:
        cells = "; ".join(f"{size:,} messages: {a:.2f} ms with, {b:.2f} ms without"
                          for size, (a, b) in sorted(timed["check_ms"].items()))
        lines += ["", f"Check time on the synthetic timing session ({timed['with']} against "
                  f"{timed['without']}, the medians of the rounds, the latter as its ratio to "
                  f"contextfold within each round): {cells}."]
    return [*lines, ""]
