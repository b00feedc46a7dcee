"""`contextfold proxy --upstream URL`: compaction for unmodified agents (SPEC Y1-Y5)."""

from __future__ import annotations

import typer

from ..errors import MissingExtraError
from .app import DB_OPTION, MEMORY_CACHE_OPTION, BadInput, Output, app, console, exit_code, run
from .extras import require_extra
from .llm_choice import summarizer_options

SUMMARIZER_MODEL, SUMMARIZER_BASE_URL, SUMMARIZER_PROVIDER = summarizer_options("the upstream")


@app.command("proxy")
def proxy_command(
    upstream: str = typer.Option(..., "--upstream", help="Base URL of the OpenAI- or "
                                 "Anthropic-compatible model server (with or without /v1)."),
    protocol: str | None = typer.Option(None, "--protocol", help="Serve only 'openai' "
                                        "(/v1/chat/completions) or 'anthropic' (/v1/messages); "
                                        "default both."),
    model_window: list[str] = typer.Option([], "--model-window", help="MODEL=TOKENS: the "
                                           "upstream's real context window for MODEL "
                                           "(repeatable; '*=TOKENS' for every model)."),
    port: int = typer.Option(8788, "--port", help="Port to listen on."),
    workers: int = typer.Option(1, "--workers", min=1, max=64,
                                help="Worker processes (more than 1 needs PostgreSQL)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on "
                             "(non-loopback needs --auth)."),
    auth: bool = typer.Option(False, "--auth", help="Require a tenant's token (`contextfold "
                              "token create`) in the x-contextfold-token header; the agent's "
                              "own key still goes to the upstream."),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="A host name clients use, NAME or NAME:PORT, answered "
        "besides the loopback names and the bind address (repeatable)."),
    max_body_bytes: int = typer.Option(64 << 20, "--max-body-bytes", min=1024,
                                       help="Largest request body (default 64 MiB)."),
    memory_cache: int = MEMORY_CACHE_OPTION,
    db: str | None = DB_OPTION,
    summarizer_model: str | None = SUMMARIZER_MODEL,
    summarizer_base_url: str | None = SUMMARIZER_BASE_URL,
    summarizer_provider: str | None = SUMMARIZER_PROVIDER,
) -> None:
    """Sit between an agent and its model: point the agent's base URL here.

    Stores every conversation, compacts what does not fit the upstream's window and forwards the rest as sent. Needs the proxy extra: pip install 'contextfold\\[proxy]'."""  # noqa: E501  (one paragraph: Rich keeps a docstring's line breaks)
    try:
        require_extra("proxy", "proxy")
    except MissingExtraError as exc:
        Output(False).fail(exc, exit_code(exc))
    from .._net import checked_base_url
    from ..guard.hosts import HostPolicy, is_loopback
    from ..proxy import ProxyConfig, llm_summarizer, parse_windows
    from ..proxy.serve import serve

    try:  # SPEC Y8: only a model server's http(s) URL
        checked_base_url(upstream, "--upstream")
    except ValueError as exc:
        console.print(str(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None
    if protocol not in (None, "openai", "anthropic"):
        console.print("--protocol must be 'openai' or 'anthropic'")
        raise typer.Exit(2)
    if not auth and not is_loopback(host):
        console.print(f"--host {host} without --auth would let anyone on the network store "
                      "conversations through this proxy: add --auth (tokens from `contextfold "
                      "token create TENANT`) or bind 127.0.0.1", markup=False, highlight=False)
        raise typer.Exit(2)
    try:
        HostPolicy.of(allowed_host)
    except ValueError as exc:
        console.print(str(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None
    try:
        windows = parse_windows(model_window)
    except ValueError as exc:
        console.print(str(exc))
        raise typer.Exit(2) from None
    config = ProxyConfig(upstream=upstream, windows=windows, protocol=protocol, db=db,
                         auth=auth, allowed_hosts=tuple(allowed_host),
                         max_body_bytes=max_body_bytes, memory_bytes=memory_cache << 20)
    if summarizer_model:
        try:
            config.summarizer = llm_summarizer(config, summarizer_model,
                                               base_url=summarizer_base_url,
                                               provider=summarizer_provider)
        except (LookupError, ValueError, ImportError) as exc:
            console.print(f"--summarizer-model {summarizer_model!r}: {exc}")
            raise typer.Exit(2) from None
    summarizer = None
    if workers > 1:
        config.db = check_workers(db, workers)
        if summarizer_model:  # each worker builds its own from these
            summarizer = {"model": summarizer_model, "base_url": summarizer_base_url,
                          "provider": summarizer_provider}
    from .._net import port_problem

    if (problem := port_problem(host, port)) is not None:
        Output(False).fail(BadInput(problem), 2)
    console.print(start_line(host, port, upstream, windows, summarizer_model, auth, workers),
                  markup=False, highlight=False)
    serve(config, host=host, port=port, workers=workers, summarizer=summarizer)


def check_workers(db: str | None, workers: int) -> str:
    """The store URL every worker opens, migrated once here, before they start; exits 2
    when `workers` processes cannot share it (SQLite: as `serve --workers` does)."""
    from .._workers import workers_problem

    out = Output(False)

    async def prepare() -> tuple[str, str]:
        from ..store import open_store, resolve_url

        url = resolve_url(db)
        async with await open_store(url) as store:
            return url, store.dialect

    url, dialect = run(out, prepare)
    problem = workers_problem(workers, dialect)
    if problem:
        out.fail(BadInput(f"{problem} (each worker keeps its own memo of the sessions, and "
                          "the store's conditional writes decide between them)"), 2)
    return url


def start_line(host: str, port: int, upstream: str, windows: dict[str, int],
               summarizer_model: str | None, auth: bool, workers: int = 1) -> str:
    """The sentence the proxy prints when it starts (what it listens on and how it sizes)."""
    shown = f"[{host}]" if ":" in host else host
    if windows:
        sizes = ", ".join(f"{'every model' if name == '*' else name} {tokens:,} tokens"
                          for name, tokens in windows.items())
        sizing = f"windows: {sizes}"
    else:
        sizing = "windows from the model catalog"
    access = "bearer tokens (--auth)" if auth else "no --auth: loopback only"
    if workers > 1:
        access += f"; {workers} workers"
    return (f"contextfold proxy: http://{shown}:{port}/ forwards to {upstream} ({sizing}; "
            f"summaries {'by ' + summarizer_model if summarizer_model else 'offline'}; "
            f"{access}).")
