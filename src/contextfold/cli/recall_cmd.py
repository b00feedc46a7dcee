"""`contextfold recall SESSION QUERY`: search a session's branch (SPEC L1, L4)."""

from __future__ import annotations

import typer
from rich.markup import escape

from .app import DB_OPTION, JSON_OPTION, BadInput, Output, app, console, run


@app.command("recall")
def recall_command(
    session: str = typer.Argument(..., help="Session id, or any unique prefix of it, or "
                                  "`latest`."),
    query: str = typer.Argument(..., help="Words, identifiers (matched verbatim), \"a phrase\"."),
    limit: int = typer.Option(10, "--limit", min=1, help="Most matches."),
    any_term: bool = typer.Option(False, "--any", help="Match any term instead of all."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Full-text search of the session's own branch, compacted messages included."""
    out = Output(as_json)

    async def work() -> None:
        # Imported here: the store's search needs SQLAlchemy, `--help` does not.
        from ..runtime.recall import hit_dict
        from ..store import open_store
        from ..store.recall.recall_args import MAX_RESULTS

        if limit > MAX_RESULTS:
            raise BadInput(f"--limit must be at most {MAX_RESULTS}, not {limit}")
        from ..store.refs import resolve_session_id

        async with await open_store(db) as store:
            sid = await resolve_session_id(store, session)
            hits = await store.search_history(sid, query, limit=limit, any_term=any_term)
        matches = [hit_dict(h) for h in hits]

        def human() -> None:
            if not matches:
                console.print(f"no message on this branch matches {query!r}")
            for m in matches:
                console.print(f"[bold]{m['node_id']}[/]  turn {m['turn']}, position "
                              f"{m['position']}, {m['role']}  [dim]{m['created_at']}[/]")
                console.print(f"    {escape(m['snippet'])}")

        out.emit({"session_id": sid, "query": query, "matches": matches}, human)

    run(out, work)
