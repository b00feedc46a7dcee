"""Fixtures for the service tests: an app on a fresh store per test, clients per tenant, a
summariser gate that holds a compaction open until the test releases it, and a real
`contextfold serve` process.

`service_factory(**config)` builds the app (SQLite or PostgreSQL through the `backend`
fixture) and yields a `Service` helper: `client(tenant)` gives an httpx client with that
tenant's token (under auth) on the ASGI transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.core.planning.plan import Plan
from contextfold.server import ServiceConfig, create_app
from contextfold.store import open_store
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent


class Gate:
    """A summariser that waits until `release()` (or fails when `fail` is set): the
    compaction window stays open for exactly as long as a test needs (no sleeps)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.released = asyncio.Event()
        self.calls = 0
        self.fail = False

    async def __call__(self, plan: Plan) -> tuple[str, str]:
        from contextfold.summarize.extractive import summarize_extractive

        self.calls += 1
        self.started.set()
        await self.released.wait()
        if self.fail:
            raise RuntimeError("the summariser is down")
        return summarize_extractive(plan), "gated"

    def release(self) -> None:
        self.released.set()

    def rearm(self) -> None:
        self.started = asyncio.Event()
        self.released = asyncio.Event()


class Service:
    """An app on its own store, with helpers to call it as different tenants."""

    def __init__(self, app: Any, store: Any, config: ServiceConfig) -> None:
        self.app = app
        self.store = store
        self.config = config
        self.tokens: dict[str, str] = {}

    async def token(self, tenant: str) -> str:
        if tenant not in self.tokens:
            _, self.tokens[tenant] = await self.store.create_token(tenant)
        return self.tokens[tenant]

    @contextlib.asynccontextmanager
    async def client(self, tenant: str = "default") -> AsyncIterator[httpx.AsyncClient]:
        headers = {}
        if self.config.auth:
            headers["Authorization"] = f"Bearer {await self.token(tenant)}"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                     base_url="http://127.0.0.1", headers=headers,
                                     timeout=60) as client:
            yield client


@pytest.fixture
async def service_factory(db_url: str):  # noqa: F811
    """`async with service_factory(**config) as svc:` an app on this test's database."""

    @contextlib.asynccontextmanager
    async def make(**options: Any) -> AsyncIterator[Service]:
        store = await open_store(db_url)
        config = ServiceConfig(db=db_url, **options)
        app = create_app(config, store=store)
        try:
            async with app.router.lifespan_context(app):
                yield Service(app, store, config)
        finally:
            await store.close()

    return make


LONG = "the quick brown fox jumps over the lazy dog " * 40  # a turn worth compacting


async def worth_compacting(c: httpx.AsyncClient) -> tuple[str, str]:
    """A new session with four long turns (enough for a compaction to fold): its id and
    its last reply's node id."""
    sid = await create(c)
    reply = ""
    for i in range(4):
        reply = (await say(c, sid, f"turn {i}: {LONG}"))["reply"]["node_id"]
    return sid, reply


async def open_window(c: httpx.AsyncClient, sid: str, gate: Gate) -> None:
    """Start a manual compaction that stays open until `gate.release()` (SPEC U1)."""
    r = await c.post(f"/v1/sessions/{sid}/compact", json={"wait": False})
    assert r.status_code == 202, r.text
    await asyncio.wait_for(gate.started.wait(), 30)
    state = (await c.get(f"/v1/sessions/{sid}")).json()["state"]
    assert state["phase"] == "compacting" and state["trigger"] == "manual"  # U1


async def wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Poll `condition` (sync or async, no arguments) until it holds; fail naming `what`.

    A deadline, not a count of short sleeps: on a loaded 2-core machine a fixed number of
    10 ms naps can end before the server got its turn, and the test then races itself.
    """
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if asyncio.iscoroutine(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (waited {timeout:.0f} s)")
        await asyncio.sleep(0.02)


async def create(client: httpx.AsyncClient, **body: Any) -> str:
    response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


async def say(client: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """[(event name, data)] of a server-sent events body."""
    import json

    out = []
    for block in text.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if name is not None:
            out.append((name, data))
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_process(*args: str, env: dict[str, str] | None = None,
                  log: Path | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run `contextfold serve ARGS --port P` and yield (base URL, process) once it answers."""
    port = free_port()
    out = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextfold", "serve", "--port", str(port), *args],
        stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited with {proc.returncode}: "
                                     f"{log.read_text() if log else ''}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError("serve did not answer within 60 s")
            time.sleep(0.2)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not None:
            out.close()  # type: ignore[union-attr]
