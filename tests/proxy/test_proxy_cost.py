"""SPEC Q4 in the proxy: its stats price the usage the upstream reports, cache fields
included, and `contextfold sessions` shows the same bill for the proxied session.

Real HTTP all the way: the official `openai` and `anthropic` SDKs talk to the proxy, which
talks to the SDK-protocol fake server (tests/fakeserver) reporting OpenAI's
`prompt_tokens_details.cached_tokens` and Anthropic's `cache_read_input_tokens` /
`cache_creation_input_tokens`. The expected dollars are worked out here by hand from the
reported counts and the packaged per-million prices, never through the code under test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply

KEY = "sk-proxy-cost-SECRET"
WINDOW = 100_000
# The packaged prices (models.dev, US dollars per million tokens) these tests bill at.
GPT_4O_MINI = {"input": 0.15, "cached": 0.075, "output": 0.6}
SONNET_4_5 = {"input": 3.0, "cached": 0.3, "written": 3.75, "output": 15.0}


def start(upstream, db: str, url: str) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=url, windows={"*": WINDOW}, db=db)).start()


async def stored(db: str) -> list:
    store = await open_store(db)
    try:
        return list(await store.list_sessions())
    finally:
        await store.close()


def sessions_json(db: str) -> list[dict]:
    """`contextfold sessions --json` on the proxy's database, as a user runs it."""
    proc = subprocess.run([sys.executable, "-m", "contextfold", "sessions", "--json",
                           "--db", db], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["sessions"]


def test_q4_openai_proxy_stats_price_reported_cached_tokens(upstream, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    proxy = start(upstream, db, upstream.openai_url)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    messages: list[dict] = [{"role": "system", "content": "You are terse."},
                            {"role": "user", "content": "Say hello. " * 200}]
    reported = []
    try:
        for turn, cached in enumerate((0, 256, 384)):
            upstream.enqueue(Reply(text=f"hello {turn} " * 20, cached_tokens=cached))
            if turn < 2:
                reply = oa.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                   max_tokens=200)
                usage, text = reply.usage, reply.choices[0].message.content
            else:  # streamed, usage in the last chunk as the SDK asks for it
                text, usage = "", None
                for chunk in oa.chat.completions.create(
                        model="gpt-4o-mini", messages=messages, max_tokens=200, stream=True,
                        stream_options={"include_usage": True}):
                    text += "".join(c.delta.content or "" for c in chunk.choices)
                    usage = chunk.usage or usage
            assert usage is not None
            reported.append((usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens,
                             usage.completion_tokens))
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": f"again {turn}"}]
    finally:
        proxy.stop()  # the final figures are written as the proxy stops
    assert [c for _, c, _ in reported] == [0, 256, 384]  # the cache fields came through
    p = GPT_4O_MINI
    # OpenAI's prompt_tokens include the cached ones: the rest is billed at the input price.
    expected = sum((prompt - cached) * p["input"] + cached * p["cached"] + out * p["output"]
                   for prompt, cached, out in reported) / 1e6
    (info,) = asyncio.run(stored(db))
    cost = info.metadata["proxy_stats"]["cost"]
    assert cost["currency"] == "USD" and cost["requests"] == 3
    assert cost["usd"] == pytest.approx(expected, abs=1e-6)
    assert cost["cached_tokens"] == 256 + 384 and cost["cache_write_tokens"] == 0
    assert cost["input_tokens"] == sum(prompt - cached for prompt, cached, _ in reported)
    assert cost["output_tokens"] == sum(out for *_, out in reported)
    # `contextfold sessions` bills the proxied session the same, through the shared helper.
    (row,) = sessions_json(db)
    assert row["cost"]["usd"] == pytest.approx(expected, abs=1e-6)
    assert row["cost"]["cached_tokens"] == cost["cached_tokens"]


def test_q4_anthropic_proxy_stats_price_cache_reads_and_writes(upstream, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    proxy = start(upstream, db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Summarise the plan. " * 60}]
    reported = []
    try:
        for turn, (read, written) in enumerate(((0, 300), (300, 40), (340, 0))):
            upstream.enqueue(Reply(text=f"plan {turn} " * 15, cached_tokens=read,
                                   cache_write=written))
            kwargs = dict(model="claude-sonnet-4-5", max_tokens=300, system="Be brief.",
                          messages=messages)
            if turn == 1:
                with client.messages.stream(**kwargs) as s:
                    reply = s.get_final_message()
            else:
                reply = client.messages.create(**kwargs)
            u = reply.usage
            reported.append((u.input_tokens, u.cache_read_input_tokens,
                             u.cache_creation_input_tokens, u.output_tokens))
            messages += [{"role": "assistant", "content": reply.content[0].text},
                         {"role": "user", "content": f"next {turn}"}]
    finally:
        proxy.stop()
    assert [(r, w) for _, r, w, _ in reported] == [(0, 300), (300, 40), (340, 0)]
    p = SONNET_4_5
    # Anthropic's input_tokens are the uncached ones; reads and writes are reported apart.
    expected = sum(i * p["input"] + r * p["cached"] + w * p["written"] + o * p["output"]
                   for i, r, w, o in reported) / 1e6
    (info,) = asyncio.run(stored(db))
    stats = info.metadata["proxy_stats"]
    assert stats["requests"] == 3  # the Y4 figures are still there beside the cost
    cost = stats["cost"]
    assert cost["usd"] == pytest.approx(expected, abs=1e-6)
    assert (cost["input_tokens"], cost["cached_tokens"], cost["cache_write_tokens"],
            cost["output_tokens"]) == tuple(sum(col) for col in zip(*reported, strict=True))
    (row,) = sessions_json(db)
    assert row["cost"]["usd"] == pytest.approx(expected, abs=1e-6)
    assert row["cost"]["cache_write_tokens"] == 340


def test_q4_an_unpriced_upstream_model_counts_tokens_and_no_dollars(upstream, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    proxy = start(upstream, db, upstream.openai_url)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    try:
        upstream.enqueue(Reply(text="hi", cached_tokens=0))
        reply = oa.chat.completions.create(model="local-model", max_tokens=50,
                                           messages=[{"role": "user", "content": "hi"}])
    finally:
        proxy.stop()
    (info,) = asyncio.run(stored(db))
    cost = info.metadata["proxy_stats"]["cost"]
    assert cost["usd"] is None  # no price: never a made-up zero
    assert cost["input_tokens"] == reply.usage.prompt_tokens
    assert cost["output_tokens"] == reply.usage.completion_tokens


def test_q4_responses_proxy_stats_price_input_tokens_details(upstream, tmp_path: Path):
    """The Responses API (SPEC Y6) goes through the same stats: `input_tokens` include the
    `input_tokens_details.cached_tokens`."""
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    proxy = start(upstream, db, upstream.openai_url)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    reported = []
    try:
        previous = None
        for turn, cached in enumerate((0, 200)):
            upstream.enqueue(Reply(text=f"noted {turn} " * 10, cached_tokens=cached))
            response = oa.responses.create(model="gpt-4o-mini", previous_response_id=previous,
                                           input="Note this down. " * 100 + str(turn))
            previous = response.id
            u = response.usage
            reported.append((u.input_tokens, u.input_tokens_details.cached_tokens,
                             u.output_tokens))
    finally:
        proxy.stop()
    assert [c for _, c, _ in reported] == [0, 200]
    p = GPT_4O_MINI
    expected = sum((i - c) * p["input"] + c * p["cached"] + o * p["output"]
                   for i, c, o in reported) / 1e6
    (info,) = asyncio.run(stored(db))
    cost = info.metadata["proxy_stats"]["cost"]
    assert cost["usd"] == pytest.approx(expected, abs=1e-6) and cost["requests"] == 2
    assert cost["cached_tokens"] == 200
