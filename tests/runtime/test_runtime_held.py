"""SPEC Y14: what a long-running process holds per conversation is bounded by bytes.

`Held` (core/values/held.py) is the one cache: least recently used out, a value in use never
evicted, an evicted value told. Then the proxy over it with a tiny bound: many
conversations, each its own key and system prompt; the cache stays within its bound, and a
conversation that comes back after its memos were evicted continues its own session with
its figures, read again from the store. No timing and no process memory is measured here
(bench/proxy_soak.py measures the resident set).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextfold.core.values.content_chain import ChainMemo, chain_hashes
from contextfold.proxy import ProxyConfig
from contextfold.proxy import wire as proxy_wire
from contextfold.proxy.app import create_app
from contextfold.proxy.prefix_cache import PrefixCache
from contextfold.runtime.held import Held, text_bytes
from contextfold.store import open_store


class _Value:
    def __init__(self, busy: bool = False) -> None:
        self.busy = busy
        self.told = 0

    def evicted(self) -> None:
        self.told += 1


def test_held_evicts_the_least_recently_used_by_bytes() -> None:
    held = Held(3_000)
    values = {k: _Value() for k in "abcd"}
    for k in "abc":
        held.put(k, values[k], 700)
    assert held.get("a") is values["a"]  # now the most recently used
    held.put("d", values["d"], 700)  # over the bound: "b" goes first, then "c"
    assert "b" not in held and "c" in held and "a" in held and "d" in held
    assert values["b"].told == 1 and values["c"].told == 0
    assert held.bytes <= held.max_bytes
    held.resize("a", 2_000)  # "a" grew in place: the oldest others go
    assert "c" not in held and "a" in held and held.bytes <= held.max_bytes
    assert held.pop("a") is values["a"] and values["a"].told == 0  # a pop is no eviction


def test_held_never_evicts_a_value_in_use() -> None:
    held = Held(1_000)
    busy, idle = _Value(busy=True), _Value()
    held.put("busy", busy, 600)
    held.put("idle", idle, 600)
    held.put("new", _Value(), 600)
    assert "busy" in held and "idle" not in held  # passed over while in use
    busy.busy = False
    held.put("newer", _Value(), 600)
    assert "busy" not in held and busy.told == 1


def test_text_bytes_grows_with_the_text_held() -> None:
    small = text_bytes({"content": "x" * 10})
    big = text_bytes({"content": "x" * 10_000})
    assert big - small >= 9_990


def _upstream() -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"id": "c1", "object": "chat.completion", "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 1,
                                       "total_tokens": 11}})

    return Starlette(routes=[Route("/{path:path}", chat, methods=["POST"])])


def _body(n: int, turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are assistant {n}. " + "Rule. " * 100},
        {"role": "user", "content": f"[{n}] begin " + "context " * 100}]
    for t in range(turns - 1):
        messages += [{"role": "assistant", "content": "ok"},
                     {"role": "user", "content": f"[{n}] and then {t}?"}]
    return {"model": "m", "messages": messages}


def test_y14_the_proxy_holds_a_bounded_cache_and_reads_evicted_conversations_again(
        tmp_path: Path) -> None:
    bound = 64 << 10

    async def run() -> tuple[int, int, dict[str, Any]]:
        config = ProxyConfig(upstream="http://up", windows={"*": 200_000}, memory_bytes=bound,
                             db=f"sqlite:///{tmp_path / 'held.db'}", identity_salt="held")
        app = create_app(config)
        async with app.router.lifespan_context(app):
            proxy = app.state.proxy
            await proxy.client.aclose()
            proxy.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=_upstream()))
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                          base_url="http://127.0.0.1") as client:
                most = 0
                for n in range(40):
                    for turns in (1, 2):
                        r = await client.post("/v1/chat/completions", json=_body(n, turns),
                                              headers={"authorization": f"Bearer sk-{n}"})
                        assert r.status_code == 200, r.text
                    await proxy.mirror.wait_idle()
                    most = max(most, proxy.held.bytes)
                evicted = proxy.held.evicted
                # Every per-conversation memo of the process is in the one cache.
                assert {k[0] for k in proxy.held} >= {"mirror", "stats", "prefix", "chain",
                                                      "stored", "end"}
                # The first conversation comes back: its memos are long gone.
                sid = (await proxy.store.list_sessions())[0].id  # oldest first
                assert ("mirror", sid) not in proxy.held and ("stats", sid) not in proxy.held
                r = await client.post("/v1/chat/completions", json=_body(0, 3),
                                      headers={"authorization": "Bearer sk-0"})
                assert r.status_code == 200, r.text
        async with await open_store(config.db) as store:
            sessions = await store.list_sessions()
            first = sessions[0]
            assert "[0] begin" in (await store.load_tree(first.id))[0].message.text
            return most, evicted, {"sessions": len(sessions),
                                   "stats": first.metadata["proxy_stats"],
                                   "messages": len([n for n in await store.load_tree(first.id)
                                                    if n.message is not None])}

    most, evicted, found = asyncio.run(run())
    assert evicted > 0  # the bound was reached, and held
    # Within the bound, give or take the one value being put (the largest here is a few KB).
    assert most <= bound + 8_192
    assert found["sessions"] == 40  # the returning conversation continued its own session
    assert found["messages"] == 2 + 2 + 2  # its messages, each stored once
    assert found["stats"]["requests"] == 3  # its figures read back, not restarted


def _chat(n: int, words: int) -> bytes:
    return json.dumps({"model": "m", "messages": [
        {"role": "system", "content": f"assistant {n}"},
        {"role": "user", "content": f"[{n}] " + "word " * words},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"}]}).encode()


def test_y14_the_chain_memo_and_the_prefix_cache_are_bounded_by_bytes() -> None:
    """issue 38: the parsed bodies and the chain hashes of each conversation live in the
    process's cache, bounded by bytes (they were 64 lists each, whatever their size)."""
    bound = 40_000
    held = Held(bound)
    memo, cache = ChainMemo(held), PrefixCache(held)
    for n in range(300):
        key = f"client-{n}"
        parsed = proxy_wire.parse("openai", cache.loads(_chat(n, 100), ("openai", key)),
                                  cache=cache, key=key)
        assert memo.hashes(key, parsed.messages) == chain_hashes(key, parsed.messages)
        assert held.bytes <= bound + 8_192  # give or take the one value being put
    assert {k[0] for k in held} == {"prefix", "chain"} and held.evicted > 0
    # Bytes, not counts: a few conversations of long messages fill what many short ones do.
    short, long = Held(10**8), Held(10**8)
    for n in range(4):
        for h, words in ((short, 10), (long, 5_000)):
            key = f"c{n}"
            got = proxy_wire.parse("openai", PrefixCache(h).loads(_chat(n, words),
                                                                  ("openai", key)))
            ChainMemo(h).hashes(key, got.messages)
    assert long.bytes > 20 * short.bytes
