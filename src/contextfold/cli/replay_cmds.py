"""Commands that run the main job end to end: replay a recorded session, and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .app import (
    DB_OPTION,
    JSON_OPTION,
    BadInput,
    Output,
    app,
    command_prefix,
    console,
    err_console,
    run,
)
from .render import count, say, visible
from .session_args import MODEL_OPTION, WINDOW_OPTION, resolve_model

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from ..core.models.budget import ModelCapacity
    from ..replay import ReplayReport

PROGRESS_FROM_MESSAGES = 200  # shorter files replay in about a second


DEMO_MODEL, DEMO_WINDOW = "demo-16k", 16_384  # a small window, so the demo compacts


def demo_capacity() -> ModelCapacity:
    """The demo's model, sized by the resolver like every model (`project --model demo-16k
    --context-window 16384` sizes it the same)."""
    from ..core.sizing.resolver import ModelResolver

    return ModelResolver().resolve(DEMO_MODEL, context_window=DEMO_WINDOW).capacity


@app.command("replay")
def replay_command(
    path: Path = typer.Argument(..., help="A recorded session (Pi / Claude Code JSONL, ...)."),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    summarizer: str = typer.Option("extractive", "--summarizer", help="extractive"),
    overhead: int | None = typer.Option(
        None, "--overhead", min=0, help="Tokens every request carries besides the messages (the "
        "agent's system prompt and tools). Default: derived from the first recorded usage."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG chart of the replay."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Replay a recorded session as if contextfold had managed its context."""
    out = Output(as_json)
    if summarizer != "extractive":
        out.fail(BadInput("replay runs offline: --summarizer must be 'extractive'"), 2)
    if plot is not None:  # fail before the replay, not after it
        _check_plot_target(out, plot)

    async def work() -> None:
        from ..formats import import_file
        from ..replay import recorded_session, replay_overhead, replay_recorded

        result = import_file(path)
        session = recorded_session(result.nodes, result.leaf_id)
        resolved = resolve_model(model, session.model, context_window)
        capacity, budget = resolved.capacity, resolved.budget
        # Too large an overhead is bad input naming the smallest window that works.
        fixed = replay_overhead(session, capacity, budget, overhead, "--overhead", resolved)
        with _progress(len(session.messages)) as progress:
            report = replay_recorded(session, capacity, budget, fixed, progress=progress)
        if plot is not None:
            from ..replay_plot import plot_replay

            plot_replay(report, plot, title=path.name)
        payload = report.to_json()
        out.emit(payload, lambda: _render_replay(payload))

    run(out, work)


def _check_plot_target(out: Output, plot: Path) -> None:
    folder = plot.parent if str(plot.parent) else Path(".")
    if not folder.is_dir():
        out.fail(BadInput(f"--plot {plot}: the folder {folder} does not exist"), 2)
    if plot.is_dir():
        out.fail(BadInput(f"--plot {plot} is a folder; name a .png file"), 2)
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # an optional extra, like the provider SDKs for `chat`: exit 1
        out.fail(RuntimeError("--plot needs matplotlib, which the base install leaves out: "
                              "pip install 'contextfold[plot]'"), 1)


class _progress:
    """Progress of a long replay on stderr (a terminal only; quiet otherwise and for short
    files). Usable as `with _progress(n) as progress:`; `progress` is None when hidden."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if self.total < PROGRESS_FROM_MESSAGES or not err_console.is_terminal:
            return None
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        self.bar = Progress(TextColumn("replaying"), BarColumn(), TaskProgressColumn(),
                            TextColumn("{task.completed}/{task.total} messages"),
                            console=err_console, transient=True)
        self.bar.start()
        task = self.bar.add_task("replay", total=self.total)
        return lambda done, total: self.bar.update(task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _render_replay(payload: dict[str, Any]) -> None:

    # Short headers and unwrapped cells: one line per row at 80 columns (the JSON names
    # the fields in full).
    table = one_line_table(f"replay on {payload['model']} (safe limit "
                           f"{payload['safe_input_limit']:,} tokens)")
    cols = {"requests": "requests", "compactions": "compactions",
            "max_projected_tokens": "max tokens", "invalid_tool_sequences": "invalid",
            "dropped_messages": "dropped", "over_limit_requests": "over limit"}
    for header in cols.values():
        table.add_column(header, justify="right", no_wrap=True)
    table.add_row(*(f"{payload[c]:,}" for c in cols))
    console.print(table)
    say(("(max tokens: the largest request, fixed overhead included; invalid: tool "
         "sequences a provider would reject; dropped: messages neither folded nor sent; over "
         "limit: requests over the safe limit)", "dim"))
    if payload.get("recall_requests"):
        say(f"{count(payload['recall_requests'], 'request')} carried an automatic recall block "
            "(excerpts of folded messages matching the latest request)")
    if payload["started_from_checkpoint"]:
        say("the file begins after a recorded compaction: its summary is the starting "
            "checkpoint")
    if payload["overhead_tokens"]:
        say(f"every request includes {payload['overhead_tokens']:,} tokens of fixed overhead "
            f"(system prompt and tools; from {payload['overhead_source']})")
    elif payload["overhead_source"] == "none":
        say("no recorded usage: requests count the messages only (give --overhead N for the "
            "agent's system prompt and tools)")
    for bad in payload["invalid_requests"][:10]:
        say(("invalid request", "red"), f" #{bad['request']} (producing reply "
            f"{bad['reply_node_id']}): ", "; ".join(bad["problems"][:3]))
    if payload.get("compaction_log"):
        console.print(_compactions_table(payload["compaction_log"],
                                         payload.get("overhead_tokens") or 0))
        console.print(explanations_table(payload["compaction_log"]))
    same = (payload.get("cost") or {}).get("same_model_summarizer") or {}
    if same.get("cache_read_share") is not None:
        say(f"a summariser that is the session's own model would read "
            f"{same['cache_read_share']:.1%} of its input from the prompt cache over "
            f"{count(same['requests'], 'compaction')} (its request starts with the session's "
            "previous request; this replay's summaries are offline)")
    if payload.get("estimate"):
        e = payload["estimate"]
        say(f"estimator check against the recorded usage, over {e['intervals']} intervals "
            "between consecutive replies (how much the provider's prompt grew vs our estimate "
            f"of the messages added): our estimate was low in {e['under_count_rate']:.1%} of "
            f"them; the median estimate/actual ratio is {e['median_ratio']:.2f} (1.00 = exact, "
            "above 1 = we over-count, the safe side). Compaction also keeps a reserve, so an "
            "occasional under-count does not overflow.")


def _compactions_table(log: list[dict[str, Any]], overhead: int = 0) -> Table:
    """One row per compaction: how much was folded, and what stayed raw (SPEC K6).

    Its token figures count the messages only; with a fixed overhead the title says so
    (the headline's "max projected tokens" includes it, these do not)."""

    title = "compactions: what stayed raw"
    if overhead:
        title += f" (message tokens, without the {overhead:,}-token overhead)"
    table = one_line_table(title)
    for col, justify in (("req", "right"), ("trigger", "left"), ("tokens → after", "right"),
                         ("folded", "right"), ("kept", "right"),
                         ("kept tokens/tail", "right"), ("split turn", "left")):
        table.add_column(col, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for c in log:
        share = f" {c['kept_tokens'] / c['tail_budget']:.0%}" if c["tail_budget"] else ""
        split = ("yes" + (f", {c['clipped_results']} clip" if c["clipped_results"] else "")
                 if c["split_turn"] else "")
        # One word for one compaction in both tables: the explanation's trigger (cost,
        # threshold, …) where there is one, not the plan's (auto).
        trigger = (c.get("explanation") or {}).get("trigger") or c["trigger"]
        table.add_row(str(c["before_request"]), trigger,
                      f"{c['tokens_before']:,} → {c['tokens_after']:,}",
                      str(c["summarized_messages"]), str(c["kept_messages"]),
                      f"{c['kept_tokens']:,}/{c['tail_budget']:,}{share}", split)
    return table


def explanations_table(log: list[dict[str, Any]]) -> Table:
    """Issue 40: one row per compaction, why it ran and what it saved: the trigger, the
    request before → after, the expected saving, the break-even request and the realised
    saving over the requests after it (a loss keeps its minus sign). The figures are the
    core's (`core.report.explain`); this only lays them out."""
    from ..core.report.explain import CompactionExplanation

    table = one_line_table("compactions: why, and what they saved")
    for col, justify in (("req", "right"), ("trigger", "left"), ("before → after", "right"),
                         ("expected", "right"), ("break-even", "right"),
                         ("realised", "right")):
        table.add_column(col, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for c in log:
        e = CompactionExplanation.from_json(c.get("explanation") or {})
        if e is None:
            table.add_row(str(c["before_request"]), c["trigger"], "", "", "", "")
            continue
        realised = e.realised_saving
        table.add_row(
            str(c["before_request"]), e.trigger, f"{e.tokens_before:,} → {e.tokens_after:,}",
            "" if e.expected_saving is None else e.amount(e.expected_saving),
            "" if e.expected_saving is None else
            ("never" if e.break_even is None else f"req {e.break_even:,}"),
            "none yet" if realised is None or e.realised is None else
            f"{e.amount(realised)} /{e.realised.requests:,}")
    return table


def one_line_table(title: str) -> Table:
    """A table whose rows stay one line each on an 80-column terminal: a rule under the
    header, no side borders, one space between columns (cells are added `no_wrap`)."""
    from rich import box
    from rich.table import Table

    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                 padding=(0, 0, 0, 1), title_justify="left")


@app.command("demo")
def demo_command(
    turns: int = typer.Option(36, "--turns", min=4, max=2000, help="Length of the session."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The main job in one command: a long research session on a small-window model."""
    out = Output(as_json)

    async def work() -> None:
        from ..core.models.budget import derive_budget
        from ..demo_session import build_research_session
        from ..ids import new_id
        from ..replay import replay_messages
        from ..store import open_store

        capacity = demo_capacity()
        messages = build_research_session(turns=turns)
        budget = derive_budget(capacity)
        # Fresh ids every run: the demo can be run again against the same database.
        pairs = [(new_id(), m) for m in messages]
        report = replay_messages(pairs, capacity, budget)
        async with await open_store(db) as store:
            info = await store.import_tree(report.chain, report.chain[-1].id,
                                           title="contextfold demo: Sherlock Holmes review",
                                           metadata={"demo": True, "model": capacity.model})
        payload = {"session_id": info.id, **report.to_json()}
        out.emit(payload, lambda: _render_demo(info.id, report))

    run(out, work)


def _abbreviated(summary: str, per_section: int = 4) -> Text:
    """The summary with at most `per_section` lines under each heading, so it fits a screen.
    Its text is shown as written (a `Text`, never markup: "- [x] done" stays)."""
    from rich.text import Text

    out = Text()

    def more(hidden: int) -> None:
        if hidden:
            out.append(f"  … {hidden} more\n", style="dim")

    shown = hidden = 0
    for line in summary.split("\n"):  # not splitlines(): \x1e etc. are not line ends
        if line.startswith("#"):
            more(hidden)
            out.append(visible(line) + "\n", style="bold")
            shown = hidden = 0
        elif line.strip():
            if shown < per_section:
                out.append(visible(line if len(line) <= 140 else line[:139] + "…") + "\n")
                shown += 1
            else:
                hidden += 1
    more(hidden)
    if out.plain.endswith("\n"):
        out.right_crop(1)  # only the last line break: the text's own spaces stay
    return out


def _render_demo(session_id: str, report: ReplayReport) -> None:
    from rich.panel import Panel
    from rich.text import Text

    from ..core.values.tree import Branch
    from ..core.view.projection import project, render_ledger

    durable = len(report.chain)
    checkpoints = sum(1 for n in report.chain if n.checkpoint is not None)
    projection = project(Branch(nodes=tuple(report.chain)))
    console.print(Panel(
        "A 36-turn research session inside Zotero (real records, PDF pages, annotations, a "
        "failed tool call, a correction in Japanese) replayed on a model with a "
        f"[bold]{report.context_window:,}[/]-token window. The durable history keeps every "
        "message; the model sees the latest checkpoint summary plus the recent turns.",
        title="contextfold demo"))
    table = one_line_table("automatic compactions")
    for col in ("before request", "trigger", "tokens before → after", "folded", "kept raw"):
        table.add_column(col, no_wrap=True)
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
            console.print(Panel(Text(visible(ledger)),
                                title="identifier ledger (carried forward verbatim)"))
    data = report.to_json()
    say("durable history: ", (str(durable), "bold"),
        f" nodes ({count(durable - checkpoints, 'message')}, "
        f"{count(checkpoints, 'checkpoint')}) · model projection: summary + "
        f"{count(len(projection.messages), 'raw message')}")
    say(f"{count(data['requests'], 'request')}, largest "
        f"~{data['max_projected_tokens']:,} tokens of {data['safe_input_limit']:,} safe · "
        "invalid tool sequences: "
        f"{data['invalid_tool_sequences']} · dropped messages: {data['dropped_messages']}")
    cf = command_prefix()  # `.venv/bin/contextfold` after `make demo`: not on PATH yet
    say("stored as session ", (session_id, "bold"), f": try `{cf} show {session_id}` or "
        f"`{cf} project {session_id} --model {DEMO_MODEL} --context-window {DEMO_WINDOW}`")
