"""The replay chart (`contextfold replay --plot`, `POST /v1/replay?chart=png`): request size
over the session, next to the original agent's.

matplotlib is an optional extra (`pip install contextfold[plot]`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

from .replay import ReplayReport


def replay_png(report: ReplayReport, *, title: str = "") -> bytes:
    """The chart of `plot_replay` as PNG bytes (RuntimeError without matplotlib)."""
    out = io.BytesIO()
    plot_replay(report, out, title=title)
    return out.getvalue()


def plot_replay(report: ReplayReport, path: Path | BinaryIO, *, title: str = "") -> None:
    """Write a PNG: projected request size per request, the safe limit, each compaction."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - the CLI checks before replaying
        raise RuntimeError("--plot needs matplotlib: pip install 'contextfold[plot]'") from exc

    xs = [r.index for r in report.requests]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    recorded = [(r.index, r.recorded_tokens) for r in report.requests if r.recorded_tokens]
    if recorded:
        ax.plot([x for x, _ in recorded], [y for _, y in recorded], color="#999999", lw=1,
                label="original agent (recorded usage)")
    label = "contextfold projection (estimate)"
    if report.overhead:
        # Both curves then count the same things: messages + system prompt + tools.
        label = (f"contextfold projection (estimate, incl. {report.overhead:,} tokens fixed "
                 f"overhead from {report.overhead_source})")
    ax.plot(xs, [r.estimated_tokens for r in report.requests], color="#1f77b4", lw=1.5,
            label=label)
    ax.axhline(report.safe_input_limit, color="#d62728", ls="--", lw=1, label="safe input limit")
    ax.axhline(report.context_window, color="#d62728", ls=":", lw=1, label="context window")
    for i, c in enumerate(report.compactions):
        ax.axvline(c.before_request, color="#2ca02c", lw=0.8, alpha=0.7,
                   label="compaction" if i == 0 else None)
    if report.compactions:
        # What stayed raw after each compaction (SPEC K6), against the tail budget used.
        ax.scatter([c.before_request for c in report.compactions],
                   [c.kept_tokens for c in report.compactions], marker="v", s=28,
                   color="#2ca02c", zorder=3, label="raw tokens kept after compaction")
        ax.scatter([c.before_request for c in report.compactions],
                   [c.tail_budget for c in report.compactions], marker="_", s=80,
                   color="#9467bd", zorder=3, label="tail budget of that compaction")
    ax.set_xlabel("model request")
    ax.set_ylabel("tokens in the request")
    ax.set_title(title or f"replay on {report.model}")
    # Below the axes: inside, the legend hid the recorded curve where it peaks.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, format="png", bbox_inches="tight")
    plt.close(fig)
