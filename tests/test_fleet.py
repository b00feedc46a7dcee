"""A fleet on one PostgreSQL database (issue 38, SPEC Y1, Y12, Y13): three `contextfold proxy`
processes and a `contextfold serve --workers 2`, clients of all three protocols whose
requests go to the proxies in turn (a load balancer's round robin), with a window that
forces compactions while other processes serve the same conversations.

Held: no client sees an error for a request that fits; every acknowledged message is stored
once, in one session per conversation; `contextfold verify` finds every session sound; the
service's workers show every proxied session. Bounded: six conversations of eight turns.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.store import open_store
from tests.fakeserver import fake_server
from tests.server_fixtures import ROOT, free_port, serve_process
from tests.store_fixtures import drop_pg_schema, new_pg_schema

WINDOW = 4096
TURNS = 8
PROXIES = 3
PER_PROTOCOL = 2
ENV = {**os.environ, "CONTEXTFOLD_PROXY_SALT": "fleet-salt", "CONTEXTFOLD_DB": ""}


@pytest.fixture
def pg() -> Iterator[str]:
    url = new_pg_schema()
    yield url
    drop_pg_schema(url)


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import time

    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            httpx.get(url + "/", timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer within 90 s: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


def _text(turn: int, tag: str) -> str:
    return f"[{tag}] step {turn}: " + " ".join(
        f"{tag}-{turn}-{i} reads module m{i}.py and notes its entry points" for i in range(40))


class Conversation:
    """One agent-like client of one protocol, its requests sent round-robin."""

    def __init__(self, protocol: str, n: int, proxies: list[str]) -> None:
        self.protocol, self.tag, self.proxies = protocol, f"{protocol}{n}", proxies
        self.offset = n
        self.system = f"You are agent {self.tag}. Be brief."
        self.key = f"sk-fleet-{self.tag}"
        self.history: list[Any] = []
        self.sent: list[str] = []  # user texts acknowledged with a reply
        self.replies: list[str] = []
        self.errors: list[str] = []

    def body(self, text: str) -> tuple[str, dict[str, Any]]:
        if self.protocol == "openai":
            self.history.append({"role": "user", "content": text})
            return "/v1/chat/completions", {
                "model": "local-model", "max_tokens": 200,
                "messages": [{"role": "system", "content": self.system}, *self.history]}
        if self.protocol == "anthropic":
            self.history.append({"role": "user", "content": text})
            return "/v1/messages", {"model": "local-model", "max_tokens": 200,
                                    "system": self.system, "messages": list(self.history)}
        self.history.append({"role": "user", "content": text})
        return "/v1/responses", {"model": "local-model", "max_output_tokens": 200,
                                 "instructions": self.system, "input": list(self.history)}

    def keep(self, answer: dict[str, Any]) -> str:
        if self.protocol == "openai":
            text = answer["choices"][0]["message"]["content"]
            self.history.append({"role": "assistant", "content": text})
        elif self.protocol == "anthropic":
            text = answer["content"][0]["text"]
            self.history.append({"role": "assistant", "content": text})
        else:
            outputs = [o for o in answer["output"] if o.get("type") == "message"]
            text = outputs[0]["content"][0]["text"]
            self.history.extend(answer["output"])
        return text

    def run(self) -> None:
        with httpx.Client(timeout=120) as client:
            for turn in range(TURNS):
                text = _text(turn, self.tag)
                path, body = self.body(text)
                url = self.proxies[(self.offset + turn) % len(self.proxies)]
                r = client.post(url + path, json=body,
                                headers={"authorization": f"Bearer {self.key}"})
                if r.status_code != 200:
                    self.errors.append(f"{self.tag} turn {turn} via {url}: {r.status_code} "
                                       f"{r.text[:300]}")
                    return
                self.sent.append(text)
                self.replies.append(self.keep(r.json()))


async def _stored(db: str) -> dict[str, list[str]]:
    """Each session's first user text -> the texts of every message node of its tree."""
    async with await open_store(db) as store:
        out: dict[str, list[str]] = {}
        for info in await store.list_sessions():
            texts = [n.message.text for n in await store.load_tree(info.id)
                     if n.message is not None]
            out[info.id] = texts
        return out


def test_a_fleet_of_proxies_and_service_workers_on_one_postgresql(pg, tmp_path: Path):
    async def migrate() -> None:
        async with await open_store(pg):
            pass

    asyncio.run(migrate())
    with fake_server(context_window=WINDOW) as upstream:
        procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        urls = []
        try:
            for i in range(PROXIES):
                port, log = free_port(), tmp_path / f"proxy{i}.log"
                proc = subprocess.Popen(
                    [sys.executable, "-m", "contextfold", "proxy", "--upstream",
                     upstream.base_url, "--model-window", f"local-model={WINDOW}", "--db", pg,
                     "--port", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT,
                    cwd=ROOT, env=ENV)
                procs.append((proc, log))
                urls.append(f"http://127.0.0.1:{port}")
            for (proc, log), url in zip(procs, urls, strict=True):
                _wait(url, proc, log)
            with serve_process("--db", pg, "--workers", "2", env={"CONTEXTFOLD_DB": ""},
                               log=tmp_path / "serve.log") as (service, _proc):
                conversations = [Conversation(p, n, urls) for n in range(PER_PROTOCOL)
                                 for p in ("openai", "anthropic", "responses")]
                threads = [threading.Thread(target=c.run) for c in conversations]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(300)
                listed = httpx.get(service + "/v1/sessions", timeout=30)
                assert listed.status_code == 200, listed.text
                shown = {s["session_id"]: s for s in listed.json()["sessions"]}
                for sid in shown:
                    one = httpx.get(f"{service}/v1/sessions/{sid}", timeout=30)
                    assert one.status_code == 200 and not one.json()["read_only"], one.text
        finally:
            for proc, _log in procs:
                proc.terminate()
            for proc, _log in procs:
                proc.wait(30)
        logs = "\n".join(log.read_text() for _, log in procs)
    errors = [e for c in conversations for e in c.errors]
    assert errors == [], errors  # no client-visible error
    assert not upstream.overflowed and not upstream.rejected
    assert "Traceback" not in logs and " ERROR " not in logs, logs[-3000:]
    stored = asyncio.run(_stored(pg))
    assert len(stored) == len(conversations)  # one session per conversation
    assert set(shown) == set(stored)  # the service's workers show every one
    for c in conversations:
        (sid,) = [s for s, texts in stored.items() if any(f"[{c.tag}]" in t for t in texts)]
        texts = stored[sid]
        for text in c.sent:
            assert texts.count(text) == 1, (c.tag, text[:40])  # stored once
        assert len(c.replies) == TURNS
        done = subprocess.run([sys.executable, "-m", "contextfold", "verify", sid, "--db", pg],
                              capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr  # sound
    # The window forced compactions, on every conversation.
    assert asyncio.run(_checkpoints(pg)) >= len(conversations)


async def _checkpoints(db: str) -> int:
    count = 0
    async with await open_store(db) as store:
        for info in await store.list_sessions():
            count += sum(1 for n in await store.load_tree(info.id) if n.checkpoint is not None)
    return count
