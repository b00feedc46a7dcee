"""The proxy's guards (SPEC Y8, Y5, W2), wired by `create_app` in one call, outermost first:

1. the host and origin policy (`guard.web.WebGuard`, the service's too);
2. `--auth`: a tenant's bearer token in `x-contextfold-token` (`ProxyAuth`);
3. paths that stay under the upstream's prefix (`SafePath`);
4. the body limit, counted while reading (`guard.body.BodyLimit`, `--max-body-bytes`).

Every refusal is the client protocol's own error body (`wire.bad_request`: OpenAI
`{"error": {...}}`, Anthropic `{"type": "error", "error": {...}}`), chosen by the path.

Why the token has a header of its own: the agent's `Authorization` / `x-api-key` is the key
the upstream wants (Y5: it passes through untouched, and the proxy holds no key of its own
to send instead), so the proxy's credential must travel beside it, in a header the upstream
never sees (`ProxyAuth` removes it). Every agent we run (Claude Code's
`ANTHROPIC_CUSTOM_HEADERS`, Pi's `headers`, the OpenAI and Anthropic SDKs'
`default_headers`, LangChain) can add one.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

from ..guard.asgi import ASGIApp, Receive, Scope, Send, header, send_json
from ..guard.bearer import BearerAuth, TokenRefused, bearer_value
from ..guard.body import BodyLimit
from ..guard.hosts import HostPolicy
from ..guard.web import WebGuard
from . import wire
from .config import ProxyConfig
from .paths import unsafe_segment
from .tenancy import CURRENT_TENANT

TOKEN_HEADER = "x-contextfold-token"


def protect(app: Starlette, config: ProxyConfig) -> Starlette:
    """`app` with the guards added (Starlette runs the last added first)."""

    def too_large(scope: Scope, limit: int) -> dict[str, Any]:
        return proxy_error(scope, 413, "payload_too_large",
                           f"the request body is larger than {limit} bytes (contextfold "
                           "proxy --max-body-bytes)")

    app.add_middleware(BodyLimit, limit_for=lambda _scope: config.max_body_bytes,  # type: ignore[arg-type]
                       too_large=too_large)
    app.add_middleware(SafePath)  # type: ignore[arg-type]
    app.add_middleware(ProxyAuth, required=config.auth)  # type: ignore[arg-type]
    app.add_middleware(WebGuard, policy=HostPolicy.of(config.allowed_hosts),  # type: ignore[arg-type]
                       error=proxy_error)
    return app


def protocol_of(scope: Scope) -> wire.Protocol:
    """The protocol a path speaks (Anthropic: `/v1/messages...`; else OpenAI's)."""
    path = scope.get("path", "")
    return "anthropic" if path.startswith(("/v1/messages", "/messages")) else "openai"


def proxy_error(scope: Scope, _status: int, _type: str, message: str) -> dict[str, Any]:
    """A guard's refusal as the client protocol's error body."""
    return wire.bad_request(protocol_of(scope), f"contextfold proxy: {message}")


class SafePath:
    """Refuse a path with `.` / `..` segments, also percent-encoded (`%2e%2e`), or encoded
    slashes (400): joined to the upstream's base URL such a path could leave its prefix
    (`--upstream http://host/tenant-a/v1` + `/v1/../../admin` is `/admin`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            bad = unsafe_segment(scope.get("path", ""))
            if bad is not None:
                await send_json(send, 400, proxy_error(
                    scope, 400, "bad_request", f"the path segment {bad[:100]!r} is not "
                    "forwarded: it could leave the upstream's path"))
                return
        await self.app(scope, receive, send)


class ProxyAuth:
    """`--auth` (`required`): the request's tenant from the token in `x-contextfold-token`
    (`Bearer <token>` or the bare token), checked like the service's (`guard.bearer`: bad
    tokens are rate-limited per client address); the tenant is set for the request
    (`tenancy.CURRENT_TENANT`). With or without `--auth`, the header is taken off the
    request, so a token never reaches the upstream."""

    def __init__(self, app: ASGIApp, *, required: bool) -> None:
        self.app = app
        self.required = required
        self._bearer: BearerAuth | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.required:
            await self.app(_without_token(scope), receive, send)
            return
        if self._bearer is None:  # the store opens with the app (its lifespan)
            self._bearer = BearerAuth(scope["app"].state.proxy.store,
                                      hint=f"{TOKEN_HEADER}: <token>")
        token = bearer_value(header(scope, TOKEN_HEADER.encode()), scheme_required=False)
        client = scope.get("client")
        try:
            tenant = await self._bearer.tenant(token, client[0] if client else None)
        except TokenRefused as exc:
            await send_json(send, exc.status, proxy_error(scope, exc.status, exc.type,
                                                          exc.message), exc.headers)
            return
        reset = CURRENT_TENANT.set(tenant)
        try:
            await self.app(_without_token(scope), receive, send)
        finally:
            CURRENT_TENANT.reset(reset)


def _without_token(scope: Scope) -> Scope:
    """`scope` without the `x-contextfold-token` header."""
    name = TOKEN_HEADER.encode()
    return {**scope, "headers": [(k, v) for k, v in scope.get("headers") or () if k != name]}
