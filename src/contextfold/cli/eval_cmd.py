"""`contextfold eval`: measure a summariser's continuity on your own model (issue 27 item 6).

The command translates: the model and window come from the resolver as for `compact`
(`resolve_model`), the LLM summariser from `summarize.factory` through `compact`'s own
builder (guarded: an invalid answer falls back to the offline summary, and the run says
so); `evaluate.run_eval` plants, compacts and probes. Here are only the options and the
table.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape

from ..errors import MissingExtraError
from .app import JSON_OPTION, BadInput, Output, app, console, exit_code, run
from .extras import require_extra
from .render import count, usd
from .session_args import WINDOW_OPTION, resolve_model, stderr_progress

_CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "language")
_RULE_KINDS = ("action", "information", "process", "preference", "output")  # natural rules
_STATED = ("first", "middle", "latest")  # the user message a fact was stated in
_SHOWN = 5  # violations and fallback reasons listed in the table view


@app.command("eval")
def eval_command(
    compactions: str = typer.Option(
        "1,5,10", "--compactions", metavar="K,K,…", help="After how many compactions to "
        "probe, e.g. 1,5,10 (each at least 1, at most 50; one compaction per turn)."),
    summarizer: str = typer.Option("extractive", "--summarizer", help="extractive|llm"),
    summarizer_model: str | None = typer.Option(
        None, "--summarizer-model", help="Model for --summarizer llm (default: --model)."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint "
                                        "of the summariser (a local server: no key)."),
    model: str | None = typer.Option(
        None, "--model", help="Model whose window the session is compacted for (default: "
        "$CONTEXTFOLD_MODEL, else offline/echo); with --summarizer llm and no "
        "--summarizer-model, also the summariser."),
    context_window: int | None = WINDOW_OPTION,
    seed: int = typer.Option(27, "--seed", help="Seed of the planted session."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Measure a summariser: what a planted session keeps after K compactions.

    Facts of six kinds (recall, artifact, continuation, decision, constraint, language) are planted in the user's prose and in tool results, and natural user rules with no cue word (action, information, process, preference, output) in the first, a middle and the latest user message; after K compactions each is asked about, and counts as continued when the request that question goes out with holds it (checkpoint, automatic recall, raw tail). Also: lines the summary attributes to the user or a tool that neither said, what the retention check had to re-add, fallbacks, and the summariser's tokens and cost. Nothing is stored: the session lives in a temporary database."""  # noqa: E501  (one paragraph: Rich keeps a docstring's line breaks)
    from ..evaluate import EvalInputError, parse_compactions

    out = Output(as_json)
    from .llm_choice import summarizer_choice_problem

    if (problem := summarizer_choice_problem(summarizer)) is not None:
        out.fail(BadInput(problem), 2)
    if summarizer == "extractive" and (summarizer_model or base_url):
        given = "--summarizer-model" if summarizer_model else "--base-url"
        out.fail(BadInput(f"{given} names an LLM summariser: add --summarizer llm"), 2)
    try:
        ks = parse_compactions(compactions)
    except EvalInputError as exc:
        out.fail(BadInput(f"--compactions: {exc}"), 2)
    if summarizer == "llm":
        try:
            require_extra("eval --summarizer llm", "providers")
        except MissingExtraError as exc:
            out.fail(exc, exit_code(exc))
    fallbacks: list[str] = []

    async def work() -> dict[str, Any]:
        from ..evaluate import run_eval
        from ..runtime.summarizers import offline_summarize

        resolved = resolve_model(model, None, context_window)
        summarize: Any = offline_summarize
        name = "extractive"
        if summarizer == "llm":
            from .llm_choice import guarded_llm_summarizer  # `compact`'s builder too

            summarize = guarded_llm_summarizer(resolved, summarizer_model, base_url, fallbacks)
            name = f"llm:{summarizer_model or resolved.name}"
        from ..store.sql.engine import redact_url  # a URL's password is never shown

        result = await run_eval(resolved.capacity, resolved.budget, summarize=summarize,
                                summarizer=name, compactions=ks, seed=seed,
                                progress=stderr_progress(),
                                base_url=redact_url(base_url) if base_url else None)
        return result.to_json()

    payload = run(out, work)
    out.emit(payload, lambda: render_eval(payload))


def _share(counts: dict[str, int], key: str) -> str:
    if not counts["total"]:
        return "–"
    return f"{counts[key]}/{counts['total']}"


def _cell(counts: dict[str, int]) -> str:
    """`in request · in checkpoint` of one row at one K."""
    return f"{_share(counts, 'in_request')} · {_share(counts, 'in_checkpoint')}"


def render_eval(p: dict[str, Any]) -> None:
    """The table view of an `eval --json` document."""
    from rich.table import Table  # only for the table view, as in `render`

    where = f" at {p['base_url']}" if p.get("base_url") else ""
    console.print(f"[bold]{escape(p['summarizer'])}[/]{escape(where)} on "
                  f"{escape(p['model'])} ({p['context_window']:,}-token window, safe limit "
                  f"{p['safe_input_limit']:,}, recall budget {p['recall_budget']:,}): "
                  f"{count(p['compactions_done'], 'compaction')} over "
                  f"{count(p['turns_played'], 'turn')}, "
                  f"{p['seconds']:.1f} s")
    table = Table(title="facts of folded turns, in the request its question goes out with "
                  "· in the checkpoint (stated: in the first, a middle or the latest user "
                  "message when compacting began)", title_justify="left")
    table.add_column("category")
    table.add_column("planted in")
    for m in p["milestones"]:
        table.add_column(f"K={m['k']}", justify="right")
    for category in _CATEGORIES:
        for source in ("user", "tool"):
            table.add_row(category if source == "user" else "", source, *(
                _cell(m["by_source"][category][source]) for m in p["milestones"]),
                end_section=category == _CATEGORIES[-1] and source == "tool")
    for i, kind in enumerate(_RULE_KINDS):
        table.add_row(kind, "user, no cue" if i == 0 else "", *(
            _cell(m["categories"][kind]) for m in p["milestones"]), end_section=i == 4)
    for where in _STATED:
        table.add_row(f"stated: {where}", "all facts",
                      *(_cell(m["stated"][where]) for m in p["milestones"]))
        table.add_row("", "natural rules", *(_cell(m["rules_stated"][where])
                                              for m in p["milestones"]))
    table.add_row("[bold]all[/]", "", *(
        f"[bold]{sum(s['in_request'] for s in m['sources'].values())}/{m['facts']} · "
        f"{sum(s['in_checkpoint'] for s in m['sources'].values())}/{m['facts']}[/]"
        for m in p["milestones"]), end_section=True)
    console.print(table)
    console.print("natural rules in the checkpoint or their message named there by node id: "
                  + ", ".join(
                      f"K={m['k']} {_share(m['natural_rules'], 'in_checkpoint_or_named')}"
                      for m in p["milestones"]))
    if p["not_reached"]:
        console.print(f"[yellow]not reached:[/] K={', '.join(map(str, p['not_reached']))} "
                      "(a compaction was a no-op)")
    console.print(f"attribution violations: {p['attribution_violations']} (lines the "
                  "summary attributes to the user or a tool that neither said)")
    for v in p["violations"][:_SHOWN]:
        console.print(f"  K={v['k']} ({escape(v['claimed'])}) {escape(v['text'])}",
                      highlight=False)
    lacked = ", ".join(f"{n} {kind}" for kind, n in sorted(p["summary_lacked"].items()))
    console.print(f"retention check: of {p['required']} required items over all "
                  f"checkpoints the summaries lacked {lacked or 'none'} (re-added, or named "
                  "for recall)")
    console.print(f"fallbacks to the offline summary: {p['fallbacks']} of "
                  f"{p['compactions_done']}")
    for f in p["fallback_reasons"][:_SHOWN]:
        console.print(f"  K={f['k']}: {escape(f['reason'])}", highlight=False)
    cost = p["cost"]["summarizer"]
    dollars = "unpriced" if cost["usd"] is None else usd(cost["usd"])  # `sessions`' format
    console.print(f"summariser: {cost['input_tokens']:,} input (+{cost['cached_tokens']:,} "
                  f"cached) and {cost['output_tokens']:,} output tokens over all compactions, "
                  f"{dollars}")
