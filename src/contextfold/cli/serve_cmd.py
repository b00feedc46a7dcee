"""`contextfold serve` (the HTTP service, docs/service.md) and `contextfold token`."""

from __future__ import annotations

import typer

from ..errors import MissingExtraError
from .app import (
    DB_OPTION,
    JSON_OPTION,
    MEMORY_CACHE_OPTION,
    BadInput,
    Output,
    app,
    console,
    err_console,
    exit_code,
    run,
)
from .extras import require_extra
from .help import Typer
from .llm_choice import summarizer_options

SUMMARIZER_MODEL, SUMMARIZER_BASE_URL, SUMMARIZER_PROVIDER = summarizer_options(
    "its provider's API")
token_app = Typer(help="Bearer tokens of the service's tenants (stored hashed).",
                        no_args_is_help=True)
app.add_typer(token_app, name="token")


@app.command("serve")
def serve_command(
    db: str | None = DB_OPTION,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (non-loopback "
                             "needs --auth)."),
    port: int = typer.Option(8765, "--port", min=1, max=65535),
    workers: int = typer.Option(1, "--workers", min=1, max=64,
                                help="Worker processes (more than 1 needs PostgreSQL)."),
    auth: bool = typer.Option(False, "--auth", help="Require bearer tokens (one per tenant)."),
    model: str | None = typer.Option(
        None, "--model", help="Default model of new sessions (default: $CONTEXTFOLD_MODEL, "
        "else offline/echo, which needs no key)."),
    context_window: int | None = typer.Option(None, "--context-window", min=256,
                                              help="Default context window of new sessions."),
    allow_base_url: list[str] = typer.Option(
        [], "--allow-base-url", help="A base_url clients may choose for a keyless "
        "OpenAI-compatible server (repeatable; it never gets a server key)."),
    provider_url: list[str] = typer.Option(
        [], "--provider-url", help="PROVIDER=URL: serve PROVIDER's models at URL with its key "
        "(e.g. anthropic=http://gateway:9999; repeatable). A key goes only to its provider's "
        "own endpoint or the URL bound here."),
    allow_model: list[str] = typer.Option(
        [], "--allow-model", help="A model pattern tenants may use (fnmatch, e.g. "
        "'offline/*', 'anthropic/claude-haiku-*'; repeatable; default: any model the server "
        "can serve)."),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="A host name clients use, NAME or NAME:PORT, answered "
        "besides the loopback names and the bind address (repeatable; e.g. behind a "
        "reverse proxy)."),
    max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", min=1024),
    max_import_bytes: int = typer.Option(32 << 20, "--max-import-bytes", min=1024),
    max_message_chars: int = typer.Option(200_000, "--max-message-chars", min=1),
    rate_limit: int = typer.Option(600, "--rate-limit", min=0,
                                   help="Requests per minute per tenant (0: no limit)."),
    memory_cache: int = MEMORY_CACHE_OPTION,
    summarizer_model: str | None = SUMMARIZER_MODEL,
    summarizer_base_url: str | None = SUMMARIZER_BASE_URL,
    summarizer_provider: str | None = SUMMARIZER_PROVIDER,
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Serve sessions over HTTP (and the page at /): docs/service.md.

    Needs the server extra: pip install 'contextfold\\[server]'."""
    out = Output(False)
    try:
        require_extra("serve", "server")
    except MissingExtraError as exc:
        out.fail(exc, exit_code(exc))
    from ..providers.endpoints import parse_bindings
    from ..server.config import ServiceConfig
    from ..server.run import ServeError, check_models, check_options, serve

    try:
        bindings = parse_bindings(provider_url)
    except ValueError as exc:
        out.fail(BadInput(str(exc)), 2)
    config = ServiceConfig(db=db, auth=auth, model=model, context_window=context_window,
                           allow_base_urls=tuple(allow_base_url), provider_urls=bindings,
                           allow_models=tuple(allow_model),
                           allowed_hosts=tuple(allowed_host),
                           max_body_bytes=max_body_bytes, max_import_bytes=max_import_bytes,
                           max_message_chars=max_message_chars, rate_limit=rate_limit,
                           memory_bytes=memory_cache << 20,
                           summarizer_model=summarizer_model,
                           summarizer_base_url=summarizer_base_url,
                           summarizer_provider=summarizer_provider)
    try:  # each worker builds its own; fail here, before binding, if they cannot be used
        check_models(config)
    except ServeError as exc:
        out.fail(BadInput(str(exc)), 2)

    async def prepare() -> str:
        from ..store import open_store, resolve_url

        config.db = resolve_url(db)  # the same database for every worker
        # Migrate once, before the workers start.
        async with await open_store(config.db) as store:
            return store.dialect

    dialect = run(out, prepare)
    try:
        check_options(config, host, workers, dialect)
    except ServeError as exc:
        out.fail(BadInput(str(exc)), 2)
    from .._net import port_problem

    if (problem := port_problem(host, port)) is not None:
        out.fail(BadInput(problem), 2)
    shown = f"[{host}]" if ":" in host else host
    mode = "bearer tokens (--auth)" if auth else \
        "no --auth: listening on loopback only (tenant \"default\")"
    summaries = f"; summaries by {summarizer_model}" if summarizer_model else ""
    err_console.print(f"contextfold serve: http://{shown}:{port}/ ({dialect}, {workers} "
                      f"worker{'s' if workers > 1 else ''}; {mode}{summaries})",
                      highlight=False, markup=False)
    serve(config, host, port, workers, log_level)


@token_app.command("create")
def token_create(
    tenant: str = typer.Argument(..., help="Tenant the token acts as (created if new)."),
    label: str | None = typer.Option(None, "--label", help="A note to recognise it by."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a token for TENANT and print it once (only its SHA-256 is stored)."""
    out = Output(as_json)

    async def work() -> None:
        from ..store import open_store

        async with await open_store(db) as store:
            info, token = await store.create_token(tenant, label=label)
        out.emit({"id": info.id, "tenant": info.tenant_id, "label": info.label,
                  "token": token},
                 lambda: (console.print(token, highlight=False, markup=False),
                          err_console.print(f"token {info.id} for tenant {info.tenant_id}: "
                                            "shown once, store it now", highlight=False,
                                            markup=False)))

    run(out, work)


@token_app.command("list")
def token_list(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's tokens."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """List tokens: id, tenant, label, created, revoked (never the tokens)."""
    out = Output(as_json)

    async def work() -> None:
        from ..store import open_store

        async with await open_store(db) as store:
            tokens = await store.list_tokens(tenant)
        rows = [{"id": t.id, "tenant": t.tenant_id, "label": t.label,
                 "created_at": t.created_at.isoformat(),
                 "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None}
                for t in tokens]

        def human() -> None:
            from rich.table import Table

            table = Table()
            for col in ("id", "tenant", "label", "created", "revoked"):
                table.add_column(col)
            for r in rows:
                table.add_row(r["id"], r["tenant"], r["label"] or "", r["created_at"][:19],
                              (r["revoked_at"] or "")[:19])
            console.print(table)

        out.emit({"tokens": rows}, human)

    run(out, work)


@token_app.command("revoke")
def token_revoke(
    token_id: str = typer.Argument(..., help="The token's id (from `token list`)."),
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Revoke a token: it no longer authenticates (it stays listed)."""
    out = Output(as_json)

    async def work() -> None:
        from ..store import TokenNotFoundError, open_store

        async with await open_store(db) as store:
            try:
                info = await store.revoke_token(token_id)
            except TokenNotFoundError as exc:
                raise BadInput(str(exc)) from None
        out.emit({"id": info.id, "tenant": info.tenant_id, "revoked": True},
                 lambda: console.print(f"token {info.id} of tenant {info.tenant_id} revoked",
                                       highlight=False, markup=False))

    run(out, work)
