"""The proxy's ASGI app: OpenAI Chat Completions, Anthropic Messages and the OpenAI
Responses API in front of an upstream.

Each request of the three goes through the one exchange (`exchange.py`: the mirror stores
and fits it, SPEC Y1-Y3, it is forwarded with the client's own key, Y5, and the reply is
recorded with its usage, E1, after the client has it), with a small adapter per protocol.
This module holds what the requests of one running proxy share (`Proxy`: the store, the
mirror, the bounded per-conversation cache of SPEC Y14) and the routes. Other paths
(`/v1/models`, `/v1/messages/count_tokens`, anything else) pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..runtime.held import Held
from ..runtime.mirror import Mirror, Synced
from ..store.protocol import SessionStore
from ..store.sql_store import SqlSessionStore
from .config import ProxyConfig
from .exchange import ChatAdapter, exchange, out_headers
from .guards import protect
from .paths import upstream_url
from .prefix_cache import PrefixCache
from .responses import ResponseLog, ResponsesAdapter
from .stats import SessionStats
from .tenancy import TenantRouted

log = logging.getLogger("contextfold.proxy")

# Never forwarded upstream: hop-by-hop, recomputed, or (accept-encoding) would make the
# upstream compress a stream the proxy reads as it passes.
_DROP_IN = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding",
            "keep-alive", "upgrade", "x-contextfold-session"}


class _HeldStats:
    """A session's proxy figures as the process holds them (SPEC Y14): when evicted, what
    was not written yet is written, and they are read back when the conversation returns."""

    busy = False

    def __init__(self, proxy: Proxy, session_id: str, stats: SessionStats) -> None:
        self.proxy, self.session_id, self.stats = proxy, session_id, stats
        self.written = stats.changes  # the changes the stored figures hold

    def evicted(self) -> None:
        if self.stats.changes != self.written:
            self.proxy.spawn(self.proxy.write_stats(self.session_id, self.stats))


class Proxy:
    """State shared by the requests of one running proxy."""

    def __init__(self, config: ProxyConfig, store: SessionStore, client: Any,
                 raw_store: SessionStore | None = None) -> None:
        self.config = config
        self.store = store
        # The store unscoped (no tenant): figures are written by session id, whoever's.
        self.raw_store = raw_store if raw_store is not None else store
        self.client = client
        # SPEC Y14: everything held per conversation, bounded by bytes, least recently
        # used out (the mirror's sessions, chain hashes, stored ids and chain ends, the
        # parsed bodies, the figures, the response log).
        self.held = Held(config.memory_bytes)
        # The store's write memos too, as `serve` does: one bound for the whole process.
        if isinstance(self.raw_store, SqlSessionStore):
            self.raw_store.hold_memos_in(self.held)
        # `defer`: a steady turn's user message is stored with its reply (or alone when
        # none comes), one write transaction per request (issue 26).
        self.mirror = Mirror(store, summarizer=config.summarizer, settings=config.settings,
                             defer=True, held=self.held)
        # each conversation's last list, parsed (issue 26)
        self.prefixes = PrefixCache(self.held)
        self.responses = ResponseLog(self.held)  # what response ids stand for (SPEC Y12)
        self.tasks: set[asyncio.Task[None]] = set()

    async def stats(self, synced: Synced) -> SessionStats:
        """The session's proxy figures: held, else as stored (a conversation this process
        takes up again, or evicted), else new."""
        key = ("stats", synced.session_id)
        held = self.held.get(key)
        if held is None:
            stats = SessionStats()
            if not synced.created:
                with contextlib.suppress(Exception):  # figures only: never fail a request
                    info = await self.raw_store.get_session(synced.session_id)
                    stats = SessionStats.from_json((info.metadata or {}).get("proxy_stats"))
            held = _HeldStats(self, synced.session_id, stats)
            self.held.put(key, held, stats.size())
        return held.stats

    def held_stats(self) -> list[_HeldStats]:
        return [v for k in self.held if isinstance(k, tuple) and k[0] == "stats"
                and (v := self.held.get(k)) is not None]

    async def write_stats(self, session_id: str, stats: SessionStats) -> None:
        """Write the session's figures (SPEC Y4, Q4) to its metadata."""
        changes = stats.changes
        try:
            await self.raw_store.update_session_metadata(session_id,
                                                         {"proxy_stats": stats.to_json()})
        except Exception:  # figures only: the client has its answer
            log.exception("writing the figures of session %s failed", session_id)
            return
        held = self.held.get(("stats", session_id))
        if held is not None and held.stats is stats:
            held.written = max(held.written, changes)

    def spawn(self, work: Any) -> None:
        """Run `work` in the background; the app's shutdown waits for it."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def url(self, request: Request) -> str:
        return upstream_url(self.config.upstream, request.url.path, request.url.query)

    def headers(self, request: Request) -> dict[str, str]:
        return {k: v for k, v in request.headers.items() if k.lower() not in _DROP_IN}


async def _passthrough(request: Request) -> Response:
    proxy: Proxy = request.app.state.proxy
    if request.url.path in ("/", "") and request.method in ("GET", "HEAD"):
        return JSONResponse({"service": "contextfold proxy", "upstream": "configured"})
    upstream = proxy.client.build_request(request.method, proxy.url(request),
                                          content=await request.body(),
                                          headers=proxy.headers(request))
    reply = await proxy.client.send(upstream)
    return Response(reply.content, status_code=reply.status_code,
                    headers=out_headers(reply.headers))


_OPENAI, _ANTHROPIC, _RESPONSES = ChatAdapter("openai"), ChatAdapter("anthropic"), \
    ResponsesAdapter()


async def _openai(request: Request) -> Response:
    return await exchange(request, _OPENAI)


async def _anthropic(request: Request) -> Response:
    return await exchange(request, _ANTHROPIC)


async def _responses(request: Request) -> Response:  # SPEC Y6
    return await exchange(request, _RESPONSES)


def create_app(config: ProxyConfig) -> Starlette:
    """The proxy app; the store and HTTP client open with the app and close with it."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        import httpx2

        from ..store import open_store

        store = await open_store(config.db)
        client = httpx2.AsyncClient(timeout=httpx2.Timeout(config.timeout, connect=10.0))
        app.state.proxy = Proxy(config, TenantRouted(store) if config.auth else store, client,
                                raw_store=store)
        try:
            yield
        finally:
            proxy = app.state.proxy
            await asyncio.gather(*proxy.tasks, return_exceptions=True)
            await proxy.mirror.wait_idle()
            for held in proxy.held_stats():  # the final figures
                if held.stats.changes != held.written:
                    await proxy.write_stats(held.session_id, held.stats)
            await asyncio.gather(*proxy.tasks, return_exceptions=True)
            await client.aclose()
            await store.close()

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return protect(Starlette(routes=[
        Route("/v1/chat/completions", _openai, methods=["POST"]),
        Route("/chat/completions", _openai, methods=["POST"]),
        Route("/v1/messages", _anthropic, methods=["POST"]),
        Route("/v1/responses", _responses, methods=["POST"]),
        Route("/responses", _responses, methods=["POST"]),
        Route("/{path:path}", _passthrough, methods=methods),
    ], lifespan=lifespan), config)
