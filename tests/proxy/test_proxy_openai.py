"""`contextfold proxy` with the official `openai` SDK and LangChain's ChatOpenAI as clients,
over real HTTP, to the scripted upstream (tests/fakeserver) enforcing a small window."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply, ToolCallSpec

WINDOW = 10_000
KEY = "sk-proxy-test-SECRET-4242"


def start(upstream, db: str) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW},
                                   db=db)).start()


@pytest.fixture
def proxy(upstream, db) -> Iterator[ProxyThread]:
    p = start(upstream, db)
    yield p
    p.stop()


def client(proxy: ProxyThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)


TOOLS = [{"type": "function", "function": {"name": "read", "description": "read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def run_tool_loop(oa: openai.OpenAI, upstream, rounds: int, *, stream: bool = False,
                  parallel: int = 1) -> list[dict]:
    """An agent loop: every reply asks for `parallel` reads whose results are big."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Read every file and report."}]
    for r in range(rounds):
        upstream.enqueue(Reply(text=f"reading batch {r}", tool_calls=tuple(
            ToolCallSpec("read", {"path": f"f{r}_{k}.py"}, id=f"call_{r}_{k}")
            for k in range(parallel))), kind="chat")  # a summary request never takes it
        if stream:
            text, calls = "", {}
            for chunk in oa.chat.completions.create(model="local-model", messages=messages,
                                                    tools=TOOLS, stream=True, max_tokens=500):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for c in choice.delta.tool_calls or []:
                        slot = calls.setdefault(c.index, {"id": "", "name": "", "args": ""})
                        slot["id"] = c.id or slot["id"]
                        slot["name"] += (c.function.name or "") if c.function else ""
                        slot["args"] += (c.function.arguments or "") if c.function else ""
            tool_calls = [{"id": c["id"], "type": "function",
                           "function": {"name": c["name"], "arguments": c["args"]}}
                          for _, c in sorted(calls.items())]
        else:
            reply = oa.chat.completions.create(model="local-model", messages=messages,
                                               tools=TOOLS, max_tokens=500)
            msg = reply.choices[0].message
            text = msg.content or ""
            tool_calls = [c.model_dump() for c in msg.tool_calls or []]
        assert len(tool_calls) == parallel
        messages.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        for call in tool_calls:
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": f"contents of {call['id']}: " + "def f(): pass\n" * 200})
    return messages


async def sessions(db: str) -> list:
    store = await open_store(db)
    try:
        return [(s, await store.load_tree(s.id)) for s in await store.list_sessions()]
    finally:
        await store.close()


def test_a_tool_loop_past_the_window_never_overflows_the_upstream_y1_y2(proxy, upstream, db):
    oa = client(proxy)
    messages = run_tool_loop(oa, upstream, rounds=18)
    total = sum(len(json.dumps(m)) for m in messages) // 4
    assert total > WINDOW  # the client's history is well past the upstream's window
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 18
    assert not upstream.overflowed and not upstream.rejected
    assert max(r.prompt_tokens for r in chats) <= WINDOW
    # The client's latest message is forwarded as sent (Y2).
    last = chats[-1].body["messages"]
    assert last[-1] == messages[-3] and last[-1]["role"] == "tool"
    proxy.stop()  # the last reply is recorded after the client has it: let it finish
    found = asyncio.run(sessions(db))
    assert len(found) == 1  # one conversation, one session (Y1)
    info, tree = found[0]
    assert info.metadata["proxy"]["model"] == "local-model"
    assert "OpenAI" in info.metadata["proxy"]["client"]
    # Y4: between compactions the forwarded prefix repeats; the share is reported per session.
    stats = info.metadata["proxy_stats"]
    assert stats["requests"] == 18 and 0.3 < stats["prefix_reuse"] < 1
    stored = [n for n in tree if n.message is not None]
    # Every message sent once, nothing twice: user, 18 replies, 17 results sent back.
    assert len(stored) == 1 + 18 + 17
    assert any(n.checkpoint is not None for n in tree)
    replies = [n.message for n in stored if n.message.role == "assistant"]
    assert all(r.usage is not None and r.usage.input > 0 for r in replies)  # E1


def test_streaming_parallel_tool_calls_are_recorded_whole_y2(proxy, upstream, db):
    oa = client(proxy)
    run_tool_loop(oa, upstream, rounds=6, stream=True, parallel=3)
    assert not upstream.overflowed and not upstream.rejected
    proxy.stop()
    _info, tree = asyncio.run(sessions(db))[0]
    calls = [n.message for n in tree if n.message is not None and n.message.tool_calls]
    assert len(calls) == 6 and all(len(m.tool_calls) == 3 for m in calls)
    assert all(m.usage is not None for m in calls)  # usage from the streamed answer (E1)


def test_a_request_that_cannot_fit_gets_the_context_length_error_y3(proxy, upstream):
    oa = client(proxy)
    with pytest.raises(openai.BadRequestError) as err:
        oa.chat.completions.create(model="local-model", max_tokens=100, messages=[
            {"role": "user", "content": "word " * 20_000}])
    assert err.value.code == "context_length_exceeded"
    assert upstream.requests == []  # never forwarded to fail upstream


def test_the_key_is_forwarded_and_never_stored_or_logged_y5(proxy, upstream, db, caplog):
    caplog.set_level(logging.DEBUG)
    oa = client(proxy)
    oa.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "hi"}])
    assert upstream.requests and upstream.requests[-1].status == 200  # the key got through
    bad = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="local-model",
                                    messages=[{"role": "user", "content": "hi"}])
    proxy.stop()
    raw = Path(db.removeprefix("sqlite:///")).read_bytes()
    assert KEY.encode() not in raw and b"sk-wrong" not in raw
    assert KEY not in caplog.text and "sk-wrong" not in caplog.text
    assert "session=" in caplog.text  # the per-request line was logged


def test_retries_and_edits_branch_and_a_restart_keeps_the_mapping_y1(upstream, db):
    p = start(upstream, db)
    oa = client(p)
    base = [{"role": "user", "content": "plan a trip"}]
    first = oa.chat.completions.create(model="local-model", messages=base)
    convo = [*base, {"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "to Kyoto"}]
    oa.chat.completions.create(model="local-model", messages=convo)
    oa.chat.completions.create(model="local-model", messages=convo)  # a retry: same list
    p.stop()
    p = start(upstream, db)  # a restarted proxy: the mapping lives in the store
    try:
        edited = [*convo[:2], {"role": "user", "content": "to Osaka"}]
        client(p).chat.completions.create(model="local-model", messages=edited)
    finally:
        p.stop()
    found = asyncio.run(sessions(db))
    assert len(found) == 1
    _info, tree = found[0]
    users = sorted(n.message.parts[0].text for n in tree
                   if n.message is not None and n.message.role == "user")
    assert users == ["plan a trip", "to Kyoto", "to Osaka"]  # nothing stored twice
    replies = [n for n in tree if n.message is not None and n.message.role == "assistant"]
    listed = subprocess.run([sys.executable, "-m", "contextfold", "sessions", "--json",
                             "--db", db], capture_output=True, text=True, check=True)
    (row,) = json.loads(listed.stdout)["sessions"]
    # titled by what the person first asked, the client beside it (issue 41)
    assert row["title"].startswith("plan a trip · OpenAI") and row["model"] == "local-model"
    # The retry was answered with the same text as the first try: the same content, stored once.
    assert len(replies) == 3  # first answer, Kyoto answer (and its retry), Osaka answer


def test_langchain_chat_openai_through_the_proxy_y2(proxy, upstream):
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model="local-model", base_url=proxy.url + "/v1", api_key=KEY,
                      max_retries=0)
    history = []
    for i in range(12):
        history.append(HumanMessage(f"note {i}: " + "remember this detail " * 40))
        history.append(chat.invoke(history))
    assert not upstream.overflowed and not upstream.rejected
    assert len([r for r in upstream.requests if not r.is_summary]) == 12
