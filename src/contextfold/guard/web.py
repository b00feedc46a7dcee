"""`WebGuard`: the ASGI middleware that applies the host and origin policy (SPEC Y8) before
any handler runs, for the service and the proxy alike.

In order, for every HTTP request:

1. `Host` must be one of the server's names (`hosts.HostPolicy`), else 421: a page on a
   rebound name gets nothing, not even the page itself.
2. A state-changing request (POST, PUT, PATCH, DELETE) with an `Origin` must come from one
   of those names, else 403: no cross-site form post or `fetch()` reaches a handler.
3. A raw-body endpoint (the service's `/v1/import` and `/v1/replay`) takes only the content
   types a session file is sent with (or none, as SDKs and scripts send it), else 415: a
   `text/plain`, `multipart/form-data` or urlencoded form cannot post a file there.

Responses get the face's fixed headers (the service's page: CSP, `X-Frame-Options`, ...).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .asgi import ASGIApp, ErrorBody, Message, Receive, Scope, Send, header, send_json
from .hosts import HostPolicy

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# What a session file may be sent as: what the page sends (octet-stream), JSON and JSON
# lines; a request with no content type is an API client's (a browser adds `Origin` to any
# cross-site POST, which rule 2 already judges).
RAW_BODY_TYPES = frozenset({"application/octet-stream", "application/json",
                            "application/x-ndjson", "application/jsonl",
                            "application/x-jsonlines"})
# The page (SPEC Y8, docs/web.md): scripts, styles and requests only from its own origin, no
# framing, no content sniffing. Images may be data: (the favicon) and blob: (the replay chart).
PAGE_HEADERS: Mapping[str, str] = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


class WebGuard:
    """Refuse requests for a foreign host, from a foreign origin, or of the wrong content
    type for a raw-body path; answer in the face's own error shape (`error`)."""

    def __init__(self, app: ASGIApp, *, policy: HostPolicy, error: ErrorBody,
                 raw_body_paths: Collection[str] = (),
                 headers: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.policy = policy
        self.error = error
        self.raw_body_paths = frozenset(raw_body_paths)
        self.headers = [(k.encode("latin-1"), v.encode("latin-1"))
                        for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            status, type_, message = refusal
            await send_json(send, status, self.error(scope, status, type_, message),
                            dict((k.decode(), v.decode()) for k, v in self.headers))
            return
        if not self.headers:
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {bytes(k).lower() for k, _ in message.get("headers") or ()}
                message["headers"] = [*(message.get("headers") or ()),
                                      *((k, v) for k, v in self.headers if k not in present)]
            await send(message)

        await self.app(scope, receive, with_headers)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(status, type, sentence) when the request is refused; None when it may pass."""
        server = scope.get("server")
        host = header(scope, b"host")
        if not self.policy.host_ok(host, scope.get("scheme", "http"), server):
            shown = (host or "")[:200]
            return (421, "misdirected_request",
                    f"this server does not answer for the host name {shown!r}: it answers "
                    "its loopback names and its own address (start it with --allowed-host "
                    "NAME to add the name clients use)")
        method = scope.get("method", "GET")
        if method in STATE_CHANGING:
            origin = header(scope, b"origin")
            if origin is not None and not self.policy.origin_ok(origin, server):
                return (403, "forbidden_origin",
                        f"requests that change something are not accepted from the web page "
                        f"of another site (Origin {origin[:200]!r}); API clients send no "
                        "Origin header")
            if scope.get("path") in self.raw_body_paths:
                media = (header(scope, b"content-type") or "").split(";")[0].strip().lower()
                if media and media not in RAW_BODY_TYPES:
                    return (415, "unsupported_media_type",
                            f"send the session file as the raw body with Content-Type "
                            f"application/octet-stream (got {media[:100]!r})")
        return None
