"""`docs/peers.png`: one small panel per question, every system on the same rows.

Each panel is a horizontal bar per system, contextfold highlighted, the value printed at
the bar's end; the reference row (no compaction) is left out where it says nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .figures import (
    CF,
    REFERENCE,
    continuity_share,
    ok_systems,
    order,
    timing_ratios,
    totals,
)

# (title, value of one system's totals, format, include the reference row)
Panel = tuple[str, Callable[[str, dict[str, Any]], float | None], str, bool]


def _pct_or_none(x: float | None) -> float | None:
    return None if x is None else 100 * x


def panels(results: dict[str, Any]) -> list[Panel]:
    systems = ok_systems(results)
    ratios = timing_ratios(systems)
    sizes = sorted({s for r in ratios.values() for s in r})
    big = sizes[-1] if sizes else None

    def ratio(name: str, _t: dict[str, Any]) -> float | None:
        r = ratios.get(name, {}).get(big) if big else None
        return r["median"] if r else None

    return [
        ("Tool pairing broken (% of requests)",
         lambda n, t: 100 * t["invalid_tool_pairing_share"], "%.1f", False),
        ("Invalid under Anthropic rules (%)",
         lambda n, t: 100 * t["invalid_anthropic_share"], "%.1f", False),
        ("Lost content (% of messages)", lambda n, t: 100 * t["lost_share"], "%.1f", False),
        ("Cut characters shown to a summariser (%)",
         lambda n, t: 100 * t["shown_share"] if t["evicted_chars"] else None, "%.0f", False),
        ("Requests over the safe limit", lambda n, t: t["over"], "%d", True),
        ("Planted facts kept after 10 compactions (%)",
         lambda n, t: _pct_or_none(continuity_share(systems[n], "10")), "%.0f", False),
        ("Price per 100 calls (USD, Anthropic cache rules)",
         lambda n, t: 100 * t["usd_anthropic"] / t["calls"], "%.2f", True),
        ("Price per 100 calls (USD, OpenAI cache rules)",
         lambda n, t: 100 * t["usd_openai"] / t["calls"], "%.2f", True),
        ("Prefix breaks (prompt-cache misses)", lambda n, t: t["prefix_breaks"], "%d", False),
        (f"Check cost / contextfold's, {big:,} msgs" if big else "Check cost", ratio, "%.2f",
         False),
    ]


def plot(results: dict[str, Any], path: Path) -> Path:
    """Draw the small multiples to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = ok_systems(results)
    names = order(systems)
    tot = {n: totals(systems[n]) for n in names}
    chosen = panels(results)
    cols = 3
    rows = (len(chosen) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 0.28 * len(names) * rows + 2.4),
                             sharey=True)
    for ax, (title, value, fmt, with_reference) in zip(axes.flat, chosen, strict=False):
        values = [value(n, tot[n]) if with_reference or n != REFERENCE else None
                  for n in names]
        shown = [v if v is not None else 0.0 for v in values]
        bars = ax.barh(range(len(names)), shown,
                       color=["tab:green" if n == CF else "tab:gray" for n in names])
        ax.bar_label(bars, labels=["-" if v is None else fmt % v for v in values],
                     fontsize=7, padding=2)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_title(title, fontsize=9)
        top = max(shown)
        ax.set_xlim(0, top * 1.3 if top > 0 else 1)
        if all(v is None for v in values):
            ax.text(0.5, 0.5, "not measured in this run", transform=ax.transAxes,
                    ha="center", fontsize=8, color="gray")
        ax.tick_params(axis="x", labelsize=7)
    axes.flat[0].invert_yaxis()
    for ax in list(axes.flat)[len(chosen):]:
        ax.axis("off")
    fig.suptitle(f"contextfold vs peers on the same transcripts ({results['generated'][:10]}); "
                 "lower is better except 'shown' and 'kept'", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
