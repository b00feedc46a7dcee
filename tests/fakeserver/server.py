"""Run the fake provider on 127.0.0.1 (ephemeral port) in a background thread.

    with fake_server(context_window=8000) as server:
        model = OpenAICompatModel("gpt-4o", base_url=server.openai_url, api_key="k")
        server.enqueue(Reply(status=429), Reply(text="hello"))
        ...
        assert all(r.prompt_tokens <= 8000 for r in server.requests)

`server_fixture(**config)` turns the same thing into a pytest fixture (one server per test
module, scripts and request log reset for every test).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn

from .app import create_app
from .script import Reply, ReplyKind, ServerConfig
from .state import RecordedRequest, Responder, ServerState


class FakeServer:
    """A running fake provider: its URLs, its script queue and its request log."""

    def __init__(self, config: ServerConfig) -> None:
        self.state = ServerState(config)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(
            create_app(self.state), log_level="warning", lifespan="off",
            timeout_graceful_shutdown=2,
        ))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True,
            name=f"fakeserver:{self.port}",
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake provider did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.state.stopping.set()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    # ------------------------------------------------------------------ addresses

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        """base_url for `AsyncOpenAI` (the SDK appends /chat/completions)."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_url(self) -> str:
        """base_url for `AsyncAnthropic` (the SDK appends /v1/messages)."""
        return self.base_url

    # ------------------------------------------------------------------ scripting

    @property
    def config(self) -> ServerConfig:
        return self.state.config

    def configure(self, **changes: Any) -> None:
        """Change the configuration of the running server (e.g. shrink the window)."""
        with self.state.lock:
            self.state.config = dataclasses.replace(self.state.config, **changes)

    def enqueue(self, *replies: Reply, kind: ReplyKind = "any") -> None:
        """Queue replies; "summary" ones answer summarisation requests only, "chat" others."""
        self.state.enqueue(replies, kind)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer unscripted requests with `responder(protocol, body)` (None: the default)."""
        with self.state.lock:
            self.state.responder = responder

    def reset(self, **config: Any) -> None:
        """Forget scripts and recorded requests, and start again from `ServerConfig(**config)`."""
        with self.state.lock:
            for queue in self.state.queues.values():
                queue.clear()
            self.state.requests.clear()
            self.state._prefixes.clear()
            self.state.responder = None
            self.state.config = ServerConfig(**config)

    # ------------------------------------------------------------------ assertions

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.state.lock:
            return list(self.state.requests)

    @property
    def summary_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.is_summary]

    @property
    def overflowed(self) -> list[RecordedRequest]:
        """Requests refused for not fitting the context window."""
        return [r for r in self.requests if r.outcome == "overflow"]

    @property
    def rejected(self) -> list[RecordedRequest]:
        """Requests the real provider would have refused (orphan tool results, role order)."""
        return [r for r in self.requests if r.outcome == "invalid"]

    @property
    def max_prompt_tokens(self) -> int:
        """The largest prompt any request sent (0 before the first request)."""
        return max((r.prompt_tokens for r in self.requests), default=0)

    @property
    def pending_replies(self) -> int:
        with self.state.lock:
            return sum(len(q) for q in self.state.queues.values())


@contextmanager
def fake_server(**config: Any) -> Iterator[FakeServer]:
    """Start a fake provider with `ServerConfig(**config)`; stop it on exit."""
    server = FakeServer(ServerConfig(**config)).start()
    try:
        yield server
    finally:
        server.stop()


def server_fixture(**config: Any) -> Callable[..., Any]:
    """A pytest fixture yielding a `FakeServer`, reset (to `config`) before every test.

    One server runs per test module (started on first use, stopped when the module ends):

        fake = server_fixture(context_window=8000)   # at module level of a test file

        async def test_something(fake): ...
    """
    running: list[FakeServer] = []

    @pytest.fixture
    def _fixture(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
        if not running:
            server = FakeServer(ServerConfig(**config)).start()
            running.append(server)
            owner = request.node.getparent(pytest.Module) or request.session

            def _stop() -> None:
                running.remove(server)
                server.stop()

            owner.addfinalizer(_stop)
        server = running[0]
        server.reset(**config)
        yield server

    return _fixture
