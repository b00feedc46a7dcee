"""Commands that run the main job end to end: replay a recorded session, and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.panel import Panel
from rich.table import Table

from ..core.budget import ModelCapacity, derive_budget
from ..core.plan import Plan
from ..core.projection import project, render_ledger
from ..core.tree import Branch
from ..demo_session import build_research_session
from ..formats import import_file
from ..ids import new_id
from ..replay import ReplayReport, active_messages, replay_messages
from ..store import open_store
from ..summarize.extractive import summarize_extractive
from .app import DB_OPTION, JSON_OPTION, BadInput, Output, app, console, run
from .session_cmds import MODEL_OPTION, WINDOW_OPTION, resolve_model

DEMO_CAPACITY = ModelCapacity(model="demo-16k", context_window=16_384, max_output=4_096)


def extractive(plan: Plan) -> tuple[str, str]:
    return summarize_extractive(plan), "extractive"


@app.command("replay")
def replay_command(
    path: Path = typer.Argument(..., help="A recorded session (Pi / Claude Code JSONL, ...)."),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    summarizer: str = typer.Option("extractive", "--summarizer", help="extractive"),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG chart of the replay."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Replay a recorded session as if contextfold had managed its context."""
    out = Output(as_json)
    if summarizer != "extractive":
        out.fail(BadInput("replay runs offline: --summarizer must be 'extractive'"), 2)

    async def work() -> None:
        result = import_file(path)
        messages = active_messages(result.nodes, result.leaf_id)
        recorded = next((m.model or (m.usage.model if m.usage else None)
                         for _, m in reversed(messages)
                         if m.role == "assistant" and (m.model or m.usage)), None)
        capacity, budget = resolve_model(model, recorded, context_window)
        report = replay_messages(messages, capacity, budget, extractive)
        report.estimate = _estimate_accuracy(messages, capacity)
        if plot is not None:
            from .plot import plot_replay

            plot_replay(report, plot, title=path.name)
        payload = report.to_json()
        out.emit(payload, lambda: _render_replay(payload, report))

    run(out, work)


def _estimate_accuracy(messages: Any, capacity: ModelCapacity) -> dict[str, Any] | None:
    from ..core.estimator import usage_accuracy

    return usage_accuracy([m for _, m in messages], capacity)


def _render_replay(payload: dict[str, Any], report: ReplayReport) -> None:
    table = Table(title=f"replay on {payload['model']} (safe limit {payload['safe_input_limit']})")
    for col in ("requests", "compactions", "max_projected_tokens", "invalid_tool_sequences",
                "dropped_messages", "over_limit_requests"):
        table.add_column(col.replace("_", " "))
    table.add_row(*(str(payload[c]) for c in ("requests", "compactions", "max_projected_tokens",
                                              "invalid_tool_sequences", "dropped_messages",
                                              "over_limit_requests")))
    console.print(table)
    if report.compactions:
        console.print(_compactions_table(report))
    if payload.get("estimate"):
        e = payload["estimate"]
        console.print(f"estimator vs recorded usage: {e['intervals']} intervals, under-count "
                      f"{e['under_count_rate']:.1%}, median ratio {e['median_ratio']:.2f}")


def _compactions_table(report: ReplayReport) -> Table:
    """One row per compaction: how much was folded, and what stayed raw (SPEC K6)."""
    table = Table(title="compactions: what stayed raw")
    for col in ("before request", "trigger", "tokens before → after", "folded",
                "raw messages kept", "raw tokens kept / tail budget", "split turn"):
        table.add_column(col)
    for c in report.compactions:
        share = f" ({c.kept_tokens / c.tail_budget:.0%})" if c.tail_budget else ""
        split = ("yes" + (f", {c.clipped_results} clipped" if c.clipped_results else "")
                 if c.split_turn else "")
        table.add_row(str(c.before_request), c.trigger,
                      f"{c.tokens_before:,} → {c.tokens_after:,}", str(c.summarized_messages),
                      str(c.kept_messages), f"{c.kept_tokens:,} / {c.tail_budget:,}{share}",
                      split)
    return table


@app.command("demo")
def demo_command(
    turns: int = typer.Option(36, "--turns", min=4, max=2000, help="Length of the session."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The main job in one command: a long research session on a small-window model."""
    out = Output(as_json)

    async def work() -> None:
        messages = build_research_session(turns=turns)
        budget = derive_budget(DEMO_CAPACITY)
        # Fresh ids every run: the demo can be run again against the same database.
        pairs = [(new_id(), m) for m in messages]
        report = replay_messages(pairs, DEMO_CAPACITY, budget, extractive)
        store = await open_store(db)
        try:
            info = await store.import_tree(report.chain, report.chain[-1].id,
                                           title="contextfold demo: Sherlock Holmes review",
                                           metadata={"demo": True, "model": DEMO_CAPACITY.model})
        finally:
            await store.close()
        payload = {"session_id": info.id, **report.to_json()}
        out.emit(payload, lambda: _render_demo(info.id, report))

    run(out, work)


def _abbreviated(summary: str, per_section: int = 4) -> str:
    """The summary with at most `per_section` lines under each heading, so it fits a screen."""
    out: list[str] = []
    shown = hidden = 0
    for line in summary.splitlines():
        if line.startswith("#"):
            if hidden:
                out.append(f"  [dim]… {hidden} more[/]")
            out.append(f"[bold]{line}[/]")
            shown = hidden = 0
        elif line.strip():
            if shown < per_section:
                out.append(line if len(line) <= 140 else line[:139] + "…")
                shown += 1
            else:
                hidden += 1
    if hidden:
        out.append(f"  [dim]… {hidden} more[/]")
    return "\n".join(out)


def _render_demo(session_id: str, report: ReplayReport) -> None:
    durable = len(report.chain)
    checkpoints = sum(1 for n in report.chain if n.checkpoint is not None)
    projection = project(Branch(nodes=tuple(report.chain)))
    console.print(Panel(
        "A 36-turn research session inside Zotero (real records, PDF pages, annotations, a "
        "failed tool call, a correction in Japanese) replayed on a model with a "
        f"[bold]{report.context_window:,}[/]-token window. The durable history keeps every "
        "message; the model sees the latest checkpoint summary plus the recent turns.",
        title="contextfold demo"))
    table = Table(title="automatic compactions")
    for col in ("before request", "trigger", "tokens before → after", "folded", "kept raw"):
        table.add_column(col)
    for c in report.compactions:
        table.add_row(str(c.before_request), c.trigger, f"{c.tokens_before:,} → {c.tokens_after:,}",
                      str(c.summarized_messages), str(c.kept_messages))
    console.print(table)
    cp = projection.summary
    if cp is not None:
        console.print(Panel(_abbreviated(cp.summary),
                            title="latest checkpoint (what the model reads first), abbreviated"))
        ledger = render_ledger(cp.ledger)
        if ledger:
            console.print(Panel(ledger, title="identifier ledger (carried forward verbatim)"))
    data = report.to_json()
    console.print(
        f"durable history: [bold]{durable}[/] nodes ({durable - checkpoints} messages, "
        f"{checkpoints} checkpoints) · model projection: summary + "
        f"{len(projection.messages)} raw messages\n"
        f"{data['requests']} requests, largest ~{data['max_projected_tokens']:,} tokens of "
        f"{data['safe_input_limit']:,} safe · invalid tool sequences: "
        f"{data['invalid_tool_sequences']} · dropped messages: {data['dropped_messages']}\n"
        f"stored as session [bold]{session_id}[/]: try `contextfold show {session_id}` or "
        f"`contextfold project {session_id} --model demo-16k --context-window 16384`"
    )
