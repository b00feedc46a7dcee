"""Commands on stored sessions: import, sessions, compact, project, show."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ..core.budget import Budget, ModelCapacity, derive_budget
from ..core.catalog import ModelCatalog, capacity_for, default_catalog
from ..core.estimator import estimate_request
from ..core.plan import Plan
from ..core.projection import project
from ..core.tree import Branch, DamagedBranch
from ..formats import export_session, import_file
from ..runtime.compaction import Summarize, compact_session, extractive_summarize
from ..store import open_store
from .app import DB_OPTION, JSON_OPTION, BadInput, Output, app, console, err_console, run
from .render import (
    SHOW_PAGE,
    render_compaction,
    render_import,
    render_projection,
    render_tree,
)

DEFAULT_MODEL = "claude-sonnet-4-5"

MODEL_OPTION = typer.Option(
    None, "--model", help="Model whose window to fit (default: the session's recorded model)."
)
WINDOW_OPTION = typer.Option(
    None, "--context-window", help="Context window in tokens, for a model the catalog lacks."
)


def recorded_model(branch: Branch | DamagedBranch) -> str | None:
    """The model of the latest assistant reply on the branch, if it says."""
    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    for node in reversed(nodes):
        msg = node.message
        if msg is not None and msg.role == "assistant":
            name = msg.model or (msg.usage.model if msg.usage else None)
            if name:
                return name
    return None


def user_catalog() -> ModelCatalog:
    """The packaged catalog plus the overrides file named by $CONTEXTFOLD_MODELS, if any."""
    path = os.environ.get("CONTEXTFOLD_MODELS")
    return default_catalog().with_overrides(path) if path else default_catalog()


def resolve_model(
    explicit: str | None, recorded: str | None = None, context_window: int | None = None
) -> tuple[ModelCapacity, Budget]:
    """Capacity and budgets for the explicit model, else the recorded one, else the default.

    A recorded model the catalog does not know falls back to the default rather than
    failing: the user did not ask for it. An explicit unknown model is an error.
    """
    catalog = user_catalog()
    if explicit:
        capacity = capacity_for(explicit, context_window=context_window, catalog=catalog)
    else:
        capacity = None
        if recorded:
            try:
                capacity = capacity_for(recorded, context_window=context_window,
                                        catalog=catalog)
            except LookupError:
                capacity = None
        if capacity is None:
            capacity = capacity_for(DEFAULT_MODEL, context_window=context_window,
                                    catalog=catalog)
    return capacity, derive_budget(capacity)


def stderr_progress() -> Callable[[str], None]:
    """Progress lines of a long operation on stderr (stdout stays the command's result)."""
    start = time.monotonic()

    def say(line: str) -> None:
        err_console.print(f"[dim]{time.monotonic() - start:6.1f}s  {line}[/]", highlight=False)

    return say


async def _load_healthy(store: Any, session_id: str) -> Branch:
    branch = await store.load_branch(session_id)
    if isinstance(branch, DamagedBranch):
        problems = "; ".join(str(p) for p in branch.problems)
        raise BadInput(f"session {session_id} is damaged and read-only: {problems}")
    if (await store.get_session(session_id)).read_only:  # damage in summarised history
        full = await store.load_full_branch(session_id)
        problems = "; ".join(str(p) for p in getattr(full, "problems", ())) or "marked read-only"
        raise BadInput(f"session {session_id} is damaged and read-only: {problems}")
    return branch


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
        result = import_file(path, format=format, max_bytes=max_bytes)
        store = await open_store(db)
        try:
            info = await store.import_tree(result.nodes, result.leaf_id, title=path.name,
                                           metadata=result.metadata)
        finally:
            await store.close()
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


@app.command("sessions")
def sessions_command(db: str | None = DB_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List stored sessions."""
    out = Output(as_json)

    async def work() -> None:
        store = await open_store(db)
        try:
            sessions = await store.list_sessions()
        finally:
            await store.close()
        rows = [{"session_id": s.id, "title": s.title, "leaf_id": s.leaf_id,
                 "branch_revision": s.branch_revision, "read_only": s.read_only,
                 "created_at": str(s.created_at)} for s in sessions]

        def human() -> None:
            for r in rows:
                flag = " [red](read-only)[/]" if r["read_only"] else ""
                console.print(f"{r['session_id']}  {r['title'] or ''}  rev {r['branch_revision']}"
                              f"{flag}")
            if not rows:
                console.print("no sessions yet: try `contextfold import FILE` or "
                              "`contextfold demo`")

        out.emit({"sessions": rows}, human)

    run(out, work)


@app.command("compact")
def compact_command(
    session: str = typer.Argument(..., help="Session id."),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    summarizer: str = typer.Option("extractive", "--summarizer", help="extractive|llm"),
    summarizer_model: str | None = typer.Option(
        None, "--summarizer-model", help="Model for --summarizer llm (default: --model)."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint."),
    instructions: str | None = typer.Option(None, "--instructions",
                                            help="What the summary must keep."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Compact a session now (manual compaction: a no-op is a success with a reason)."""
    out = Output(as_json)
    if summarizer not in ("extractive", "llm"):
        out.fail(BadInput(f"--summarizer must be 'extractive' or 'llm', not {summarizer!r}"), 2)

    fallbacks: list[str] = []

    async def work() -> None:
        store = await open_store(db)
        say = stderr_progress()
        chosen: list[Summarize] = []

        def resolve(branch: Branch) -> tuple[ModelCapacity, Budget]:
            # The branch is read once, inside the compaction (a long history is big).
            capacity, budget = resolve_model(model, recorded_model(branch), context_window)
            if summarizer == "llm":
                from .llm_choice import llm_summarize_for

                chosen.append(llm_summarize_for(capacity, model=summarizer_model,
                                                base_url=base_url,
                                                fallback_reasons=fallbacks))
            return capacity, budget

        async def summarize(plan: Plan) -> tuple[str, str]:
            return await (chosen[0] if chosen else extractive_summarize)(plan)

        try:
            outcome = await compact_session(store, session, resolve=resolve,
                                            summarize=summarize, instructions=instructions,
                                            progress=say)
        finally:
            await store.close()
        payload = outcome.to_json()
        if fallbacks and payload.get("summarizer") == "extractive-fallback":
            # The LLM was asked for and not used: say why, in the JSON and on stderr.
            payload["fallback_reason"] = "; ".join(fallbacks)
            err_console.print("[yellow]warning:[/] the LLM summariser was not used, the offline "
                              f"summary was committed instead: {payload['fallback_reason']}")
        out.emit(payload, lambda: render_compaction(payload))

    run(out, work)


@app.command("project")
def project_command(
    session: str = typer.Argument(..., help="Session id."),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    format: str = typer.Option("openai", "--format", help="openai|anthropic"),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print what the model would receive next (the provider request's messages)."""
    out = Output(as_json)
    if format not in ("openai", "anthropic"):
        out.fail(BadInput(f"--format must be 'openai' or 'anthropic', not {format!r}"), 2)

    async def work() -> None:
        store = await open_store(db)
        try:
            branch = await _load_healthy(store, session)
        finally:
            await store.close()
        capacity, budget = resolve_model(model, recorded_model(branch), context_window)
        projection = project(branch)
        body = export_session(projection, format=format)
        payload = {
            "model": capacity.model,
            "estimated_tokens": estimate_request(projection, capacity).tokens,
            "safe_input_limit": budget.safe_input_limit,
            **({"system": body["system"]} if body.get("system") else {}),
            "messages": body["messages"],
        }
        out.emit(payload, lambda: render_projection(payload))

    run(out, work)


@app.command("show")
def show_command(
    session: str = typer.Argument(..., help="Session id."),
    last: int | None = typer.Option(
        None, "--last", min=1,
        help=f"Only the branch's last N nodes and the forks off them (default: {SHOW_PAGE} "
             "on a terminal, all with --json)."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The durable history as a tree (checkpoints marked) next to what the model sees.

    A page reads only the nodes it shows, however long the history."""
    out = Output(as_json)
    page = last if last is not None else (None if as_json else SHOW_PAGE)

    async def work() -> None:
        store = await open_store(db)
        try:
            info = await store.get_session(session)
            if page is None:
                nodes = await store.load_tree(session)
                branch = model_view = await store.load_full_branch(session)
            else:
                nodes = await store.load_tree_page(session, limit=page)
                branch = await store.load_branch_page(session, limit=page)
                model_view = await store.load_branch(session)
            problems = tuple(getattr(branch, "problems", ()) or
                             getattr(model_view, "problems", ()))
            if info.read_only and not problems:  # damage in summarised history, off the page
                problems = tuple(getattr(await store.load_full_branch(session), "problems", ()))
        finally:
            await store.close()
        if info.read_only and isinstance(model_view, Branch):
            # One report everywhere (SPEC D2): the readable view, marked read-only.
            model_view = DamagedBranch(readable=model_view.nodes, problems=problems)
        on_branch = ({n.id for n in branch.nodes} if isinstance(branch, Branch)
                     else {n.id for n in branch.readable})
        rows = [{"id": n.id, "parent_id": n.parent_id, "kind": n.kind,
                 "role": n.message.role if n.message else None,
                 "on_branch": n.id in on_branch,
                 "created_at": n.created_at.isoformat()} for n in nodes]
        payload = {"session_id": info.id, "leaf_id": info.leaf_id,
                   "branch_revision": info.branch_revision, "read_only": info.read_only,
                   "problems": [str(p) for p in problems],
                   "nodes": rows}
        if page is not None:
            payload["page"] = {"last": page, "complete": isinstance(branch, Branch)
                               and branch.complete}
        out.emit(payload, lambda: render_tree(info, nodes, branch, model_view,
                                              page=page is not None))

    run(out, work)


@app.command("verify")
def verify_command(
    session: str = typer.Argument(..., help="Session id (its whole tree is checked)."),
    expect: str | None = typer.Option(
        None, "--expect", help="Head digest recorded earlier: fail unless the session's leaf "
        "still has it."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check a session's whole tree: every hash, the digest chain, links and the move log.

    Exit 0 when sound, 1 when damage or tampering is found (listed), 2 for bad input.
    """
    from ..store.verify import verify_tree

    out = Output(as_json)

    async def work() -> dict[str, Any]:
        store = await open_store(db)
        try:
            report = await verify_tree(store, session)
        finally:
            await store.close()
        payload = report.to_json()
        if expect is not None and report.heads.get(session) != expect:
            payload["ok"] = False
            payload["problems"].append(
                f"head digest of session {session} is {report.heads.get(session)}, not the "
                f"expected {expect}: its history was rewritten")

        def human() -> None:
            verdict = "[green]sound[/]" if payload["ok"] else "[red]DAMAGED[/]"
            console.print(f"tree {report.tree_id}: {verdict}, {report.nodes} nodes, "
                          f"{report.sessions} sessions")
            for problem in payload["problems"][:50]:
                console.print(f"  [red]-[/] {problem}")
            console.print(f"head digest of {session}: {report.heads.get(session)}")

        out.emit(payload, human)
        return payload

    payload = run(out, work)
    if not payload["ok"]:
        raise typer.Exit(1)
