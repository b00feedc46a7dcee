"""Commands on stored sessions: import, sessions, compact (project, context, show and verify, which
only read a session, are in `view_cmds`; what they share is in `session_args`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .app import (
    DB_OPTION,
    EXIT_BUSY,
    JSON_OPTION,
    BadInput,
    Output,
    app,
    err_console,
    run,
)
from .render import (
    render_compaction,
    render_import,
    render_sessions,
)
from .safe_text import say

if TYPE_CHECKING:
    from ..core.models.budget import Budget, ModelCapacity
    from ..core.values.tree import Branch
    from ..store.protocol import SessionReader, SessionStore
    from ..store.values import SessionInfo

from .session_args import (
    MODEL_OPTION,
    SESSION_HELP,
    WINDOW_OPTION,
    _load_healthy,
    read_only,
    resolve_stored,
    session_id_of,
    stderr_progress,
)


def import_file(*args: Any, **kwargs: Any) -> Any:
    """`formats.import_file`, imported when a command runs rather than at start-up."""
    from ..formats import import_file as load

    return load(*args, **kwargs)


@app.command("import")
def import_command(
    path: Path = typer.Argument(..., help="Session file: Pi or Claude Code JSONL, or a JSON "
                                "list of OpenAI / Anthropic messages."),
    format: str = typer.Option("auto", "--format", help="auto|pi|claude-code|openai|anthropic"),
    max_bytes: int | None = typer.Option(
        None, "--max-bytes", min=1, help="Refuse files larger than this (default 256 MiB, or "
        "$CONTEXTFOLD_MAX_IMPORT_BYTES)."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Import a recorded session into the store (nothing is written on a fatal error)."""
    out = Output(as_json)

    async def work() -> None:
        from ..store import open_store

        result = import_file(path, format=format, max_bytes=max_bytes)
        async with await open_store(db) as store:
            info = await store.import_tree(result.nodes, result.leaf_id, title=path.name,
                                           metadata=result.metadata)
        payload = {
            "session_id": info.id,
            "format": result.format,
            "nodes": len(result.nodes),
            "messages": result.messages,
            "checkpoints": result.checkpoints,
            "skipped": result.skipped,
            "warnings": list(result.warnings),
        }
        out.emit(payload, lambda: render_import(payload, result.warnings))

    run(out, work)


SESSIONS_SHOWN = 50  # `contextfold sessions` lists the newest this many unless told


@app.command("sessions")
def sessions_command(
    db: str | None = DB_OPTION, as_json: bool = JSON_OPTION,
    limit: int = typer.Option(SESSIONS_SHOWN, "--limit", min=0, metavar="N",
                              help="List the newest N sessions (0: every one)."),
) -> None:
    """List stored sessions, oldest first: started / last written, messages, checkpoints,
    cost, model. Only the newest `--limit` are read: each row reads its session's branch,
    and a store a fleet has filled for months holds thousands."""
    out = Output(as_json)

    def work() -> None:
        async def reads(store: SessionReader) -> tuple[list[dict[str, Any]], bool]:
            if not limit:
                infos, more = await store.list_sessions(), False
            else:  # one index range, not the whole table (migration 0009)
                page = await store.sessions_newest(limit=limit + 1)
                infos, more = page[:limit][::-1], len(page) > limit
            return [await _session_row(store, s) for s in infos], more

        rows, more = read_only(db, reads)
        out.emit({"sessions": rows, "more": more}, lambda: _render_page(rows, more, limit))

    run(out, work)


def _render_page(rows: list[dict[str, Any]], more: bool, limit: int) -> None:
    render_sessions(rows)
    if more:
        say(f"(the newest {limit:,} shown: `--limit N` shows more, `--limit 0` every one)")


async def _session_row(store: SessionReader, info: SessionInfo) -> dict[str, Any]:
    """One `sessions` row: the stored fields plus what the branch says, and what it cost
    (SPEC Q4: the service's `cost` object, from the same helper)."""
    from ..billing import billed_model, session_bill
    from ..core.values.tree import Branch

    branch = await store.load_full_branch(info.id)
    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    # Messages only: a checkpoint written later is not the session's last message.
    said = [n.created_at for n in nodes if n.message is not None]
    from ..titles import shown_title

    return {"session_id": info.id, "title": shown_title(info.title, info.metadata),
            "leaf_id": info.leaf_id, "branch_revision": info.branch_revision,
            # A page of sessions is read without the damage check; the branch read says.
            "read_only": info.read_only or not isinstance(branch, Branch),
            "created_at": info.created_at.isoformat(),
            "first_message_at": min(said, default=info.created_at).isoformat(),
            "last_message_at": max(said, default=info.created_at).isoformat(),
            "messages": sum(1 for n in nodes if n.message is not None),
            "checkpoints": sum(1 for n in nodes if n.checkpoint is not None),
            "model": billed_model(branch, info.metadata),  # the service lists the same
            "cost": session_bill(branch, info.metadata).to_json()}


@app.command("compact")
def compact_command(
    session: str = typer.Argument(..., help=SESSION_HELP),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    summarizer: str = typer.Option("extractive", "--summarizer", help="extractive|llm"),
    summarizer_model: str | None = typer.Option(
        None, "--summarizer-model", help="Model for --summarizer llm (default: --model)."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint."),
    instructions: str | None = typer.Option(None, "--instructions",
                                            help="What the summary must keep."),
    wait: bool = typer.Option(False, "--wait", help="If another process is compacting this "
                              "session, wait for it and then compact (default: report busy, "
                              "exit 3)."),
    preview: bool = typer.Option(False, "--preview", help="Show the checkpoint that would be "
                                 "committed, and commit nothing."),
    summary_file: Path | None = typer.Option(
        None, "--summary-file", help="Commit this file's text as the summary (an edited "
        "preview), marked as edited by the user.", dir_okay=False),
    base: str | None = typer.Option(
        None, "--base", help="With --summary-file: the preview's base (LEAF@REVISION, as "
        "--preview prints it); if the session moved since, nothing is committed."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Compact a session now (manual compaction: a no-op is a success with a reason).

    --preview shows what would be committed; --summary-file commits your edit."""
    out = Output(as_json)
    from .llm_choice import summarizer_choice_problem

    if (problem := summarizer_choice_problem(summarizer)) is not None:
        out.fail(BadInput(problem), 2)
    if preview and summary_file is not None:
        out.fail(BadInput("--preview shows the summariser's text and --summary-file commits "
                          "yours: give one of them"), 2)
    if base is not None and summary_file is None:
        out.fail(BadInput("--base goes with --summary-file (the preview the edit is of)"), 2)
    edit: dict[str, Any] = {}
    if summary_file is not None:
        from ..runtime.compaction import PreviewBase

        try:
            edit["summary_text"] = summary_file.read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            out.fail(BadInput(f"cannot read --summary-file {summary_file}: {exc}"), 2)
        if base is not None:
            try:
                edit["base"] = PreviewBase.parse(base)
            except ValueError as exc:
                out.fail(BadInput(str(exc)), 2)

    fallbacks: list[str] = []

    built: dict[str, Any] = {}  # the LLM summariser by model, built once (--wait retries)

    async def compact(store: SessionStore, session: str, branch: Branch) -> dict[str, Any]:
        from ..runtime.compaction import CompactionRequest, compact_session
        from ..runtime.summarizers import offline_summarize

        # The model and the summariser are decided here, from the branch as loaded (a
        # compaction re-reads it only when it moved); the compaction decides neither.
        metadata = dict((await store.get_session(session)).metadata)
        resolved = resolve_stored(model, context_window, branch, metadata)
        summarize = offline_summarize
        if summarizer == "llm":
            from .llm_choice import guarded_llm_summarizer

            if resolved.name not in built:
                built[resolved.name] = guarded_llm_summarizer(resolved, summarizer_model,
                                                              base_url, fallbacks)
            summarize = built[resolved.name]
        from ..stored_request import stored_system, stored_tools

        # The request measured before and after is the one `project` and the service size.
        outcome = await compact_session(CompactionRequest.for_model(
            store, session, resolved, summarize=summarize, instructions=instructions,
            system=stored_system(metadata), tools=stored_tools(), progress=stderr_progress(),
            branch=branch, preview=preview, **edit))
        return compaction_payload(outcome, resolved.capacity, resolved.budget)

    async def work() -> dict[str, Any]:
        from ..store import open_store

        async with await open_store(db) as store:
            return await _compact_once_or_wait(store, await session_id_of(store, session),
                                               wait, compact)

    payload = run(out, work)
    if fallbacks and payload.get("summarizer") == "extractive-fallback":
        # The LLM was asked for and not used: say why, in the JSON and on stderr.
        payload["fallback_reason"] = "; ".join(fallbacks)
        err_console.print("[yellow]warning:[/] the LLM summariser was not used, the offline "
                          f"summary was committed instead: {payload['fallback_reason']}",
                          markup=True, highlight=False)
    out.emit(payload, lambda: render_compaction(payload))
    if payload["status"] == "busy":
        raise typer.Exit(EXIT_BUSY)


WAIT_POLL_SECONDS = 0.5


async def _compact_once_or_wait(store: SessionStore, session: str, wait: bool,
                                compact: Any) -> Any:
    """Run `compact`; while another process holds the session's compaction lease, report
    `"status": "busy"` or, with --wait, poll until it is free."""
    import asyncio

    from ..store.errors import SessionBusyError

    while True:
        branch = await _load_healthy(store, session)
        try:
            return await compact(store, session, branch)
        except SessionBusyError as exc:
            if not wait:
                return {"status": "busy", "reason": str(exc)}
        await asyncio.sleep(WAIT_POLL_SECONDS)


def compaction_payload(outcome: Any, capacity: ModelCapacity, budget: Budget) -> dict[str, Any]:
    """The `compact --json` document: the outcome, the model and window it was fitted to,
    and why nothing stayed raw when that happens."""
    payload = {**outcome.to_json(), "model": capacity.model,
               "context_window": capacity.context_window, "tail_budget": budget.tail_budget}
    if outcome.status == "compacted" and outcome.kept_messages == 0:
        payload["why_none_kept"] = (
            f"the latest user turn is larger than the recent-tail budget of "
            f"{budget.tail_budget:,} tokens for this window, so it was folded into the summary "
            "too (a turn is kept whole or not at all); the next message starts the raw tail")
    return payload


# Re-exported (moved out in issue 39); imported last so `--help` keeps the commands' order.
from .view_cmds import (  # noqa: E402, F401
    context_command,
    project_command,
    show_command,
    verify_command,
)
