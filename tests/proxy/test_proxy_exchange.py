"""One exchange for the three protocols (proxy/exchange.py): the same conversation sent as
Chat Completions, Anthropic Messages and the Responses API is recorded with the same
metadata — the client and agent, the model, the session label, the working directory, the
window it was sized for, the proxy's figures and their cost — and a window the upstream
names in an overflow is learned on each of them alike (SPEC Y9)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextfold.core.sizing.resolver import SIZED_FOR_KEY
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply, fake_server

SYSTEM = "You are a coding agent.\nWorking directory: /home/dev/project-x"
HEADERS = {"authorization": "Bearer sk-same", "user-agent": "claude-cli/2.0.14 (external)",
           "x-contextfold-session": "refactor-auth"}
BODIES = {
    "/v1/chat/completions": lambda text: {
        "model": "gpt-4o-mini", "max_tokens": 64,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]},
    "/v1/messages": lambda text: {
        "model": "gpt-4o-mini", "max_tokens": 64, "system": SYSTEM,
        "messages": [{"role": "user", "content": text}]},
    "/v1/responses": lambda text: {
        "model": "gpt-4o-mini", "max_output_tokens": 64, "instructions": SYSTEM,
        "input": text},
}


@pytest.fixture
def upstream() -> Iterator[Any]:
    with fake_server(context_window=16_000) as fake:
        yield fake


async def _metadata(db: str) -> list[dict[str, Any]]:
    async with await open_store(db) as store:
        return [s.metadata for s in await store.list_sessions()]


def test_the_three_protocols_record_the_same_metadata(upstream, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'p.db'}"
    proxy = ProxyThread(ProxyConfig(upstream=upstream.base_url, windows={"*": 16_000}, db=db,
                                    identity_salt="one")).start()
    try:
        for path, body in BODIES.items():
            upstream.enqueue(Reply(text="done"), kind="chat")
            r = httpx.post(proxy.url + path, json=body("rename the auth module"),
                           headers=HEADERS, timeout=30)
            assert r.status_code == 200, (path, r.text)
    finally:
        proxy.stop()
    found = asyncio.run(_metadata(db))
    assert len(found) == 3  # one session per protocol (the scope names the protocol)
    protocols = sorted(m["proxy"].pop("protocol") for m in found)
    assert protocols == ["anthropic", "openai", "responses"]
    for meta in found:
        assert meta["proxy"] == found[0]["proxy"]
        assert meta["proxy"]["label"] == "refactor-auth"
        assert meta["proxy"]["cwd"] == "/home/dev/project-x"
        assert meta["proxy"]["agent"] == "Claude Code"
        assert meta[SIZED_FOR_KEY] == {"model": "gpt-4o-mini", "context_window": 16_000}
        stats = meta["proxy_stats"]
        assert stats["requests"] == 1 and stats["cost"]["requests"] == 1
        assert stats["cost"]["usd"] > 0  # priced from the reported usage (Q4)
        assert set(stats["cost"]) == set(found[0]["proxy_stats"]["cost"])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_an_overflow_naming_a_smaller_window_is_learned_on_every_protocol_y9(
        tmp_path: Path, path: str) -> None:
    # The operator says 16,000; the upstream really has 6,000 and says so when overflowed.
    with fake_server(context_window=6_000) as upstream:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.base_url, windows={"*": 16_000},
                                        db=f"sqlite:///{tmp_path / 'l.db'}")).start()
        try:
            upstream.enqueue(Reply(text="fitted"), kind="chat")
            text = "context line for the refactor " * 1_400  # ~9,000 tokens
            r = httpx.post(proxy.url + path, json=BODIES[path](text + " and then?"),
                           headers=HEADERS, timeout=60)
        finally:
            proxy.stop()
        assert upstream.overflowed  # the first try named the real window
        assert r.status_code in (200, 400), r.text
        chats = [q for q in upstream.requests if not q.is_summary]
        assert len(chats) == 2  # sent once more, fitted to the learned window
        if r.status_code == 400:  # the latest message alone cannot fit 6,000: Y3's error
            assert "context" in r.text.lower()
        else:
            assert chats[-1].outcome != "overflow"


def test_the_responses_api_learns_a_window_named_in_an_overflow_too_y9(tmp_path: Path) -> None:
    # OpenAI's own Responses overflow names no window; a server behind /v1/responses that
    # does (vLLM's wording) is learned from, as on the other protocols.
    seen: list[dict[str, Any]] = []

    async def responses(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        seen.append(body)
        if len(seen) == 1:
            return JSONResponse({"error": {
                "message": "This model's maximum context length is 6000 tokens. However, your "
                           "request has 9100 input tokens. Please reduce the length.",
                "type": "BadRequestError", "param": None, "code": 400}}, status_code=400)
        return JSONResponse({"id": "resp_2", "object": "response", "status": "completed",
                             "model": "gpt-4o-mini", "output": [
                                 {"type": "message", "id": "msg_2", "role": "assistant",
                                  "status": "completed", "content": [
                                      {"type": "output_text", "text": "fitted",
                                       "annotations": []}]}],
                             "usage": {"input_tokens": 5000, "output_tokens": 2,
                                       "total_tokens": 5002}})

    app = Starlette(routes=[Route("/v1/responses", responses, methods=["POST"])])
    with _serving(app) as url:
        proxy = ProxyThread(ProxyConfig(upstream=url, windows={"*": 16_000},
                                        db=f"sqlite:///{tmp_path / 'r.db'}")).start()
        try:
            text = "context line for the refactor " * 1_400  # ~9,000 tokens
            r = httpx.post(proxy.url + "/v1/responses", headers=HEADERS, timeout=60,
                           json=BODIES["/v1/responses"](text + " and then?"))
        finally:
            proxy.stop()
    assert len(seen) == 2  # sent once more, fitted to the learned window
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert r.json()["output"][0]["content"][0]["text"] == "fitted"
        assert len(json.dumps(seen[1]["input"])) < len(json.dumps(seen[0]["input"]))
    else:  # the latest message alone cannot fit 6,000: the Responses API's own error
        assert r.json()["error"]["code"] == "context_length_exceeded"


@contextlib.contextmanager
def _serving(app: Starlette) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _holds_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_surrogate(v) for v in value)
    return False


CUT = "You are a coding agent \ud83d.\nWorking directory: /home/dev/proj\udc00x"
SYSTEM_BODIES = {  # each protocol's place for the system prompt, one with a cut emoji
    "chat": ("/v1/chat/completions", lambda: {
        "model": "gpt-4o-mini", "max_tokens": 64,
        "messages": [{"role": "system", "content": CUT}, {"role": "user", "content": "hi"}]}),
    "messages": ("/v1/messages", lambda: {
        "model": "gpt-4o-mini", "max_tokens": 64, "system": CUT,
        "messages": [{"role": "user", "content": "hi"}]}),
    "messages-blocks": ("/v1/messages", lambda: {
        "model": "gpt-4o-mini", "max_tokens": 64, "system": [{"type": "text", "text": CUT}],
        "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", lambda: {
        "model": "gpt-4o-mini", "max_output_tokens": 64, "instructions": CUT, "input": "hi"}),
    "responses-developer": ("/v1/responses", lambda: {
        "model": "gpt-4o-mini", "max_output_tokens": 64,
        "input": [{"role": "developer", "content": CUT}, {"role": "user", "content": "hi"}]}),
}


@pytest.mark.parametrize("case", sorted(SYSTEM_BODIES))
def test_a_lone_surrogate_in_the_system_prompt_is_replaced_as_in_messages(
        upstream, tmp_path: Path, case: str) -> None:
    """issue 38: a system prompt holding half an emoji is read as a message is (U+FFFD, docs/
    store.md): answered, forwarded without the lone half, the session's metadata (its
    working directory) clean, on every protocol."""
    path, body = SYSTEM_BODIES[case]
    db = f"sqlite:///{tmp_path / 's.db'}"
    proxy = ProxyThread(ProxyConfig(upstream=upstream.base_url, windows={"*": 16_000},
                                    db=db)).start()
    try:
        upstream.enqueue(Reply(text="done"), kind="chat")
        # json.dumps escapes the lone half as `\ud83d`, as a JavaScript client writes it.
        r = httpx.post(proxy.url + path, content=json.dumps(body()).encode(),
                       headers={**HEADERS, "content-type": "application/json"}, timeout=30)
    finally:
        proxy.stop()
    assert r.status_code == 200, r.text
    sent = upstream.requests[-1].body
    assert not _holds_surrogate(sent)
    assert "You are a coding agent \ufffd." in json.dumps(sent, ensure_ascii=False)
    assert "messages" not in sent if path == "/v1/responses" else "input" not in sent
    (meta,) = asyncio.run(_metadata(db))
    assert not _holds_surrogate(meta)
    assert meta["proxy"]["cwd"] == "/home/dev/proj\ufffdx"
