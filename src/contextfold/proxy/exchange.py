"""One exchange for every protocol the proxy serves: Chat Completions, Anthropic Messages
and the OpenAI Responses API.

A request goes through the same steps whatever its protocol:

    parse → identify the conversation in its scope → fit → forward → record → answer

The mirror stores what is new and fits the request (SPEC Y1-Y3), the body is forwarded with
the client's own headers and key (Y5: held for the one request, never stored or logged), the
answer, plain or streamed through as it arrives, is handed on and its reply recorded with
its usage (E1) and cost (Q4) after the client has it. An overflow that names a smaller
window is learned and the request sent once more, fitted (Y9). Every protocol gets each of
these once, here; what differs is a small `Adapter`: how a body is read and built, how a
reply is read (plain or streamed), and the protocol's own continuation handles (the
Responses API's response ids, `responses.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..core.sizing.resolver import SIZED_FOR_KEY
from ..core.values.messages import Message
from ..core.values.surrogates import replace_surrogates, surrogate_note
from ..errors import ContextfoldError
from ..guard.body import loads_bounded
from ..runtime.mirror import Synced
from . import wire
from .errors import refusal
from .identity import conversation_scope, owner_of, salt_for, session_meta, session_title
from .learning import learn
from .provider_compaction import (
    asks_provider_compaction,
    compacts_now,
    holds_provider_compaction,
)
from .stats import SessionStats, encode

if TYPE_CHECKING:
    from .app import Proxy

log = logging.getLogger("contextfold.proxy")

# Never forwarded back: recomputed, or hop-by-hop.
_DROP_OUT = {"content-length", "transfer-encoding", "connection", "content-encoding",
             "keep-alive"}


def out_headers(headers: Any) -> dict[str, str]:
    """The upstream's answer headers the client gets."""
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_OUT}


class Refused(Exception):
    """An adapter's answer instead of going on (a protocol's own "not found")."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body


class Reader:
    """A streamed answer read as it passes: `feed` each chunk; `reply()` the reply message
    and the protocol's whole response object (None for either when it did not finish)."""

    def feed(self, chunk: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def finished(self) -> bool:
        return False

    def reply(self) -> tuple[Message | None, Any]:  # pragma: no cover - interface
        raise NotImplementedError


class Adapter:
    """What one protocol adds to the exchange. `name`: its error vocabulary and scope
    (`wire.Protocol`); `serves`: the `--protocol` it belongs to."""

    name: wire.Protocol
    serves: str

    async def parse(self, proxy: Proxy, raw: bytes, scope: str, owner: str) -> tuple[Any, Any]:
        """(the mirror's view of the request, its decoded body); `ContextfoldError` or
        `ValueError` for a request the protocol refuses, `Refused` for an answer of its own."""
        raise NotImplementedError

    def build(self, parsed: Any, body: Any, synced: Synced
              ) -> tuple[dict[str, Any], Sequence[bytes | None] | None]:
        """The body to forward, and the bytes already made of each message (or None)."""
        raise NotImplementedError

    def read(self, data: Any, model: str) -> tuple[Message | None, Any]:
        """The reply message of a plain answer's JSON, and the response object."""
        raise NotImplementedError

    def reader(self, model: str) -> Reader:
        raise NotImplementedError

    def answered(self, proxy: Proxy, synced: Synced, parsed: Any, owner: str,
                 response: Any) -> None:
        """The whole answer arrived (before the client can name it): hold what its
        continuation handle stands for."""

    async def recorded(self, proxy: Proxy, synced: Synced, owner: str, response: Any) -> None:
        """The reply was recorded: keep the handle in the store too."""


class ChatAdapter(Adapter):
    """Chat Completions (`openai`) and Messages (`anthropic`): `wire.py`."""

    def __init__(self, name: wire.Protocol) -> None:
        self.name = name
        self.serves = name

    async def parse(self, proxy: Proxy, raw: bytes, scope: str, owner: str) -> tuple[Any, Any]:
        body = proxy.prefixes.loads(raw, (self.name, scope))  # what is new decoded (Y10)
        return wire.parse(self.name, body, cache=proxy.prefixes, key=scope), body

    def build(self, parsed: Any, body: Any, synced: Synced
              ) -> tuple[dict[str, Any], Sequence[bytes | None] | None]:
        return wire.build_with_pieces(parsed, body, synced)

    def read(self, data: Any, model: str) -> tuple[Message | None, Any]:
        return wire.reply_of(self.name, data, model), data

    def reader(self, model: str) -> Reader:
        return _ChatReader(wire.StreamReader(self.name, model))


class _ChatReader(Reader):
    def __init__(self, inner: wire.StreamReader) -> None:
        self.inner = inner

    def feed(self, chunk: bytes) -> None:
        self.inner.feed(chunk)

    def reply(self) -> tuple[Message | None, Any]:
        return self.inner.reply(), None


def _clean_system(parsed: Any) -> None:
    """The system text as messages are read: a lone surrogate becomes U+FFFD (docs/store.md,
    "Hostile input"), so what is sized, stored in the session's metadata (its working
    directory, its agent) and forwarded (`prefix_cache.dumps`) is the same text, whatever
    the protocol put the system prompt in."""
    if isinstance(parsed.system, str):
        parsed.system, count = replace_surrogates(parsed.system)
        if count:
            log.warning("system prompt: %s", surrogate_note(count))


@contextmanager
def unless_answered(proxy: Proxy, synced: Synced) -> Iterator[None]:
    """Around making the client's answer from the upstream's reply: if it breaks before the
    reply is handed on (an upstream cut mid-body, a cancelled request), nothing will record
    it, so say no reply comes (`Mirror.no_reply`): the session's next request does not wait
    for it, and a deferred user message is stored alone."""
    try:
        yield
    except BaseException:
        proxy.mirror.no_reply(synced)
        raise


async def exchange(request: Request, adapter: Adapter, *, retried: bool = False) -> Response:
    """Serve one client request of `adapter`'s protocol (the steps of the module doc)."""
    proxy: Proxy = request.app.state.proxy
    if proxy.config.protocol not in (None, adapter.serves):
        return JSONResponse(wire.bad_request(adapter.name, f"this proxy serves only the "
                                             f"{proxy.config.protocol} protocol"),
                            status_code=404)
    started = time.perf_counter()
    raw = await request.body()
    salt = salt_for(proxy.config)
    # SPEC Y12: the conversation's scope, and the owner of the handles it creates.
    scope = conversation_scope(adapter.name, request.headers, salt)
    owner = owner_of(request.headers, salt)
    try:
        parsed, body = await adapter.parse(proxy, raw, scope, owner)
        capacity = proxy.config.capacity(parsed.model)
    except Refused as refused:
        return JSONResponse(refused.body, status_code=refused.status)
    except (ContextfoldError, ValueError) as exc:  # answered by kind (proxy/errors.py)
        status, error = refusal(adapter.name, exc)
        return JSONResponse(error, status_code=status)
    _clean_system(parsed)
    agent = request.headers.get("user-agent", "unknown")
    meta = {"proxy": session_meta(agent, parsed, adapter.name, request.headers),
            # the window it sized for: `project` and `compact` size this session alike
            SIZED_FOR_KEY: {"model": parsed.model, "context_window": capacity.context_window}}
    try:
        synced = await proxy.mirror.sync(
            parsed.messages, capacity=capacity, scope=scope, system=parsed.system,
            tools=parsed.tools, metadata=meta,
            title=session_title(request.headers, parsed.system, parsed.messages),
            provider_compaction=asks_provider_compaction(adapter.name, body))
    except ContextfoldError as exc:  # Y3 for a request too large; by kind for the rest
        status, error = refusal(adapter.name, exc)
        log_request(None, parsed.model, len(raw), None, f"refused ({exc.kind})", status,
                    started)
        return JSONResponse(error, status_code=status)
    forwarded, known = adapter.build(parsed, body, synced)
    # SPEC Y7: an on-demand compaction's answer is no turn the conversation waits for.
    now = compacts_now(adapter.name, body)
    reply, note = await send_upstream(proxy, request, synced, forwarded, parsed.model,
                                      len(raw), known, compaction=now)
    with unless_answered(proxy, synced):
        return await _answer(proxy, request, adapter, parsed, synced, owner, reply, note,
                             len(raw), capacity.context_window, started, retried)


async def _answer(proxy: Proxy, request: Request, adapter: Adapter, parsed: Any,
                  synced: Synced, owner: str, reply: Any, note: dict[str, Any],
                  client_bytes: int, window: int, started: float, retried: bool) -> Response:
    """The client's answer from the upstream's reply (plain, or streamed through as it
    arrives), with the reply's record handed to a background task."""
    compaction, stats = note["compaction"], await proxy.stats(synced)
    model = parsed.model

    async def record(message: Message | None, response: Any) -> None:
        # SPEC Y7: a compaction request's answer is kept only when it holds the block (a
        # summary that did not come leaves the conversation as it was).
        await after(proxy, synced, message, stats,
                    keep=not note["compacts_now"] or holds_provider_compaction(message))
        if message is not None and response is not None:
            try:
                await adapter.recorded(proxy, synced, owner, response)
            except Exception:  # the client has its answer; the memory still has the handle
                log.exception("keeping the response id of session %s failed",
                              synced.session_id)

    if reply.status_code != 200 or not parsed.stream:
        content = await reply.aread()
        await reply.aclose()
        if reply.status_code != 200 and not retried and learn(
                proxy.config, model, reply.status_code, content, window) is not None:
            # Y9: the upstream named a smaller window; send this request once more, fitted.
            proxy.mirror.no_reply(synced)
            log_request(note, model, client_bytes, synced, compaction, reply.status_code,
                        started)
            log.info("learned the window of %s from the upstream: %d tokens", model,
                     proxy.config.learned[model])
            return await exchange(request, adapter, retried=True)
        message, response = None, None
        if reply.status_code == 200:
            try:
                message, response = adapter.read(loads_bounded(content), model)
            except ValueError:
                message, response = None, None
            if message is not None:
                adapter.answered(proxy, synced, parsed, owner, response)
        log_request(note, model, client_bytes, synced, compaction, reply.status_code, started)
        return Response(content, status_code=reply.status_code,
                        headers=out_headers(reply.headers),
                        background=BackgroundTask(record, message, response))
    reader = adapter.reader(model)
    told = False

    async def finish() -> None:
        await reply.aclose()
        log_request(note, model, client_bytes, synced, compaction, reply.status_code, started)
        await record(*reader.reply())

    async def relay() -> AsyncIterator[bytes]:
        nonlocal told
        try:
            async for chunk in reply.aiter_raw():
                reader.feed(chunk)
                if not told and reader.finished():
                    told = True
                    message, response = reader.reply()
                    if message is not None:
                        adapter.answered(proxy, synced, parsed, owner, response)
                yield chunk
        finally:
            # The client may hang up right after the last event (the SDKs do), which
            # cancels this generator: record the reply in a task of its own.
            proxy.spawn(finish())

    return StreamingResponse(relay(), status_code=200, headers=out_headers(reply.headers))


async def send_upstream(proxy: Proxy, request: Request, synced: Synced,
                        forwarded: dict[str, Any], model: str, client_bytes: int,
                        known: Sequence[bytes | None] | None = None, *,
                        compaction: bool = False) -> tuple[Any, dict[str, Any]]:
    """Send a fitted body upstream: encode it (reusing the bytes the parse made, `known`),
    count its prefix reuse (Y4), tell the mirror a reply is due (`compaction`: a provider's
    compaction asked for on demand, SPEC Y7), and open the upstream's streamed answer.
    Returns it with the log note of the request."""
    stats = await proxy.stats(synced)
    data, pieces = encode(forwarded, known)
    reuse = stats.observe(pieces, synced.estimate.tokens, synced.projection.checkpoint)
    proxy.held.resize(("stats", synced.session_id), stats.size())
    compacted = ",".join(c.status for c in synced.compactions) or "-"
    proxy.mirror.expect_reply(synced, compaction=compaction)
    upstream = proxy.client.build_request("POST", proxy.url(request), content=data,
                                          headers={**proxy.headers(request),
                                                   "content-type": "application/json"})
    try:
        reply = await proxy.client.send(upstream, stream=True)
    except BaseException:  # a cancelled request too: the session must not wait for it
        proxy.mirror.no_reply(synced)
        raise
    note = dict(session=synced.session_id, model=model, client_bytes=client_bytes,
                forwarded=synced.estimate.tokens, compaction=compacted, reuse=reuse,
                compacts_now=compaction)
    return reply, note


async def after(proxy: Proxy, synced: Synced, message: Message | None,
                stats: SessionStats, *, keep: bool = True) -> None:
    """Record the reply (E1; starts the auto check, A1) and the session's proxy figures;
    `keep=False`: bill it but store nothing (an answer that is no turn)."""
    try:
        stats.bill(message)  # SPEC Q4: the upstream's reported usage, priced
        if message is not None and keep:
            await proxy.mirror.record_reply(synced, message)
        else:
            proxy.mirror.no_reply(synced)
        if stats.requests <= 2 or stats.requests % 10 == 0:  # one write in ten, Y4 report
            await proxy.write_stats(synced.session_id, stats)
    except Exception:  # the client has its answer; a failed record is logged, not raised
        log.exception("recording the reply of session %s failed", synced.session_id)


def log_request(note: dict[str, Any] | None, model: str, client_bytes: int,
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


__all__ = ["Adapter", "ChatAdapter", "Reader", "Refused", "exchange", "out_headers",
           "send_upstream", "unless_answered"]
