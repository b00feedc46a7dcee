"""`contextfold mcp`: recall and pins of an agent's own conversation, as MCP tools (L2, L4)."""

from __future__ import annotations

import typer

from .app import DB_OPTION, EXIT_CODES, app


@app.command("mcp")
def mcp_command(
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP at "
                              "http://HOST:PORT/mcp instead of stdio."),
    port: int = typer.Option(8790, "--port", help="Port for --http."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address for --http "
                             "(non-loopback needs --auth)."),
    auth: bool = typer.Option(False, "--auth", help="--http: require a tenant's token "
                              "(`contextfold token create`) in x-contextfold-token or "
                              "Authorization: Bearer; each call sees its tenant only."),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="A host name clients use for --http, NAME or NAME:PORT "
        "(repeatable)."),
    session: str | None = typer.Option(
        None, "--session", envvar="CONTEXTFOLD_SESSION",
        help="The conversation: a session id or a proxied session label "
             "(x-contextfold-session). Default: found per call (docs/mcp.md)."),
    tenant: str | None = typer.Option(None, "--tenant", help="Serve only this tenant's "
                                      "sessions (the proxy's --auth tenants)."),
    model_window: list[str] = typer.Option([], "--model-window", help="MODEL=TOKENS as given "
                                           "to the proxy (sizes the pin budget)."),
    db: str | None = DB_OPTION,
) -> None:
    """Serve history_search, history_expand, pins_list and pin_add to an MCP client.

    Add it to Claude Code with `claude mcp add contextfold -- contextfold mcp`; docs/mcp.md
    says how each agent names its conversation."""
    # Messages go to stderr: over stdio, stdout is the protocol's.
    from ..errors import MissingExtraError
    from .extras import require_extra

    try:
        require_extra("mcp", "mcp")  # before any import of it: one line, no traceback
    except MissingExtraError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_CODES[exc.kind]) from None
    import anyio

    from ..errors import MissingExtraError
    from ..guard.hosts import HostPolicy, is_loopback
    from ..mcp.server import Defaults, serve, started_in
    from ..proxy.config import parse_windows

    if auth and not http:
        typer.echo("--auth is for --http (over stdio the server is the agent's own child)",
                   err=True)
        raise typer.Exit(2)
    if auth and tenant:
        typer.echo("--auth takes the tenant from each request's token: drop --tenant",
                   err=True)
        raise typer.Exit(2)
    if http and not auth and not is_loopback(host):
        typer.echo(f"--host {host} without --auth would let anyone on the network read "
                   "the stored conversations: add --auth or bind 127.0.0.1", err=True)
        raise typer.Exit(2)
    try:
        HostPolicy.of(allowed_host)
        windows = parse_windows(model_window)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    defaults = Defaults(session=session or None, directory=None if http else started_in())
    try:
        anyio.run(lambda: serve(db, tenant=tenant, defaults=defaults, windows=windows,
                                http=http, host=host, port=port,
                                allowed_hosts=tuple(allowed_host), auth=auth))
    except MissingExtraError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_CODES[exc.kind]) from None
    except KeyboardInterrupt:
        pass
