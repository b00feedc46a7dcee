"""What the browser tests run against: the real service in a thread, a summariser the test
holds open, and Debian's Chromium.

The service is `contextfold.server.create_app` served by uvicorn on 127.0.0.1 (an ephemeral
port) with its own SQLite file. Chat replies come from the scripted fake provider
(tests/fakeserver) through the OpenAI wire protocol; summaries come from the same fake
model through `LlmSummarizer`, behind a gate the test opens and closes, so the compaction
window is as long as the test needs (no timing guesses).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from contextfold.server import ServiceConfig, create_app

CHROMIUM = Path("/usr/bin/chromium")
# Playwright's own browser download cannot work here: drive the system Chromium, headless,
# and keep it from reaching the network by itself.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


class GatedSummarizer:
    """Wraps a summariser; while the gate is closed every summary waits (a slow model).

    `entered` is set when a compaction reaches the summariser, so a test knows the
    compaction window is open without sleeping.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "gated")
        self._open = threading.Event()
        self._open.set()
        self.entered = threading.Event()

    def hold(self) -> None:
        self._open.clear()
        self.entered.clear()

    def release(self) -> None:
        self._open.set()

    async def summarize(self, plan: Any) -> Any:
        self.entered.set()
        while not self._open.is_set():
            await asyncio.sleep(0.02)
        return await self.inner.summarize(plan)


class FailingCommits:
    """A store whose checkpoint commits fail while `failing` is set (the database went away
    at the worst moment): the compaction fails, everything else works."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def commit_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing:
            raise ConnectionError("the database connection was lost while committing")
        return await self._inner.commit_checkpoint(*args, **kwargs)


class Service:
    """`contextfold serve` in a background thread (uvicorn, one worker)."""

    def __init__(self, config: ServiceConfig) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(
            create_app(config), log_level="warning", timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        daemon=True, name="contextfold-serve")

    def start(self) -> Service:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        self._sock.close()


async def create_tokens(db: str, *tenants: str) -> dict[str, str]:
    """One bearer token per tenant, created in the service's database."""
    from contextfold.store import open_store

    store = await open_store(db)
    try:
        return {t: (await store.create_token(t, label="browser test"))[1] for t in tenants}
    finally:
        await store.close()
