"""The MCP server: four tools over the store, on stdio or streamable HTTP (the `mcp` SDK).

`history_search` / `history_expand` are the runtime's recall tools (SPEC L2) and keep their
names, so an MCP client calls them `mcp__contextfold__history_search` (Claude Code) or
`contextfold_history_search` (OpenCode): the names the proxy recognises in a request to
name them in the checkpoint's recall note (L6). `pins_list` / `pin_add` are the pins of
N1-N2. Every tool takes an optional `session_id`; without it the conversation is found as
`which.py` says. Over HTTP the host and origin policy of the other faces applies (Y8) and
the body is bounded.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures (their
# annotations must be objects, `Context` and `SessionArg` among them, local to build_server).
import contextlib
import os
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from ..errors import MissingExtraError
from ..runtime.recall import EXPAND_TOOL, SEARCH_TOOL
from .tools import RecallTools, ToolFailed
from .which import Asked, root_directories

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer

SERVER_NAME = "contextfold"
SESSION_HEADER = "x-contextfold-session"
TOKEN_HEADER = "x-contextfold-token"  # `--auth`: a tenant's token, as the proxy takes it
MAX_BODY_BYTES = 1 << 20  # tool calls are small
ROOTS_TIMEOUT = 3.0
INSTRUCTIONS = (
    "Recall for this conversation: what contextfold folded out of the context is still in "
    "its durable history. history_search finds messages by words or identifiers; "
    "history_expand reads the original messages of a result; pins keep short facts in "
    "every request.")


def _sdk() -> Any:
    try:
        import mcp.server.mcpserver as sdk
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        raise MissingExtraError(
            "contextfold mcp needs the MCP SDK, which the base install leaves out: "
            "pip install 'contextfold[mcp]'") from exc
    return sdk


@dataclass(frozen=True)
class Defaults:
    """What the server was started with: `--session`, and over stdio the directory the
    client started it in (its working directory)."""

    session: str | None = None
    directory: str | None = None


ToolsFor = Callable[[Any], Awaitable[RecallTools]]  # the request's context -> its tools


def build_server(tools: RecallTools | ToolsFor, defaults: Defaults) -> "MCPServer":
    """The MCP server with the four tools bound to `tools` (or, under `--auth`, to the
    tools of the tenant whose token the request carries)."""
    sdk = _sdk()
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    server = sdk.MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)
    SessionArg = Annotated[str | None, Field(
        description="A session id or proxied session label; default: this client's "
                    "conversation (see docs/mcp.md).")]

    async def asked(ctx: Any, session_id: str | None) -> Asked:
        return Asked(session=session_id or _header(ctx.headers) or defaults.session,
                     directories=await _directories(ctx, defaults.directory),
                     client=_client_name(ctx))

    async def of(ctx: Any) -> RecallTools:
        if isinstance(tools, RecallTools):
            return tools
        try:
            return await tools(ctx)
        except ToolFailed as exc:
            raise ToolError(str(exc)) from None

    async def guarded(coro: Any) -> dict[str, Any]:
        try:
            return await coro
        except ToolFailed as exc:
            raise ToolError(str(exc)) from None

    @server.tool(name="history_search", description=SEARCH_TOOL.description)
    async def history_search(query: str, ctx: Context,
                             limit: Annotated[int | None, Field(
                                 ge=1, le=20, strict=True,
                                 description="Most matches (1-20, default 8).")] = None,
                             session_id: SessionArg = None) -> dict[str, Any]:
        return await guarded((await of(ctx)).search(await asked(ctx, session_id), query,
                                                          limit))

    @server.tool(name="history_expand", description=EXPAND_TOOL.description)
    async def history_expand(node_id: str, ctx: Context,
                             before: Annotated[int | None, Field(ge=0, le=200,
                                                                strict=True)] = None,
                             after: Annotated[int | None, Field(ge=0, le=200,
                                                               strict=True)] = None,
                             to_node_id: str | None = None,
                             max_tokens: Annotated[int | None, Field(ge=1, le=1_000_000,
                                                                    strict=True)] = None,
                             session_id: SessionArg = None) -> dict[str, Any]:
        return await guarded((await of(ctx)).expand(await asked(ctx, session_id), node_id,
                                          before=before, after=after, to_node_id=to_node_id,
                                          max_tokens=max_tokens))

    @server.tool(name="pins_list", description="The pinned facts every request of this "
                 "conversation carries verbatim, oldest first.")
    async def pins_list(ctx: Context, session_id: SessionArg = None) -> dict[str, Any]:
        return await guarded((await of(ctx)).pins(await asked(ctx, session_id)))

    @server.tool(name="pin_add", description="Pin a short text, or the message node_id of "
                 "this conversation, so every later request carries it verbatim (refused "
                 "when the pins would exceed their budget).")
    async def pin_add(ctx: Context, text: str | None = None, node_id: str | None = None,
                      session_id: SessionArg = None) -> dict[str, Any]:
        return await guarded((await of(ctx)).pin(await asked(ctx, session_id), text,
                                                 node_id))

    return server


def _header(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    value = headers.get(SESSION_HEADER)
    return value.strip() or None if value else None


def _client_name(ctx: "Context") -> str | None:
    params = ctx.session.client_params
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) and name else None


async def _directories(ctx: "Context", started_in: str | None) -> tuple[str, ...]:
    """The client's roots when it declares them, else the directory it started us in."""
    caps = ctx.client_capabilities
    if caps is not None and getattr(caps, "roots", None) is not None:
        import anyio

        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots are deprecated in newer protocol versions
            with anyio.fail_after(ROOTS_TIMEOUT):
                result = await ctx.session.list_roots()
            found = root_directories([str(r.uri) for r in result.roots])
            if found:
                return found
    return (started_in,) if started_in else ()


async def serve(db: str | None, *, tenant: str | None, defaults: Defaults,
                windows: Mapping[str, int], http: bool = False, host: str = "127.0.0.1",
                port: int = 8790, allowed_hosts: tuple[str, ...] = (),
                auth: bool = False) -> None:
    """Open the store and serve until the client (stdio) or a signal (HTTP) ends it.
    `auth` (HTTP): every request carries a tenant's token; its tools see that tenant only."""
    from ..store import open_store

    _sdk()  # name the missing extra before touching the database
    store = await open_store(db)
    try:
        if auth:
            from ..guard.bearer import BearerAuth

            bearer = BearerAuth(store, hint=f"{TOKEN_HEADER}: <token>")
            server = build_server(tenant_tools(store, bearer, windows), defaults)
            await _serve_http(server, host, port, allowed_hosts, bearer)
            return
        scoped = store.for_tenant(tenant) if tenant else store
        server = build_server(RecallTools(scoped, windows=windows), defaults)
        if not http:
            await server.run_stdio_async()
            return
        await _serve_http(server, host, port, allowed_hosts)
    finally:
        await store.close()


def request_token(headers: Mapping[str, str] | None) -> str | None:
    """The tenant token of a request: `x-contextfold-token`, else `Authorization: Bearer`."""
    from ..guard.bearer import bearer_value

    if not headers:
        return None
    return bearer_value(headers.get(TOKEN_HEADER), scheme_required=False) or \
        bearer_value(headers.get("authorization"))


def tenant_tools(store: Any, bearer: Any, windows: Mapping[str, int]) -> ToolsFor:
    """`--auth`: the tools of the tenant whose token the request carries (SPEC W1, L4)."""
    from ..guard.bearer import TokenRefused

    by_tenant: dict[str, RecallTools] = {}

    async def tools_for(ctx: Any) -> RecallTools:
        try:
            tenant = await bearer.tenant(request_token(ctx.headers), None)
        except TokenRefused as exc:
            raise ToolFailed(exc.message) from None
        if tenant not in by_tenant:
            by_tenant[tenant] = RecallTools(store.for_tenant(tenant), windows=windows)
        return by_tenant[tenant]

    return tools_for


class TokenGate:
    """`--auth` over HTTP: a request without a valid tenant token gets 401 before the SDK
    sees it (the tools check the token again, per call, for the tenant they act for)."""

    def __init__(self, app: Any, *, bearer: Any) -> None:
        self.app = app
        self.bearer = bearer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from ..guard.asgi import send_json
        from ..guard.bearer import TokenRefused

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or ()}
        client = scope.get("client")
        try:
            await self.bearer.tenant(request_token(headers), client[0] if client else None)
        except TokenRefused as exc:
            await send_json(send, exc.status, _error(scope, exc.status, exc.type,
                                                     exc.message), exc.headers)
            return
        await self.app(scope, receive, send)


def _error(_scope: Any, status: int, type_: str, message: str) -> dict[str, Any]:
    """A refusal before the SDK, as a JSON-RPC error body."""
    return {"jsonrpc": "2.0", "id": None,
            "error": {"code": -32600, "message": f"contextfold mcp: {message}",
                      "data": {"status": status, "type": type_}}}


def http_app(server: "MCPServer", allowed_hosts: tuple[str, ...] = (),
             bearer: Any = None) -> Any:
    """The streamable HTTP app at `/mcp`, behind the host and origin policy (SPEC Y8) and,
    with `bearer` (`--auth`), the tenant token check."""
    from mcp.server.transport_security import TransportSecuritySettings

    from ..guard.hosts import HostPolicy
    from ..guard.web import WebGuard

    app = server.streamable_http_app(
        max_request_body_size=MAX_BODY_BYTES,
        # The host and origin checks are WebGuard's, the same as the proxy's and service's.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    if bearer is not None:
        app.add_middleware(TokenGate, bearer=bearer)
    # Added last, so it runs first: a foreign host is refused before any token is looked at.
    app.add_middleware(WebGuard, policy=HostPolicy.of(allowed_hosts), error=_error)
    return app


async def _serve_http(server: "MCPServer", host: str, port: int,
                      allowed_hosts: tuple[str, ...], bearer: Any = None) -> None:
    import uvicorn

    from ..guard.hosts import with_bind_host

    app = http_app(server, with_bind_host(allowed_hosts, host, port), bearer)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()


def started_in() -> str | None:
    """The working directory this process was started in (the stdio client's)."""
    with contextlib.suppress(OSError):
        return os.getcwd()
    return None
