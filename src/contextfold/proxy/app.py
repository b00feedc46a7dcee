"""The proxy's ASGI app: OpenAI chat completions and Anthropic Messages in front of an upstream.

Each chat request goes through the mirror (SPEC Y1: stored by content, compacted if it does
not fit, Y2/Y3), is forwarded with the client's own headers and key (Y5: held in memory for
the one request, never stored or logged), and the reply, plain or streamed through as it
arrives, is recorded with its usage (E1) after the client has it. Other paths
(`/v1/models`, `/v1/messages/count_tokens`, anything else) pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..core.messages import Message
from ..core.resolver import SIZED_FOR_KEY
from ..errors import ContextfoldError
from ..guard.body import loads_bounded
from ..runtime.held import Held
from ..runtime.mirror import Mirror, Synced
from ..store.protocol import SessionStore
from . import wire
from .config import ProxyConfig
from .errors import refusal
from .guards import protect
from .identity import conversation_scope, salt_for, session_meta, session_title
from .learning import learn
from .paths import upstream_url
from .prefix_cache import PrefixCache
from .stats import SessionStats, encode
from .tenancy import TenantRouted

log = logging.getLogger("contextfold.proxy")

# Never forwarded either way: hop-by-hop, recomputed, or (accept-encoding) would make the
# upstream compress a stream the proxy reads as it passes.
_DROP_IN = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding",
            "keep-alive", "upgrade", "x-contextfold-session"}
_DROP_OUT = {"content-length", "transfer-encoding", "connection", "content-encoding",
             "keep-alive"}


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
        # used out (the mirror's sessions, the figures, the response log).
        self.held = Held(config.memory_bytes)
        # `defer`: a steady turn's user message is stored with its reply (or alone when
        # none comes), one write transaction per request (issue 26).
        self.mirror = Mirror(store, summarizer=config.summarizer, settings=config.settings,
                             defer=True, held=self.held)
        self.prefixes = PrefixCache()  # each conversation's last list, parsed (issue 26)
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


def _out_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_OUT}


async def _chat(request: Request, protocol: wire.Protocol, *, retried: bool = False) -> Response:
    proxy: Proxy = request.app.state.proxy
    if proxy.config.protocol not in (None, protocol):
        return JSONResponse(wire.bad_request(protocol, f"this proxy serves only the "
                                             f"{proxy.config.protocol} protocol"),
                            status_code=404)
    started = time.perf_counter()
    raw = await request.body()
    scope = conversation_scope(protocol, request.headers, salt_for(proxy.config))
    try:
        body = proxy.prefixes.loads(raw, (protocol, scope))  # what is new decoded (Y10)
        parsed = wire.parse(protocol, body, cache=proxy.prefixes, key=scope)
        capacity = proxy.config.capacity(parsed.model)
    except (ContextfoldError, ValueError) as exc:  # answered by kind (proxy/errors.py)
        status, error = refusal(protocol, exc)
        return JSONResponse(error, status_code=status)
    agent = request.headers.get("user-agent", "unknown")
    meta = {"proxy": session_meta(agent, parsed, protocol, request.headers),
            # the window it sized for: `project` and `compact` size this session alike
            SIZED_FOR_KEY: {"model": parsed.model, "context_window": capacity.context_window}}
    try:
        synced = await proxy.mirror.sync(parsed.messages, capacity=capacity, scope=scope,
                                         system=parsed.system, tools=parsed.tools,
                                         metadata=meta,
                                         title=session_title(request.headers, parsed.system))
    except ContextfoldError as exc:  # Y3 for a request too large; by kind for the rest
        status, error = refusal(protocol, exc)
        _log(proxy, None, parsed.model, len(raw), None, f"refused ({exc.kind})", status,
             started)
        return JSONResponse(error, status_code=status)
    forwarded, known = wire.build_with_pieces(parsed, body, synced)
    reply, note = await send_upstream(proxy, request, synced, forwarded, parsed.model,
                                      len(raw), known)
    with unless_answered(proxy, synced):
        return await _answer(proxy, request, protocol, parsed, synced, reply, note, raw,
                             capacity.context_window, started, retried)


@contextmanager
def unless_answered(proxy: Proxy, synced: Synced) -> Iterator[None]:
    """Around making the client's answer from the upstream's reply (every protocol's): if
    it breaks before the reply is handed on (an upstream cut mid-body, a cancelled request),
    nothing will record it, so say no reply comes (`Mirror.no_reply`): the session's next
    request does not wait for it, and a deferred user message is stored alone."""
    try:
        yield
    except BaseException:
        proxy.mirror.no_reply(synced)
        raise


async def _answer(proxy: Proxy, request: Request, protocol: wire.Protocol, parsed: Any,
                  synced: Synced, reply: Any, note: dict[str, Any], raw: bytes,
                  window: int, started: float, retried: bool) -> Response:
    """The client's answer from the upstream's reply (plain, or streamed through as it
    arrives), with the reply's record handed to a background task."""
    compaction, stats = note["compaction"], await proxy.stats(synced)
    if reply.status_code != 200 or not parsed.stream:
        content = await reply.aread()
        await reply.aclose()
        if reply.status_code != 200 and not retried and learn(
                proxy.config, parsed.model, reply.status_code, content,
                window) is not None:
            # Y9: the upstream named a smaller window; send this request once more, fitted.
            proxy.mirror.no_reply(synced)
            _log(proxy, note, parsed.model, len(raw), synced, compaction, reply.status_code,
                 started)
            log.info("learned the window of %s from the upstream: %d tokens", parsed.model,
                     proxy.config.learned[parsed.model])
            return await _chat(request, protocol, retried=True)
        task = BackgroundTask(_after, proxy, synced, None, stats)
        if reply.status_code == 200:
            try:
                message = wire.reply_of(protocol, loads_bounded(content), parsed.model)
            except ValueError:
                message = None
            task = BackgroundTask(_after, proxy, synced, message, stats)
        _log(proxy, note, parsed.model, len(raw), synced, compaction, reply.status_code,
             started)
        return Response(content, status_code=reply.status_code,
                        headers=_out_headers(reply.headers), background=task)
    reader = wire.StreamReader(protocol, parsed.model)

    async def finish() -> None:
        await reply.aclose()
        _log(proxy, note, parsed.model, len(raw), synced, compaction, reply.status_code,
             started)
        await _after(proxy, synced, reader.reply(), stats)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in reply.aiter_raw():
                reader.feed(chunk)
                yield chunk
        finally:
            # The client may hang up right after the last event (the SDKs do), which
            # cancels this generator: record the reply in a task of its own.
            task = asyncio.get_running_loop().create_task(finish())
            proxy.tasks.add(task)
            task.add_done_callback(proxy.tasks.discard)

    return StreamingResponse(relay(), status_code=200, headers=_out_headers(reply.headers))


async def send_upstream(proxy: Proxy, request: Request, synced: Synced,
                        forwarded: dict[str, Any], model: str, client_bytes: int,
                        known: Sequence[bytes | None] | None = None
                        ) -> tuple[Any, dict[str, Any]]:
    """Send a fitted body upstream (every protocol's one way): encode it (reusing the bytes
    the parse made, `known`), count its prefix reuse (Y4), tell the mirror a reply is due,
    and open the upstream's streamed answer. Returns it with the log note of the request."""
    stats = await proxy.stats(synced)
    data, pieces = encode(forwarded, known)
    reuse = stats.observe(pieces, synced.estimate.tokens)
    proxy.held.resize(("stats", synced.session_id), stats.size())
    compaction = ",".join(c.status for c in synced.compactions) or "-"
    proxy.mirror.expect_reply(synced)
    upstream = proxy.client.build_request("POST", proxy.url(request), content=data,
                                          headers={**proxy.headers(request),
                                                   "content-type": "application/json"})
    try:
        reply = await proxy.client.send(upstream, stream=True)
    except BaseException:  # a cancelled request too: the session must not wait for it
        proxy.mirror.no_reply(synced)
        raise
    note = dict(session=synced.session_id, model=model, client_bytes=client_bytes,
                forwarded=synced.estimate.tokens, compaction=compaction, reuse=reuse)
    return reply, note


async def _after(proxy: Proxy, synced: Synced, message: Message | None,
                 stats: SessionStats) -> None:
    """Record the reply (E1; starts the auto check, A1) and the session's proxy figures."""
    try:
        stats.bill(message)  # SPEC Q4: the upstream's reported usage, priced
        if message is not None:
            await proxy.mirror.record_reply(synced, message)
        else:
            proxy.mirror.no_reply(synced)
        if stats.requests <= 2 or stats.requests % 10 == 0:  # one write in ten, Y4 report
            await proxy.write_stats(synced.session_id, stats)
    except Exception:  # the client has its answer; a failed record is logged, not raised
        log.exception("recording the reply of session %s failed", synced.session_id)


def _log(proxy: Proxy, note: dict[str, Any] | None, model: str, client_bytes: int,
         synced: Synced | None, compaction: str, status: int, started: float) -> None:
    """One line per request (SPEC Y5: never a header, never a key)."""
    ms = (time.perf_counter() - started) * 1000
    if synced is None:
        log.info("session=- model=%s in=%dB -> refused compaction=%s upstream=%s latency=%.0fms",
                 model, client_bytes, compaction, status, ms)
        return
    assert note is not None
    log.info("session=%s model=%s in=%d msgs/%dB -> forwarded~%d tokens (%d msgs) "
             "compaction=%s upstream=%s latency=%.0fms prefix_reuse=%s",
             synced.session_id, model, len(synced.messages), client_bytes,
             synced.estimate.tokens, len(synced.projection.messages)
             + (1 if synced.prefix_text else 0), compaction, status, ms,
             "-" if note["reuse"] is None else f"{note['reuse']:.0%}")


async def _passthrough(request: Request) -> Response:
    proxy: Proxy = request.app.state.proxy
    if request.url.path in ("/", "") and request.method in ("GET", "HEAD"):
        return JSONResponse({"service": "contextfold proxy", "upstream": "configured"})
    upstream = proxy.client.build_request(request.method, proxy.url(request),
                                          content=await request.body(),
                                          headers=proxy.headers(request))
    reply = await proxy.client.send(upstream)
    return Response(reply.content, status_code=reply.status_code,
                    headers=_out_headers(reply.headers))


async def _openai(request: Request) -> Response:
    return await _chat(request, "openai")


async def _anthropic(request: Request) -> Response:
    return await _chat(request, "anthropic")


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

    from .responses import responses_endpoint  # imports this module's helpers

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return protect(Starlette(routes=[
        Route("/v1/chat/completions", _openai, methods=["POST"]),
        Route("/chat/completions", _openai, methods=["POST"]),
        Route("/v1/messages", _anthropic, methods=["POST"]),
        Route("/v1/responses", responses_endpoint, methods=["POST"]),  # SPEC Y6
        Route("/responses", responses_endpoint, methods=["POST"]),
        Route("/{path:path}", _passthrough, methods=methods),
    ], lifespan=lifespan), config)
