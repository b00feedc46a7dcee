"""A recording pass-through between an agent and whatever it talks to.

It measures what the *client* sent (tokens per request, with the fakeserver's tokenizer), so
the figures compare the agent's own history with what reached the upstream, without relying
on the proxy's log. Requests and answers are relayed unchanged (streams stream through).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.fakeserver.responses import chat_view
from tests.fakeserver.tokens import prompt_tokens

_HOP = {"host", "content-length", "transfer-encoding", "connection", "content-encoding",
        "keep-alive"}


@dataclass
class Sent:
    """One request the client sent: where, how big, and the status it got back."""

    method: str
    path: str
    prompt_tokens: int
    messages: int
    user_agent: str
    status: int | None = None


class Tap:
    """Listen on 127.0.0.1 (ephemeral port) and relay everything to `target`."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(600.0))
        app = Starlette(routes=[Route("/{path:path}", self._relay,
                                      methods=["GET", "HEAD", "POST", "PUT", "DELETE"])])
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                     timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Tap:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the tap did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    @property
    def model_requests(self) -> list[Sent]:
        """The client's model calls (chat completions or messages, not count_tokens)."""
        with self._lock:
            return [s for s in self.sent if s.method == "POST" and s.path.endswith(
                ("/chat/completions", "/messages", "/responses"))]

    async def _relay(self, request: Request) -> Response:
        raw = await request.body()
        path = request.url.path
        tokens, count = 0, 0
        if raw:
            try:
                body: dict[str, Any] = json.loads(raw)
                if path.endswith("/responses"):  # counted like the fake upstream counts it
                    body = chat_view(body)
                tokens, count = prompt_tokens(body)[0], len(body.get("messages") or [])
            except ValueError:
                pass
        entry = Sent(request.method, path, tokens, count, request.headers.get("user-agent", ""))
        with self._lock:
            self.sent.append(entry)
        url = self.target + path + (f"?{request.url.query}" if request.url.query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        upstream = await self._client.send(
            self._client.build_request(request.method, url, headers=headers, content=raw),
            stream=True)
        entry.status = upstream.status_code
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
        return StreamingResponse(upstream.aiter_bytes(), status_code=upstream.status_code,
                                 headers=out_headers, background=BackgroundTask(upstream.aclose))
