"""Known-prefix reuse (issue 26, SPEC Y10): a resent list parses only its new messages, and
the proxy with its prefix cache stores the same tree and forwards the same bytes as with
none — across an appended turn, an edited earlier message, a retry, a fork and a restart
(a cold cache). In process: the proxy app and a recording upstream over ASGI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextfold.core.values.content_chain import chain_hashes, message_key
from contextfold.core.values.held import Held
from contextfold.proxy import ProxyConfig
from contextfold.proxy import wire as proxy_wire
from contextfold.proxy.app import create_app
from contextfold.proxy.prefix_cache import PrefixCache
from contextfold.store import open_store

RESTART = "restart"


def _upstream(seen: list[bytes]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        seen.append(await request.body())
        if request.url.path.endswith("/messages"):
            return JSONResponse({"id": "msg_1", "type": "message", "role": "assistant",
                                 "model": "m", "content": [{"type": "text", "text": "ok"}],
                                 "stop_reason": "end_turn",
                                 "usage": {"input_tokens": 10, "output_tokens": 1}})
        return JSONResponse({"id": "c1", "object": "chat.completion", "model": "m",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": 1,
                                       "total_tokens": 11}})

    return Starlette(routes=[Route("/{path:path}", chat, methods=["POST"])])


async def _run(steps: list[Any], db: str, *, cached: bool, path: str = "/v1/chat/completions"
               ) -> tuple[list[bytes], list[tuple[Any, ...]], list[int]]:
    """Send each step's message list (RESTART: a new proxy process on the same store);
    the forwarded bodies, the stored tree (structure and content) and the messages reused."""
    seen: list[bytes] = []
    reused: list[int] = []
    config = ProxyConfig(upstream="http://up", windows={"*": 200_000}, db=db)
    chunks: list[list[Any]] = [[]]
    for step in steps:
        if step == RESTART:
            chunks.append([])
        else:
            chunks[-1].append(step)
    for chunk in chunks:
        app = create_app(config)
        async with app.router.lifespan_context(app):
            proxy = app.state.proxy
            await proxy.client.aclose()
            proxy.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=_upstream(seen)))
            if not cached:
                proxy.prefixes = PrefixCache(Held(0))
            before = proxy.prefixes.parsed
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                          base_url="http://127.0.0.1") as client:
                for body in chunk:
                    r = await client.post(path, json=body, headers={"x-api-key": "k",
                                                                    "authorization": "Bearer k"})
                    assert r.status_code == 200, r.text
                    await asyncio.gather(*proxy.tasks)
                    await proxy.mirror.wait_idle()
                    parsed = proxy.prefixes.parsed
                    sent = [m for m in body["messages"] if m.get("role") != "system"]
                    reused.append(len(sent) - (parsed - before))
                    before = parsed
            await proxy.client.aclose()
    store = await open_store(db)
    try:
        tree: list[tuple[Any, ...]] = []
        for info in sorted(await store.list_sessions(), key=lambda s: s.created_at):
            nodes = await store.load_tree(info.id)
            order = {n.id: i for i, n in enumerate(nodes)}
            tree += [(info.title, order.get(n.parent_id), n.kind,
                      None if n.message is None else message_key(n.message)) for n in nodes]
            tree.append(("leaf", order.get(info.leaf_id), info.branch_revision))
    finally:
        await store.close()
    return seen, tree, reused


def _openai(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "max_tokens": 50}


BASE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Read the files."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read", "arguments": json.dumps({"path": "a.py", "n": 1})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "print('a')\n" * 30},
    {"role": "assistant", "content": "a.py prints a."},
    {"role": "user", "content": "And b.py?"},
]
OK = {"role": "assistant", "content": "ok"}


def _scenario() -> list[Any]:
    one = [*BASE, OK, {"role": "user", "content": "next 1"}]
    two = [*one, OK, {"role": "user", "content": "next 2"}]
    edited = [dict(m) for m in two]
    edited[4] = {"role": "assistant", "content": "a.py prints the letter a."}  # an edit
    fork = [*one, OK, {"role": "user", "content": "another way"}]
    return [_openai(BASE), _openai(one), _openai(two), _openai(two),  # a retry
            _openai(edited), _openai(fork), _openai([*two, OK, {"role": "user", "content": "3"}]),
            RESTART, _openai([*fork, OK, {"role": "user", "content": "after restart"}]),
            _openai([*two, OK, {"role": "user", "content": "3"}, OK,
                     {"role": "user", "content": "4"}])]


def test_prefix_cache_stores_and_forwards_what_the_cold_path_does(tmp_path: Path) -> None:
    # Y10, Y1, Y2, Y4: same tree, same forwarded bytes, with and without the cache
    steps = _scenario()
    cold = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'cold.db'}", cached=False))
    warm = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'warm.db'}", cached=True))
    assert warm[0] == cold[0]  # the forwarded requests, byte for byte
    assert warm[1] == cold[1]  # the stored trees: structure and content
    assert cold[2] == [0] * len(cold[2])  # no cache: every message parsed
    sent = [len(s["messages"]) - 1 for s in steps if s != RESTART]  # the system prompt: apart
    # With the cache: the appended turn and the retry reuse all they share, the edit reuses
    # what precedes it, the fork what precedes it; after the restart the cache starts cold.
    assert warm[2][0] == 0 and warm[2][1] == sent[0] and warm[2][3] == sent[3]
    assert warm[2][4] == 3  # the edit is message 4 of the wire (3 after the system prompt)
    assert warm[2][7] == 0  # a restarted process parses in full (and stores nothing twice)
    assert warm[2][8] > 0


def test_prefix_cache_on_anthropic(tmp_path: Path) -> None:
    # Y10: the Messages protocol too, a tool_use whose input differs only in 1 vs 1.0 vs true
    def body(n: Any, extra: int) -> dict[str, Any]:
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc",
                                               "input": {"n": n}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": "done"}]}]
        for i in range(extra):
            msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": str(i)}]
        return {"model": "m", "max_tokens": 50, "messages": msgs}

    steps = [body(1, 0), body(1, 1), body(1.0, 1), body(True, 2)]
    cold = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'c.db'}", cached=False,
                            path="/v1/messages"))
    warm = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'w.db'}", cached=True,
                            path="/v1/messages"))
    assert warm[0] == cold[0] and warm[1] == cold[1]
    assert warm[2][1] == 3 and warm[2][2] == 1  # 1.0 is not the 1 before it (equal by ==)


# ------------------------------------------------------------------ property: random edits

_text = st.text(st.characters(blacklist_categories=()), max_size=12)
_number = st.one_of(st.integers(-3, 3), st.sampled_from([1.0, 0.0, -0.0, True, False]))


@st.composite
def _message(draw: st.DrawFn, k: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "call", "tool", "parts"]))
    if kind == "call":
        return {"role": "assistant", "content": draw(st.one_of(st.none(), _text)),
                "tool_calls": [{"id": f"c{draw(st.integers(0, 3))}", "type": "function",
                                "function": {"name": draw(st.sampled_from(["a", "b"])),
                                             "arguments": json.dumps({"x": draw(_number)})}}]}
    if kind == "tool":
        return {"role": "tool", "tool_call_id": f"c{draw(st.integers(0, 3))}",
                "content": draw(_text)}
    if kind == "parts":
        return {"role": "user", "content": [{"type": "text", "text": draw(_text)}]}
    return {"role": kind, "content": draw(_text) or f"m{k}"}


@st.composite
def _lists(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    current = [draw(_message(0))]
    out = [current]
    for step in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["append", "append", "edit", "truncate", "same"]))
        current = list(current)
        if op == "append":
            current += draw(st.lists(_message(step), min_size=1, max_size=3))
        elif op == "edit":
            current[draw(st.integers(0, len(current) - 1))] = draw(_message(step))
        elif op == "truncate" and len(current) > 1:
            current = current[:draw(st.integers(1, len(current) - 1))]
        out.append(current)
    return out


def _loads(cache: PrefixCache, body: Any, key: Any = "s", protocol: str = "openai") -> Any:
    return cache.loads(json.dumps(body).encode(), (protocol, key))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_lists())
def test_cached_parse_equals_cold_parse_over_random_edits(lists) -> None:
    # Y10, Y1: every list reads as the cold parse reads it (same messages, same chain hashes)
    cache = PrefixCache(Held(20_000))  # small: lists evicted as they go
    for messages in lists:
        body = {"model": "m", "messages": messages}
        try:
            cold = proxy_wire.parse("openai", body)
        except proxy_wire.WireError:
            with pytest.raises(proxy_wire.WireError):  # refused alike
                proxy_wire.parse("openai", _loads(cache, body), cache=cache, key="s")
            continue
        warm = proxy_wire.parse("openai", _loads(cache, body), cache=cache, key="s")
        assert warm.messages == cold.messages
        assert chain_hashes("s", warm.messages) == chain_hashes("s", cold.messages)
        assert (warm.system, warm.offset) == (cold.system, cold.offset)


def test_a_resent_list_parses_only_its_new_messages() -> None:
    # Y10: work per request proportional to what is new, decoding included
    cache = PrefixCache()
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
               for i in range(500)]
    body = _loads(cache, {"model": "m", "messages": history}, "k")
    proxy_wire.parse("openai", body, cache=cache, key="k")
    assert cache.parsed == 500 and cache.decoded == 500
    more = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}]
    body = _loads(cache, {"model": "m", "messages": more}, "k")
    got = proxy_wire.parse("openai", body, cache=cache, key="k")
    assert cache.parsed == 502 and got.reused == 500 and cache.decoded == 502
    # another conversation under the same key is told apart by its first message
    other = [{"role": "user", "content": "another conversation"}, *history[1:]]
    proxy_wire.parse("openai", _loads(cache, {"model": "m", "messages": other}, "k"),
                     cache=cache, key="k")
    assert cache.parsed == 502 + 500 and cache.decoded == 502 + 500
    # a dict that did not come from `loads` is read in full
    proxy_wire.parse("openai", {"model": "m", "messages": more}, cache=cache, key="k")
    assert cache.parsed == 502 + 500 + 502


def test_encode_reuses_the_bytes_the_parse_made() -> None:
    # Y10, Y4: a kept message is serialised once per request (by the parse), not again
    from contextfold.proxy.stats import encode

    kept = {"role": "user", "content": "kept as the client sent it"}
    rendered = {"role": "user", "content": "[contextfold checkpoint] ..."}
    body = {"model": "m", "max_tokens": 5, "messages": [rendered, kept]}
    spelled = b'{"role": "user",  "content": "kept as the client sent it"}'  # the parse's bytes
    data, pieces = encode(body, [None, spelled])
    assert spelled in data and pieces[-1] == spelled
    assert json.loads(data) == body
    assert encode(body)[0] != data and json.loads(encode(body)[0]) == body


def test_conversations_that_open_alike_keep_their_own_lists_y10() -> None:
    # Y10, issue 26: several clients under one scope (one key, one agent) whose lists open
    # with the same system prompt and first message, sent in turns: each request decodes,
    # parses and hashes only its new messages (the cache once kept one list per opening, so
    # every request of 2 clients parsed its whole history again).
    from contextfold.core.values.content_chain import ChainMemo

    cache, memo = PrefixCache(), ChainMemo()
    lists = {c: [{"role": "system", "content": "You are a coding agent."},
                 {"role": "user", "content": "Read the files."},
                 *({"role": "user" if i % 2 else "assistant", "content": f"{c} {i}"}
                   for i in range(200))] for c in "abc"}
    for turn in range(3):
        for c, history in lists.items():
            before = (cache.decoded, cache.parsed, memo.hashed)
            got = proxy_wire.parse("openai", _loads(cache, {"model": "m", "messages": history},
                                                   "k"), cache=cache, key="k")
            assert memo.hashes("k", got.messages) == chain_hashes("k", got.messages)
            if turn:
                new = (cache.decoded - before[0], cache.parsed - before[1],
                       memo.hashed - before[2])
                assert new == (2, 2, 1 + 2), (turn, c)  # the key message, the 2 new ones
            history += [{"role": "assistant", "content": f"ok {turn}"},
                        {"role": "user", "content": f"{c} next {turn}"}]


def _anthropic_scenario() -> list[Any]:
    def turn(i: int) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": [
                    {"type": "text", "text": f"reading {i}"},
                    {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"n": i}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                              "content": f"file {i}"}]}]

    def body(msgs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 50, "system": "You are a coding agent.",
                "messages": msgs}

    one = [{"role": "user", "content": "Read the files."}, *turn(1)]
    two = [*one, *turn(2)]
    edited = [*one[:1], *turn(9), *two[3:]]
    return [body(one), body(two), body(two), body(edited), body([*one, *turn(3)]), RESTART,
            body([*two, *turn(4)])]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_request_sent_as_it_came_forwards_what_the_item_walk_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    # Issue 26, Y2, Y4: without a checkpoint, pins, clips or a recall block the proxy
    # forwards the client's list without walking the projected items; the bytes it sends
    # and the tree it stores are those of the walk (an append, a retry, an edit, a fork,
    # a restart), on both protocols.
    from contextfold.runtime.mirror import Synced

    steps = _scenario() if path.endswith("completions") else _anthropic_scenario()
    taken: list[bool] = []
    as_sent = Synced.as_sent

    def spied(self: Synced) -> bool:
        taken.append(as_sent(self))
        return taken[-1]

    monkeypatch.setattr(Synced, "as_sent", spied)
    fast = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'fast.db'}", cached=True,
                            path=path))
    assert any(taken)  # the fast path was taken
    monkeypatch.setattr(Synced, "as_sent", lambda self: False)
    walked = asyncio.run(_run(steps, f"sqlite:///{tmp_path / 'walk.db'}", cached=True,
                              path=path))
    assert fast[0] == walked[0] and fast[1] == walked[1]


@pytest.mark.parametrize("failure", ["cancelled", "cut mid-body"])
def test_a_broken_answer_leaves_no_wait_and_stores_the_message_y1(
        tmp_path: Path, failure: str) -> None:
    # Y1, E1, issue 26: the upstream's answer breaks after the request was forwarded (the
    # request is cancelled, or the body is cut): nothing records a reply, so the session's
    # next request does not wait for one, and the user message sent (deferred: it was to be
    # stored with the reply) is stored alone.
    class Broken(Exception):
        pass

    async def run() -> None:
        config = ProxyConfig(upstream="http://up", windows={"*": 200_000},
                             db=f"sqlite:///{tmp_path / 'b.db'}")
        app = create_app(config)
        seen: list[bytes] = []
        async with app.router.lifespan_context(app):
            proxy = app.state.proxy
            await proxy.client.aclose()
            proxy.client = httpx2.AsyncClient(transport=httpx2.ASGITransport(
                app=_upstream(seen)))
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                          base_url="http://127.0.0.1") as client:
                first = [*BASE, OK, {"role": "user", "content": "next 1"}]
                r = await client.post("/v1/chat/completions", json=_openai(first))
                assert r.status_code == 200
                await asyncio.gather(*proxy.tasks)
                send = proxy.client.send

                async def broken(request: Any, **kwargs: Any) -> Any:
                    if failure == "cancelled":
                        raise asyncio.CancelledError
                    reply = await send(request, **kwargs)

                    async def cut() -> bytes:
                        raise Broken("the upstream closed the connection mid-body")

                    reply.aread = cut
                    return reply

                proxy.client.send = broken
                lost = [*first, OK, {"role": "user", "content": "this one breaks"}]
                with pytest.raises((asyncio.CancelledError, Broken)):
                    await client.post("/v1/chat/completions", json=_openai(lost))
                assert not proxy.mirror.awaiting_reply()  # nobody waits for a reply
                await proxy.mirror.wait_idle()
                sid = (await proxy.store.list_sessions())[0].id
                texts = [getattr(n.message.parts[0], "text", None)
                         for n in await proxy.store.load_tree(sid)
                         if n.message is not None and n.message.parts]
                assert texts.count("this one breaks") == 1  # stored alone, once
                proxy.client.send = send
                r = await client.post("/v1/chat/completions", json=_openai(lost))
                assert r.status_code == 200
                await asyncio.gather(*proxy.tasks)
                await proxy.mirror.wait_idle()
                texts = [getattr(n.message.parts[0], "text", None)
                         for n in await proxy.store.load_tree(sid)
                         if n.message is not None and n.message.parts]
                assert texts.count("this one breaks") == 1  # the retry stores it no more

    asyncio.run(run())
