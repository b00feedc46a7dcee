"""`bench/results/prefix_breaks.json` -> its section of `docs/benchmarks.md` (SPEC Q5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _row(r: dict[str, Any]) -> str:
    b = r["prefix_breaks"] or {}
    return (f"| {r['label']} `{Path(r['session']).name[:12]}` | "
            f"{'on' if r.get('recall', True) else 'off'} | {r['requests']:,} | "
            f"{r['compactions']} | {r['recall_requests']:,} | {b.get('breaks', '?')} | "
            f"{b.get('at_checkpoint', '?')} | {b.get('unexplained', '?')} | "
            f"{r['cache_read_share']:.1%} | ${r['usd']:.2f} |")


HEADER = ["| session | recall (L5) | requests | compactions | requests with recall blocks | "
          "prefix breaks | at a checkpoint | other | cache-read share | contextfold |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]


def prefix_breaks_section(data: dict[str, Any] | None,
                          peers: dict[str, Any] | None = None) -> list[str]:
    """Prefix breaks and the cache-read share over the real sessions, now and before."""
    head = ["## Prefix breaks and the cache-read share (`bench/prefix_breaks.py` → "
            "`bench/results/prefix_breaks.json`)", ""]
    if data is None:
        return [*head, "Not run yet: `python -m bench.prefix_breaks`.", ""]
    lines = [*head,
             f"The real Pi and Claude Code sessions of `tests/fixtures` replayed by `contextfold "
             f"replay`'s engine at a {data['window']:,}-token window with the default trigger, "
             "compaction and automatic recall (L5), then with recall off. *Prefix breaks*: "
             "requests whose content does not start with the previous request's content "
             "(`core/money/prefix_breaks.py`, over the prompt blocks the cost model bills), each "
             "attributed to a checkpoint (the request's checkpoint differs from the previous "
             "one's) or not; SPEC Q5 says every break is at a checkpoint. *Cache-read share*: "
             "contextfold's modelled input tokens read from the prompt cache (Anthropic's "
             "rules, `core/money/prices.py`), of all its input tokens; *contextfold*: its modelled "
             "price (offline summaries, no summariser cost).", "", *HEADER]
    lines += [_row(r) for r in data["rows"]]
    before = data.get("before")
    if before:
        commit = before.get("commit") or "an earlier commit"
        lines += ["", f"Before SPEC Q5 (commit `{commit}`: each turn's recall block went away "
                      "when the next turn began), the same sessions with recall on:", "",
                  *HEADER, *(_row(r) for r in before["rows"])]
    lines.append("")
    return lines + peers_lines(data.get("peers_before"), peers)


def peers_lines(before: dict[str, Any] | None, peers: dict[str, Any] | None) -> list[str]:
    """contextfold's rows of the peers bench (docs/peers.md) before SPEC Q5 and now."""
    if not before or peers is None:
        return []
    from bench.prefix_breaks import peer_totals

    now = peer_totals(peers)
    lines = [f"The peers bench (docs/peers.md, 1,323 requests on the same transcripts; "
             f"contextfold's quality rows) before SPEC Q5 (commit `{before['commit']}`) and "
             "now:", "",
             "| row | prefix breaks | compactions | read from Anthropic's cache | "
             "price, Anthropic cache rules | price, OpenAI cache rules |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, rows in (("before", before["rows"]), ("now", now)):
        for name, t in rows.items():
            lines.append(f"| {name}, {label} | {t['prefix_breaks']} | {t['compactions']} | "
                         f"{t['cached_anthropic']:.1%} | ${t['usd_anthropic']:.2f} | "
                         f"${t['usd_openai']:.2f} |")
    return [*lines, ""]
