"""Commands on stored sessions: import, sessions, compact, project, show."""

from __future__ import annotations

import os
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
    render_compaction,
    render_import,
    render_projection,
    render_sessions,
    render_tree,
)

if TYPE_CHECKING:
    from ..core.budget import Budget, ModelCapacity
    from ..core.catalog import ModelCatalog
    from ..core.tree import Branch, DamagedBranch
    from ..store.protocol import SessionReader, SessionStore
    from ..store.values import SessionInfo

T = TypeVar("T")
DEFAULT_MODEL = "claude-sonnet-4-5"

MODEL_OPTION = typer.Option(
    None, "--model", help="Model whose window to fit (default: the session's recorded model)."
)
WINDOW_OPTION = typer.Option(
    None, "--context-window", help="Context window in tokens, for a model the catalog lacks."
)


def recorded_model(branch: Branch | DamagedBranch) -> str | None:
    """The model of the latest assistant reply on the branch, or of the latest checkpoint
    (the model it was fitted to), whichever is newer: after a compaction the branch may
    hold no reply yet, and the session's model has not changed."""
    from ..core.tree import Branch

    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    for node in reversed(nodes):
        msg = node.message
        if msg is not None and msg.role == "assistant":
            name = msg.model or (msg.usage.model if msg.usage else None)
            if name:
                return name
        if node.checkpoint is not None and node.checkpoint.model:
            return node.checkpoint.model
    return None


def import_file(*args: Any, **kwargs: Any) -> Any:
    """`formats.import_file`, imported when a command runs rather than at start-up."""
    from ..formats import import_file as load

    return load(*args, **kwargs)


def user_catalog() -> ModelCatalog:
    """The packaged catalog plus the overrides file named by $CONTEXTFOLD_MODELS, if any."""
    from ..core.catalog import default_catalog

    path = os.environ.get("CONTEXTFOLD_MODELS")
    return default_catalog().with_overrides(path) if path else default_catalog()


def resolve_model(
    explicit: str | None, recorded: str | None = None, context_window: int | None = None,
    *, compacts: bool = True,
) -> tuple[ModelCapacity, Budget]:
    """Capacity and budgets for the explicit model, else the recorded one, else the default.

    A recorded model the catalog does not know falls back to the default rather than
    failing: the user did not ask for it. An explicit unknown model is an error. For a
    command that compacts (`compacts`), a window too small to compact in is bad input, and
    the message names the smallest that works; `project` only shows a request, whatever the
    window, and skips that check (and the summariser it loads).
    """
    from ..core.budget import derive_budget
    from ..core.catalog import capacity_for

    if context_window is not None and context_window < 1:
        raise BadInput(f"--context-window must be a positive number of tokens, not "
                       f"{context_window}")
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
    if compacts:
        check_window(capacity)
    return capacity, derive_budget(capacity)


def smallest_window(capacity: ModelCapacity, *, guaranteed: bool = True) -> int | None:
    """The smallest context window (same max output) whose summary budget holds a
    checkpoint whatever the history (`guaranteed`), or can hold one at all; None if no
    window can (the model's max output is too small)."""
    from ..core.budget import derive_budget
    from ..summarize.extractive import smallest_summary_tokens

    need = smallest_summary_tokens(guaranteed=guaranteed)

    def fits(window: int) -> bool:
        b = derive_budget(capacity.model_copy(update={"context_window": window,
                                                      "max_input": None}))
        return b.summary_budget - b.ledger_budget >= need and b.tail_budget > 0

    high = 1 << 24
    if not fits(high):
        return None
    low = 1  # invariant: fits(high), not fits(low) unless low == 1
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid
    return high


def check_window(capacity: ModelCapacity, *, guaranteed: bool = True) -> None:
    """Bad input (exit 2) when the window is too small to compact in, saying what works.

    Commands that compact a whole recorded history at once insist on the `guaranteed`
    window; the chat (which compacts a few turns at a time) only on the window below which
    no checkpoint can ever fit.
    """
    from ..core.budget import derive_budget
    from ..summarize.extractive import smallest_summary_tokens

    smallest = smallest_window(capacity, guaranteed=guaranteed)
    if smallest is None:
        raise BadInput(f"{capacity.model}: a max output of {capacity.max_output} tokens leaves "
                       "no room for a checkpoint summary; give a larger --max-output")
    if capacity.context_window < smallest:
        have = derive_budget(capacity)
        raise BadInput(
            f"a context window of {capacity.context_window:,} tokens is too small for "
            f"{capacity.model}: it leaves {have.summary_budget - have.ledger_budget:,} tokens "
            f"for a checkpoint summary, which needs at least "
            f"{smallest_summary_tokens(guaranteed=guaranteed):,}; "
            f"the smallest window that works is {smallest:,} tokens (a history whose turns "
            "are very long may need more)")


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
    """List stored sessions: started / last written, messages, checkpoints, model."""
    out = Output(as_json)

    def work() -> None:
        async def reads(store: SessionReader) -> list[dict[str, Any]]:
            return [await _session_row(store, s) for s in await store.list_sessions()]

        rows = read_only(db, reads)
        out.emit({"sessions": rows}, lambda: render_sessions(rows))

    run(out, work)


async def _session_row(store: SessionReader, info: SessionInfo) -> dict[str, Any]:
    """One `sessions` row: the stored fields plus what the branch says."""
    from ..core.tree import Branch

    branch = await store.load_full_branch(info.id)
    nodes = branch.nodes if isinstance(branch, Branch) else branch.readable
    return {"session_id": info.id, "title": info.title, "leaf_id": info.leaf_id,
            "branch_revision": info.branch_revision, "read_only": info.read_only,
            "created_at": info.created_at.isoformat(),
            "first_message_at": min((n.created_at for n in nodes), default=info.created_at)
            .isoformat(),
            "last_message_at": max((n.created_at for n in nodes), default=info.created_at)
            .isoformat(),
            "messages": sum(1 for n in nodes if n.message is not None),
            "checkpoints": sum(1 for n in nodes if n.checkpoint is not None),
            "model": recorded_model(branch) or info.metadata.get("model")}


@app.command("compact")
def compact_command(
    session: str = typer.Argument(..., help="Session id (`contextfold sessions` lists them)."),
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
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Compact a session now (manual compaction: a no-op is a success with a reason)."""
    out = Output(as_json)
    if summarizer not in ("extractive", "llm"):
        out.fail(BadInput(f"--summarizer must be 'extractive' or 'llm', not {summarizer!r}"), 2)

    fallbacks: list[str] = []

    async def compact(store: SessionStore, branch: Branch) -> dict[str, Any]:
        from ..runtime.compaction import compact_session
        from ..runtime.summarizers import offline_summarize

        chosen: list[Any] = []
        fitted: list[tuple[ModelCapacity, Budget]] = []

        def resolve(loaded: Branch) -> tuple[ModelCapacity, Budget]:
            # The branch is read once, inside the compaction (a long history is big).
            capacity, budget = resolve_model(model, recorded_model(loaded), context_window)
            fitted.append((capacity, budget))
            if summarizer == "llm":
                from .llm_choice import llm_summarize_for

                chosen.append(llm_summarize_for(capacity, model=summarizer_model,
                                                base_url=base_url,
                                                fallback_reasons=fallbacks))
            return capacity, budget

        async def summarize(plan: Any) -> Any:
            return await (chosen[0] if chosen else offline_summarize)(plan)

        outcome = await compact_session(store, session, resolve=resolve, summarize=summarize,
                                        instructions=instructions, progress=stderr_progress(),
                                        branch=branch)
        capacity, budget = fitted[-1] if fitted else resolve_model(
            model, recorded_model(branch), context_window)
        return compaction_payload(outcome, capacity, budget)

    async def work() -> dict[str, Any]:
        from ..store import open_store

        async with await open_store(db) as store:
            return await _compact_once_or_wait(store, session, wait, compact)

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
            return await compact(store, branch)
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
    session: str = typer.Argument(..., help="Session id (`contextfold sessions` lists them)."),
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

        branch = read_only(db, lambda store: _load_healthy(store, session))
        capacity, budget = resolve_model(model, recorded_model(branch), context_window,
                                         compacts=False)
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
    from ..store import open_store
    from ..store.verify import verify_tree

    out = Output(as_json)

    async def work() -> dict[str, Any]:
        async with await open_store(db) as store:
            report = await verify_tree(store, session)
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
