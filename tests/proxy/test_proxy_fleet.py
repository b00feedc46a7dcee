"""SPEC Y13: several proxy processes on one database serve a conversation as one.

A request that needs a compaction reaches a proxy while another process holds the session's
compaction lease (it is summarising, slowly): the request waits for that checkpoint and is
answered, never refused with a 409 nor forwarded to overflow, and the lost race is one
ordinary log line, not an ERROR with a traceback. On one SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contextfold.core.models.budget import derive_budget
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.runtime.mirror import Mirror
from contextfold.store import open_store
from contextfold.summarize.extractive import summarize_extractive
from tests.fakeserver import Reply, fake_server
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures: SQLite, PostgreSQL)

WINDOW = 10_000
SLOW = 2.0  # seconds the other process's summariser takes


@pytest.fixture
def upstream() -> Iterator[Any]:
    with fake_server(context_window=WINDOW) as fake:
        yield fake


def _text(tokens: int, tag: str) -> str:
    """About `tokens` tokens of text (a group is 9 by the estimator)."""
    return " ".join(f"{tag}{i % 97} lorem ipsum dolor" for i in range(tokens // 9))


def _history(turns: int, tokens: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for t in range(turns):
        out += [{"role": "user", "content": f"step {t}: " + _text(tokens, f"u{t}x")},
                {"role": "assistant", "content": f"done {t}: " + _text(tokens, f"a{t}y")}]
    return out


def test_y13_a_request_waits_for_another_process_s_compaction(
        upstream, db_url: str, caplog) -> None:  # noqa: F811
    caplog.set_level(logging.INFO)
    config = ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW},
                         db=db_url, identity_salt="fleet")
    first, second = ProxyThread(config).start(), ProxyThread(config).start()
    capacity = config.capacity("local-model")
    safe = derive_budget(capacity).safe_input_limit
    headers = {"authorization": "Bearer sk-fleet"}
    # A history well inside the window (no compaction), through the first process.
    history = _history(6, int(safe * 0.6 / 12))
    body = {"model": "local-model", "messages": [*history, {"role": "user", "content": "go"}]}
    try:
        upstream.enqueue(Reply(text="went"), kind="chat")
        r = httpx.post(first.url + "/v1/chat/completions", json=body, headers=headers,
                       timeout=60)
        assert r.status_code == 200, r.text
        assert not [q for q in upstream.requests if q.is_summary]

        async def scenario() -> tuple[httpx.Response, float]:
            store = await open_store(db_url)
            try:
                (info,) = await store.list_sessions()

                async def slow(plan: Any) -> str:
                    await asyncio.sleep(SLOW)
                    return summarize_extractive(plan)

                # "Another process": its own mirror and store, compacting with a slow
                # summariser (it holds the session's lease meanwhile).
                other = asyncio.create_task(Mirror(store, summarizer=slow).compact(
                    info.id, capacity=capacity))
                await asyncio.sleep(0.5)
                # The agent's next request, past the window, through the second process.
                grown = {"model": "local-model", "messages": [
                    *body["messages"], {"role": "assistant", "content": "went"},
                    {"role": "user", "content": _text(int(safe * 0.8), "new")}]}
                upstream.enqueue(Reply(text="after the checkpoint"), kind="chat")
                started = time.monotonic()
                answer = await asyncio.to_thread(
                    httpx.post, second.url + "/v1/chat/completions", json=grown,
                    headers=headers, timeout=60)
                waited = time.monotonic() - started
                outcome = await other
                assert outcome.status == "compacted"
                return answer, waited
            finally:
                await store.close()

        answer, waited = asyncio.run(scenario())
    finally:
        first.stop()
        second.stop()
    assert answer.status_code == 200, answer.text  # never a 409, never a context error
    assert answer.json()["choices"][0]["message"]["content"] == "after the checkpoint"
    assert waited >= SLOW - 0.5 - 0.3  # it waited for the other's checkpoint
    assert not upstream.overflowed and not upstream.rejected
    chats = [q for q in upstream.requests if not q.is_summary]
    assert max(q.prompt_tokens for q in chats) <= WINDOW
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert any("another process is compacting" in rec.getMessage() for rec in caplog.records)
