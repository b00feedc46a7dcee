"""`contextfold proxy --workers N` (docs/proxy.md): several workers on one PostgreSQL store.

Each worker keeps its own memo of the sessions it has seen; the store's conditional writes
decide between them. Two proxy apps over one PostgreSQL schema stand for two workers (each
its own store connection, mirror and memo), taking an agent's requests in turn; then the
real command with two worker processes; and the refusal on SQLite.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from tests.proxy.test_proxy_openai import KEY, WINDOW, run_tool_loop, sessions
from tests.server_fixtures import ROOT, free_port
from tests.store_fixtures import drop_pg_schema, new_pg_schema


@pytest.fixture
def pg() -> Iterator[str]:
    url = new_pg_schema()
    yield url
    drop_pg_schema(url)


class _Alternating:
    """An OpenAI client whose every request goes to the next of `clients` in turn."""

    def __init__(self, *clients: openai.OpenAI) -> None:
        self._clients = itertools.cycle(clients)

    @property
    def chat(self) -> Any:  # the next client's `chat` resource
        return next(self._clients).chat


def test_two_workers_taking_turns_on_one_session_store_one_history_y1(pg, upstream):
    """An agent's requests alternate between two workers, past the window (so compactions
    happen on both): one session, every message stored once, nothing over the window."""
    config = ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW}, db=pg)
    a, b = ProxyThread(config).start(), ProxyThread(config).start()
    try:
        oa = _Alternating(*(openai.OpenAI(base_url=p.url + "/v1", api_key=KEY, max_retries=0)
                            for p in (a, b)))
        run_tool_loop(oa, upstream, rounds=14)  # type: ignore[arg-type]
    finally:
        a.stop()
        b.stop()
    assert not upstream.overflowed and not upstream.rejected
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 14 and max(r.prompt_tokens for r in chats) <= WINDOW
    found = asyncio.run(sessions(pg))
    assert len(found) == 1  # one conversation, one session, whichever worker took a request
    _info, tree = found[0]
    stored = [n for n in tree if n.message is not None]
    assert len(stored) == 1 + 14 + 13  # the user's request, 14 replies, 13 results sent back
    assert any(n.checkpoint is not None for n in tree)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"proxy exited with {proc.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError("the proxy did not listen within 60 s") from None
            time.sleep(0.2)


def _children(pid: int) -> int:
    """Live processes whose parent is `pid` (from /proc)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            count += int(fields[1]) == pid
    return count


@pytest.mark.slow
def test_proxy_with_two_worker_processes_on_postgresql(pg, upstream, tmp_path):
    port, log = free_port(), tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "contextfold", "proxy", "--upstream", upstream.openai_url,
             "--model-window", f"local-model={WINDOW}", "--db", pg, "--workers", "2",
             "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "CONTEXTFOLD_DB": ""})
        try:
            _wait_for_port(port, proc, log)
            # A new connection per request: the kernel hands each to either worker.
            clients = [openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY,
                                     max_retries=0) for _ in range(6)]
            run_tool_loop(_Alternating(*clients), upstream, rounds=6)  # type: ignore[arg-type]
            assert _children(proc.pid) >= 2
        finally:
            proc.terminate()
            proc.wait(30)
    assert "2 workers" in log.read_text()
    found = asyncio.run(sessions(pg))
    assert len(found) == 1
    assert len([n for n in found[0][1] if n.message is not None]) == 1 + 6 + 5


def test_proxy_refuses_several_workers_on_sqlite(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "contextfold", "proxy", "--upstream", "http://127.0.0.1:9",
         "--db", f"sqlite:///{tmp_path / 'p.db'}", "--workers", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "--workers 2 needs PostgreSQL" in done.stderr, done.stderr
