"""Commands on stored sessions: import, sessions, compact, project, show."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from .app import (
    DB_OPTION,
    EXIT_BUSY,
    JSON_OPTION,
    BadInput,
    Output,
    app,
    console,
    err_console,
    run,
)
from .render import (
    SHOW_PAGE,
    count,
    render_compaction,
    render_context,
    render_import,
    render_projection,
    render_sessions,
    render_tree,
)

if TYPE_CHECKING:
    from ..core.budget import Budget, ModelCapacity
    from ..core.resolver import ModelResolver, ResolvedModel
    from ..core.tree import Branch
    from ..store.protocol import SessionReader, SessionStore
    from ..store.values import SessionInfo

T = TypeVar("T")

MODEL_OPTION = typer.Option(
    None, "--model", help="Model whose window to fit (default: the session's recorded model, "
    "else $CONTEXTFOLD_MODEL, else offline/echo)."
)
WINDOW_OPTION = typer.Option(
    None, "--context-window", help="Context window in tokens, for a model the catalog lacks."
)
SESSION_HELP = ("Session id, or any unique prefix of it, or `latest` (`contextfold sessions` "
                "lists them).")
UNKNOWN_MODEL_FIX = "--context-window N (or an entry in the $CONTEXTFOLD_MODELS overrides file)"


def recorded_model(branch: Any) -> str | None:
    """`core.resolver.recorded_model`, imported when a command runs rather than at start-up."""
    from ..core.resolver import recorded_model as recorded

    return recorded(branch)


def import_file(*args: Any, **kwargs: Any) -> Any:
    """`formats.import_file`, imported when a command runs rather than at start-up."""
    from ..formats import import_file as load

    return load(*args, **kwargs)


def resolve_model(
    explicit: str | None, recorded: str | None = None, context_window: int | None = None,
    *, compacts: bool = True, guaranteed: bool = True, resolver: ModelResolver | None = None,
    max_output: int | None = None, learned: int | None = None,
) -> ResolvedModel:
    """The model resolver's answer for a command's options, its errors in the CLI's words
    (bad input, exit 2): the explicit model, else the recorded one, else the default.

    For a command that compacts (`compacts`), a window too small to compact in is bad input
    naming the smallest that works: `guaranteed` for a command that compacts a whole
    recorded history at once, not for the chat (a few turns at a time); `project` only shows
    a request, whatever the window, and skips that check (and the summariser it loads).
    """
    from ..core.catalog import CatalogConfigError
    from ..core.resolver import InvalidWindowError, ModelResolver, UnknownModelError
    from ..core.resolver import WindowTooSmallError as TooSmall

    resolver = resolver or ModelResolver()
    try:
        resolved = resolver.resolve(explicit, recorded=recorded, context_window=context_window,
                                    max_output=max_output, learned=learned)
        if compacts and guaranteed:
            from ..summarize.extractive import smallest_summary_tokens

            resolver.check_window(resolved, smallest_summary_tokens(guaranteed=True))
        elif compacts:
            from ..runtime.sizing import check_live_window

            check_live_window(resolver, resolved)
    except InvalidWindowError as exc:
        option = "--max-output" if "output" in exc.what else "--context-window"
        raise BadInput(exc.explain(option)) from None
    except UnknownModelError as exc:
        raise BadInput(exc.explain(UNKNOWN_MODEL_FIX)) from None
    except CatalogConfigError as exc:  # the $CONTEXTFOLD_MODELS file is the user's to fix
        raise BadInput(f"$CONTEXTFOLD_MODELS: {exc}") from None
    except TooSmall as exc:
        raise BadInput(exc.explain("--context-window", "--max-output")) from None
    return resolved


def stderr_progress() -> Callable[[str], None]:
    """Progress lines of a long operation on stderr (stdout stays the command's result)."""
    start = time.monotonic()

    def say(line: str) -> None:
        err_console.print(f"[dim]{time.monotonic() - start:6.1f}s  {line}[/]", highlight=False)

    return say


def read_only(db: str | None, reads: Callable[[SessionReader], Awaitable[T]]) -> T:
    """Run a read-only command's `reads(store)`: the one place that picks the quick
    `sqlite3` snapshot of an embedded database (no SQLAlchemy or asyncio to import) or,
    whenever it cannot serve them exactly, the full store (docs/store.md). Synchronous:
    call it from a command's synchronous body."""
    from ..store.snapshot import read_only_store

    return read_only_store(db, reads)


async def session_id_of(store: SessionReader, ref: str) -> str:
    """The whole id of the session `ref` names: the id, a unique prefix of it or `latest`
    (`store.refs`, the one resolver of every face)."""
    from ..store.refs import resolve_session_id

    return await resolve_session_id(store, ref)


async def _healthy_and_metadata(store: SessionReader, ref: str
                                ) -> tuple[Branch, dict[str, Any]]:
    """`_load_healthy`'s branch and the session's metadata (what a face recorded of it)."""
    session_id = await session_id_of(store, ref)
    branch = await _load_healthy(store, session_id)
    return branch, dict((await store.get_session(session_id)).metadata)


def _sized_model(metadata: dict[str, Any]) -> str | None:
    from ..core.resolver import sized_for

    sized = sized_for(metadata)
    return sized[0] if sized else None


async def stored_model(store: SessionReader, session_id: str) -> str | None:
    """The model a stored session was written with: the branch's recorded model, else the
    one a face sized it for (what `project` and `compact` fit to without --model)."""
    branch = await store.load_branch(session_id)
    metadata = dict((await store.get_session(session_id)).metadata)
    return recorded_model(branch) or _sized_model(metadata)


def recorded_resolver(metadata: dict[str, Any]) -> Any:
    """The model resolver for a stored session: the window a face recorded for it counts."""
    from ..core.resolver import recorded_resolver as resolver_for

    return resolver_for(metadata)


async def _load_healthy(store: SessionReader, session_id: str) -> Branch:
    from ..core.tree import DamagedBranch

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


@app.command("sessions")
def sessions_command(db: str | None = DB_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List stored sessions: started / last written, messages, checkpoints, cost, model."""
    out = Output(as_json)

    def work() -> None:
        async def reads(store: SessionReader) -> list[dict[str, Any]]:
            return [await _session_row(store, s) for s in await store.list_sessions()]

        rows = read_only(db, reads)
        out.emit({"sessions": rows}, lambda: render_sessions(rows))

    run(out, work)


async def _session_row(store: SessionReader, info: SessionInfo) -> dict[str, Any]:
    """One `sessions` row: the stored fields plus what the branch says, and what it cost
    (SPEC Q4: the service's `cost` object, from the same helper)."""
    from ..billing import billed_model, session_bill
    from ..core.tree import Branch

    branch = await store.load_full_branch(info.id)
    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    # Messages only: a checkpoint written later is not the session's last message.
    said = [n.created_at for n in nodes if n.message is not None]
    from ..titles import shown_title

    return {"session_id": info.id, "title": shown_title(info.title, info.metadata),
            "leaf_id": info.leaf_id,
            "branch_revision": info.branch_revision, "read_only": info.read_only,
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
        resolver = recorded_resolver(metadata)  # a proxied session: the proxy's window
        resolved = resolve_model(model, recorded_model(branch) or _sized_model(metadata),
                                 context_window, resolver=resolver)
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
@app.command("project")
def project_command(
    session: str = typer.Argument(..., help=SESSION_HELP),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    format: str = typer.Option("openai", "--format", help="openai|anthropic"),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the next request in full: checkpoint summary and every raw message."""
    out = Output(as_json)
    if format not in ("openai", "anthropic"):
        out.fail(BadInput(f"--format must be 'openai' or 'anthropic', not {format!r}"), 2)

    def work() -> None:
        from ..core.estimator import estimate_request
        from ..core.projection import project
        from ..formats.request import export_session
        from ..stored_request import stored_system, stored_tools

        branch, metadata = read_only(db, lambda store: _healthy_and_metadata(store, session))
        # A proxied session is sized for the window the proxy used (its --model-window).
        resolved = resolve_model(model, recorded_model(branch) or _sized_model(metadata),
                                 context_window, compacts=False,
                                 resolver=recorded_resolver(metadata))
        capacity, budget = resolved.capacity, resolved.budget
        projection = project(branch)
        # The request contextfold's conversation sends (the service's too): its stored
        # system prompt and the recall tools, counted as the service counts them.
        system, tools = stored_system(metadata), stored_tools()
        body = export_session(projection, format=format, system=system)
        payload = {
            "model": capacity.model,
            "estimated_tokens": estimate_request(projection, capacity, system=system,
                                                 tools=tools).tokens,
            "safe_input_limit": budget.safe_input_limit,
            **({"system": body["system"]} if body.get("system") else {}),
            "tools": [t["name"] for t in tools],
            "messages": body["messages"],
        }
        out.emit(payload, lambda: render_projection(payload))

    run(out, work)


@app.command("context")
def context_command(
    session: str = typer.Argument(..., help=SESSION_HELP),
    model: str | None = MODEL_OPTION,
    context_window: int | None = WINDOW_OPTION,
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Where the next request's tokens go, by category, and when the next compaction comes.

    System prompt, tools, checkpoint, pins, recalled excerpts, recent messages, tool results
    and the free space below the safe input limit: the page's breakdown, the chat's
    /context."""
    out = Output(as_json)

    def work() -> None:
        from ..core.breakdown import context_report, history_figures
        from ..core.estimator import MessageCosts, estimate_request
        from ..core.projection import project
        from ..stored_request import stored_system, stored_tools

        async def reads(store: SessionReader) -> tuple[Any, ...]:
            whole = await session_id_of(store, session)
            branch, metadata = await _healthy_and_metadata(store, whole)
            full = await store.load_full_branch(whole)
            return whole, branch, metadata, getattr(full, "nodes", ())

        whole, branch, metadata, history = read_only(db, reads)
        resolved = resolve_model(model, recorded_model(branch) or _sized_model(metadata),
                                 context_window, compacts=False,
                                 resolver=recorded_resolver(metadata))
        capacity, budget = resolved.capacity, resolved.budget
        projection = project(branch)
        system, tools = stored_system(metadata), stored_tools()
        costs = MessageCosts(capacity)
        estimate = estimate_request(projection, capacity, system=system, tools=tools,
                                    costs=costs)
        full, checkpoints = history_figures(history, costs, system=system, tools=tools)
        payload = {"session_id": whole, "model": capacity.model,
                   **context_report(projection, costs, system=system, tools=tools,
                                    used=estimate.tokens, method=estimate.method,
                                    limit=budget.safe_input_limit,
                                    threshold=budget.auto_threshold,
                                    context_window=capacity.context_window,
                                    full_history=full, checkpoints=checkpoints)}
        out.emit(payload, lambda: render_context(payload))

    run(out, work)


@app.command("show")
def show_command(
    session: str = typer.Argument(..., help=SESSION_HELP),
    last: int | None = typer.Option(
        None, "--last", "--tail", min=0,
        help=f"Only the branch's newest N nodes and the forks off them (default: {SHOW_PAGE} "
             "on a terminal, all with --json; 0: all)."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The durable history as a tree (checkpoints marked) next to what the model sees.

    A page reads only the nodes it shows, however long the history."""
    out = Output(as_json)
    page = last if last is not None else (None if as_json else SHOW_PAGE)
    if page == 0:
        page = None

    def work() -> None:
        from ..core.tree import Branch, DamagedBranch

        async def reads(store: SessionReader) -> tuple[Any, ...]:
            sid = await session_id_of(store, session)
            info = await store.get_session(sid)
            if page is None:
                nodes = await store.load_tree(sid)
                branch = model_view = await store.load_full_branch(sid)
            else:
                nodes = await store.load_tree_page(sid, limit=page)
                branch = await store.load_branch_page(sid, limit=page)
                model_view = await store.load_branch(sid)
            problems = tuple(getattr(branch, "problems", ()) or
                             getattr(model_view, "problems", ()))
            if info.read_only and not problems:  # damage in summarised history, off the page
                problems = tuple(getattr(await store.load_full_branch(session), "problems", ()))
            return info, nodes, branch, model_view, problems

        info, nodes, branch, model_view, problems = read_only(db, reads)
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
        complete = page is None or (isinstance(branch, Branch) and branch.complete)
        if page is not None:
            payload["page"] = {"last": page, "complete": complete}
        out.emit(payload, lambda: render_tree(info, nodes, branch, model_view,
                                              page=None if complete else page))

    run(out, work)


@app.command("verify")
def verify_command(
    session: str = typer.Argument(..., help=SESSION_HELP + " Its whole tree is checked."),
    expect: str | None = typer.Option(
        None, "--expect", help="Head digest recorded earlier: fail unless the session's latest "
        "node still has it."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check a session's whole tree: every hash, the digest chain, links and the move log.

    Exit 0 when sound, 1 when damage or tampering is found (listed), 2 for bad input.
    """
    from ..store import open_store
    from ..store.verify import verify_tree

    out = Output(as_json)

    async def work() -> dict[str, Any]:
        async with await open_store(db) as store:
            sid = await session_id_of(store, session)
            report = await verify_tree(store, sid)
        payload = report.to_json()
        if expect is not None and report.heads.get(sid) != expect:
            payload["ok"] = False
            payload["problems"].append(
                f"head digest of session {sid} is {report.heads.get(sid)}, not the "
                f"expected {expect}: its history was rewritten")

        def human() -> None:
            verdict = "[green]sound[/]" if payload["ok"] else "[red]DAMAGED[/]"
            console.print(f"tree {report.tree_id}: {verdict}, {count(report.nodes, 'node')}, "
                          f"{count(report.sessions, 'session')}")
            for problem in payload["problems"][:50]:
                console.print(f"  [red]-[/] {problem}")
            console.print(f"head digest of {sid}: {report.heads.get(sid)}")

        out.emit(payload, human)
        return payload

    payload = run(out, work)
    if not payload["ok"]:
        raise typer.Exit(1)
