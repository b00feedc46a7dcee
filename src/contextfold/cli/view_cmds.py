"""Commands that show a stored session without changing it: project (the next request in
full), context (where its tokens go), show (the tree) and verify (hashes, digests, links).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from .app import (
    DB_OPTION,
    JSON_OPTION,
    BadInput,
    Output,
    app,
    console,
    run,
)
from .render import (
    SHOW_PAGE,
    count,
    render_context,
    render_projection,
    render_tree,
)
from .session_args import (
    MODEL_OPTION,
    SESSION_HELP,
    WINDOW_OPTION,
    _healthy_and_metadata,
    read_only,
    resolve_stored,
    session_id_of,
)

if TYPE_CHECKING:
    from ..store.protocol import SessionReader


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
        from ..core.sizing.estimator import estimate_request
        from ..core.view.projection import project
        from ..formats.request import export_session
        from ..stored_request import stored_system, stored_tools

        branch, metadata = read_only(db, lambda store: _healthy_and_metadata(store, session))
        # A proxied session is sized for the window the proxy used (its --model-window).
        resolved = resolve_stored(model, context_window, branch, metadata, compacts=False)
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
        from ..core.report.breakdown import context_report, history_figures
        from ..core.sizing.estimator import MessageCosts, estimate_request
        from ..core.view.projection import project
        from ..stored_request import stored_system, stored_tools

        async def reads(store: SessionReader) -> tuple[Any, ...]:
            whole = await session_id_of(store, session)
            branch, metadata = await _healthy_and_metadata(store, whole)
            full = await store.load_full_branch(whole)
            return whole, branch, metadata, getattr(full, "nodes", ())

        whole, branch, metadata, history = read_only(db, reads)
        resolved = resolve_stored(model, context_window, branch, metadata, compacts=False)
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
        from ..core.values.tree import Branch, DamagedBranch

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
    from ..store.audit.verify import verify_tree

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
