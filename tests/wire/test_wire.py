"""One place per wire protocol (contextfold.wire): the same reply reads the same through the
SDK adapter, the proxy and the importer; SDK objects and JSON read alike; the usage rule."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from pydantic import TypeAdapter

from contextfold.core.render.export import render_anthropic, render_openai, to_anthropic, to_openai
from contextfold.core.values.content_chain import chain_hashes
from contextfold.core.values.messages import Message, TextPart, ToolCallPart, Usage
from contextfold.core.view.projection import Projection
from contextfold.formats import import_anthropic_messages, import_openai_messages
from contextfold.providers import AnthropicModel, OpenAICompatModel, StreamDone, simple_request
from contextfold.proxy import ProxyConfig
from contextfold.proxy import wire as proxy_wire
from contextfold.proxy.serve import ProxyThread
from contextfold.runtime.errors import RequestTooLargeError
from contextfold.store import open_store
from contextfold.wire import anthropic_messages, openai_chat, openai_responses
from tests.builders import branch_of, chain, tool_call, tool_result, user
from tests.fakeserver import FakeServer, Reply, fake_server

QUESTION = "Which of the cached documents mentions the prompt cache?"
MODEL = "local-model"


@pytest.fixture
def upstream() -> Iterator[FakeServer]:
    with fake_server(context_window=10_000) as fake:
        yield fake


async def stored_replies(db: str) -> list[Message]:
    store = await open_store(db)
    try:
        (session,) = await store.list_sessions()
        return [n.message for n in await store.load_tree(session.id)
                if n.message is not None and n.message.role == "assistant"]
    finally:
        await store.close()


async def adapter_usage(model: OpenAICompatModel | AnthropicModel, stream: bool) -> Usage:
    request = simple_request([user(QUESTION)], max_tokens=64)
    try:
        if stream:
            events = [e async for e in model.stream(request)]
            done = events[-1]
            assert isinstance(done, StreamDone)
            return done.response.message.usage
        return (await model.complete(request)).message.usage
    finally:
        await model.aclose()


def proxied_usage(upstream_url: str, db: str, call) -> Usage:
    proxy = ProxyThread(ProxyConfig(upstream=upstream_url, windows={"*": 10_000},
                                    db=db)).start()
    try:
        call(proxy.url)
    finally:
        proxy.stop()  # the reply is recorded after the client has it: let that finish
    (reply,) = asyncio.run(stored_replies(db))
    return reply.usage


@pytest.mark.parametrize("stream", [False, True])
def test_one_openai_reply_gives_one_usage_on_every_face(upstream, tmp_path, stream):  # E1 E3
    """The same reply with `prompt_tokens_details.cached_tokens`: the SDK adapter, the proxy
    and the importer all split the cached tokens out of `prompt_tokens` (each token once)."""
    upstream.enqueue(*[Reply(text="the second one", cached_tokens=6)] * 3)
    sdk = asyncio.run(adapter_usage(OpenAICompatModel(
        MODEL, base_url=upstream.openai_url, api_key="k", provider="vllm"), stream))

    def through_proxy(url: str) -> None:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        kwargs = dict(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": QUESTION}])
        if stream:
            list(client.chat.completions.create(**kwargs, stream=True))
        else:
            client.chat.completions.create(**kwargs)

    proxied = proxied_usage(upstream.openai_url, f"sqlite:///{tmp_path / 'p.db'}", through_proxy)
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]}
    answer = httpx.post(upstream.openai_url + "/chat/completions", json=body).json()
    recorded = [body["messages"][0], {**answer["choices"][0]["message"],
                                      "usage": answer["usage"], "model": answer["model"]}]
    imported = import_openai_messages(recorded).nodes[-1].message.usage
    prompts = {r.prompt_tokens for r in upstream.requests}
    assert len(prompts) == 1  # three times the same request, so the same reply
    prompt = prompts.pop()
    assert answer["usage"]["prompt_tokens"] == prompt
    expected = Usage(input=prompt - 6, cache_read=6, output=answer["usage"]["completion_tokens"],
                     model=MODEL)
    assert sdk == proxied == imported == expected
    assert expected.prompt == prompt  # what the request occupied, not a billing total


@pytest.mark.parametrize("stream", [False, True])
def test_one_anthropic_reply_gives_one_usage_on_every_face(upstream, tmp_path, stream):  # E1
    upstream.enqueue(*[Reply(text="the second one", cached_tokens=5, cache_write=7)] * 3)
    sdk = asyncio.run(adapter_usage(AnthropicModel(
        MODEL, base_url=upstream.anthropic_url, api_key="k"), stream))
    messages = [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]

    def through_proxy(url: str) -> None:
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        kwargs = dict(model=MODEL, max_tokens=64, messages=messages)
        if stream:
            with client.messages.stream(**kwargs) as s:
                s.get_final_message()
        else:
            client.messages.create(**kwargs)

    proxied = proxied_usage(upstream.base_url, f"sqlite:///{tmp_path / 'p.db'}", through_proxy)
    body = {"model": MODEL, "max_tokens": 64, "messages": messages}
    answer = httpx.post(upstream.base_url + "/v1/messages", json=body,
                        headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}).json()
    recorded = [messages[0], {"role": "assistant", "content": answer["content"],
                              "usage": answer["usage"], "model": answer["model"]}]
    imported = import_anthropic_messages(recorded).nodes[-1].message.usage
    prompts = {r.prompt_tokens for r in upstream.requests}
    assert len(prompts) == 1
    prompt = prompts.pop()
    expected = Usage(input=prompt - 12, cache_read=5, cache_write=7,
                     output=answer["usage"]["output_tokens"], model=MODEL)
    assert sdk == proxied == imported == expected


# --------------------------------------------------------------------------- SDK objects = JSON


OPENAI_REPLY = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "reading", "reasoning_content": "look first",
        "tool_calls": [{"id": "call_a", "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "a.py"}'}},
                       {"id": "call_b", "type": "function",
                        "function": {"name": "ls", "arguments": ""}}]}}],
    "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129,
              "prompt_tokens_details": {"cached_tokens": 100}}}


def test_an_sdk_completion_and_its_json_read_alike():  # E1 K1
    sdk = openai.types.chat.ChatCompletion.model_validate(OPENAI_REPLY)
    from_sdk, from_json = (openai_chat.read_reply(r, "fallback") for r in (sdk, OPENAI_REPLY))
    assert from_sdk == from_json
    message = from_json.message
    assert [type(p).__name__ for p in message.parts] == ["ReasoningPart", "TextPart",
                                                         "ToolCallPart", "ToolCallPart"]
    assert message.tool_calls[1].input == {}  # no arguments at all is no arguments
    assert message.usage == Usage(input=20, cache_read=100, output=9, model="m")
    assert (from_json.stop_reason, from_json.request_id) == ("tool_use", "chatcmpl-1")


def openai_chunks() -> list[dict]:
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    return [chunk({"role": "assistant", "content": ""}), chunk({"content": "read"}),
            chunk({"content": "ing"}),
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                   "function": {"name": "read", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]}),
            chunk({}, "tool_calls"),
            {**base, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 4,
                                              "total_tokens": 54,
                                              "prompt_tokens_details": {"cached_tokens": 30}}}]


def test_one_assembler_reads_sdk_chunks_and_json_chunks_alike():  # E1 K1
    Chunk = openai.types.chat.ChatCompletionChunk
    replies = []
    for chunks in (openai_chunks(), [Chunk.model_validate(c) for c in openai_chunks()]):
        assembler = openai_chat.StreamAssembler()
        text = "".join(assembler.add(c) for c in chunks)
        assert text == "reading" and assembler.finished
        replies.append(assembler.reply("fallback"))
    assert replies[0] == replies[1]
    message = replies[0].message
    assert message.tool_calls == (ToolCallPart(id="call_a", name="read", input={"path": "a.py"}),)
    assert message.usage == Usage(input=20, cache_read=30, output=4, model="m")
    # The whole reply of the same content reads to the same message (one reader).
    whole = openai_chat.read_reply({"model": "m", "usage": openai_chunks()[-1]["usage"],
                                    "choices": [{"finish_reason": "tool_calls", "message": {
                                        "role": "assistant", "content": "reading",
                                        "tool_calls": [{"id": "call_a", "function": {
                                            "name": "read",
                                            "arguments": '{"path": "a.py"}'}}]}}]}, "m")
    assert whole.message == message


ANTHROPIC_EVENTS = [
    {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 1, "cache_read_input_tokens": 300,
                  "cache_creation_input_tokens": 20}}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "let me see"}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "signature_delta", "signature": "sig-1"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Rea"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "d."}},
    {"type": "content_block_start", "index": 2, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": '{"path": "a'}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": '.py"}'}},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 12}},
    {"type": "message_stop"},
]


def test_anthropic_sdk_events_and_json_events_assemble_alike():  # E1 K1 R2
    adapter = TypeAdapter(anthropic.types.RawMessageStreamEvent)
    replies = []
    for events in (ANTHROPIC_EVENTS, [adapter.validate_python(e) for e in ANTHROPIC_EVENTS]):
        assembler = anthropic_messages.StreamAssembler()
        assert "".join(assembler.add(e) for e in events) == "Read."
        assert assembler.finished
        replies.append(assembler.reply("fallback"))
    assert replies[0] == replies[1]
    reply = replies[0]
    assert reply.stop_reason == "tool_use" and reply.request_id == "msg_1"
    # The prompt side from message_start, the output from message_delta (E1).
    assert reply.message.usage == Usage(input=40, cache_read=300, cache_write=20, output=12,
                                        model="claude-x")
    whole = anthropic_messages.read_reply({
        "type": "message", "role": "assistant", "model": "claude-x", "stop_reason": "tool_use",
        "usage": {"input_tokens": 40, "output_tokens": 12, "cache_read_input_tokens": 300,
                  "cache_creation_input_tokens": 20},
        "content": [{"type": "thinking", "thinking": "let me see", "signature": "sig-1"},
                    {"type": "text", "text": "Read."},
                    {"type": "tool_use", "id": "toolu_1", "name": "read",
                     "input": {"path": "a.py"}}]}, "m")
    assert whole.message == reply.message


# --------------------------------------------------------------------------- the usage rule


@pytest.mark.parametrize("raw,expected", [
    ({"prompt_tokens": 10, "completion_tokens": 2}, Usage(input=10, output=2)),
    ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None},
     Usage(input=10, output=2)),
    ({"prompt_tokens": 10, "completion_tokens": 2,
      "prompt_tokens_details": {"cached_tokens": 50}}, Usage(cache_read=10, output=2)),
    ({"prompt_tokens": "ten", "completion_tokens": 2}, None),  # half a report: no baseline
    ({"prompt_tokens": 10, "completion_tokens": -1}, None),
    ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": "x"}}, None),
    ({"total_tokens": 12}, None),  # reports nothing we read (E3: never a billing total)
    (None, None),
])
def test_the_openai_usage_rule(raw, expected):  # E1 E3
    assert openai_chat.usage_of(raw, None) == expected


def test_the_anthropic_usage_rule():  # E1
    assert anthropic_messages.usage_of({"input_tokens": 3, "output_tokens": 1,
                                        "cache_read_input_tokens": None}, "m") == Usage(
        input=3, output=1, model="m")
    assert anthropic_messages.usage_of({"input_tokens": 3, "output_tokens": True}, "m") is None
    assert anthropic_messages.usage_of({}, "m") is None


# --------------------------------------------------------------------------- one rule, every face


def test_a_streamed_call_without_arguments_matches_the_clients_resend_y1():  # Y1 K1
    """The reply the proxy records and the same message resent by the client are one message
    (so it is stored once): a call with no arguments reads as {} on both sides."""
    assembler = openai_chat.StreamAssembler()
    for chunk in ({"choices": [{"index": 0, "delta": {"content": "listing", "tool_calls": [
                      {"index": 0, "id": "call_1", "function": {"name": "ls",
                                                                "arguments": ""}}]}}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}):
        assembler.add(chunk)
    recorded = assembler.reply("m").message
    resent = proxy_wire.parse("openai", {"model": "m", "messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "listing", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": ""}}]},
    ]}).messages[1]
    assert chain_hashes("s", [recorded]) == chain_hashes("s", [resent])


def test_a_reply_with_a_compaction_item_matches_the_items_resent_y7_y1():
    """OpenAI's in-call compaction: the reply recorded (one message) and the client's items
    sent back, with or without what came before the item, hash alike (SPEC Y7, Y1)."""
    item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAA-opaque"}
    output = [item, {"id": "msg_1", "type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "done", "annotations": []}]},
              {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "ls",
               "arguments": "{}"}]
    recorded = openai_responses.read_reply({"output": output, "model": "m"}, "m").message
    earlier = [{"role": "user", "content": "list the files"}]
    kept = [g.message for g in openai_responses.read_input([*earlier, *output])]
    dropped = [g.message for g in openai_responses.read_input(output)]
    assert len(kept) == 2 and len(dropped) == 1
    assert chain_hashes("s", kept)[-1] == chain_hashes("s", dropped)[-1] == \
        chain_hashes("s", [user("list the files"), recorded])[-1]


def test_an_on_demand_compaction_answer_reads_its_usage_from_its_iterations_y7():
    """Zero at the top, the summarising call in `usage.iterations` (Anthropic on-demand
    compaction): that call is the reply's usage; an ordinary answer's is left as it is."""
    block = {"type": "compaction", "content": "summary", "signature": "sig"}
    answer = {"type": "message", "role": "assistant", "model": "m", "content": [block],
              "stop_reason": "compaction", "usage": {
                  "input_tokens": 0, "output_tokens": 0,
                  "iterations": [{"type": "compaction", "input_tokens": 1200,
                                  "output_tokens": 90}]}}
    reply = anthropic_messages.read_reply(answer, "m")
    assert reply.raw_stop_reason == "compaction"
    assert reply.message.usage == Usage(input=1200, output=90, model="m")
    assert reply.message.parts[0].data == block
    two = {**answer["usage"], "input_tokens": 300, "output_tokens": 20, "iterations": [
        {"type": "compaction", "input_tokens": 1200, "output_tokens": 90},
        {"type": "message", "input_tokens": 300, "output_tokens": 20}]}
    assert anthropic_messages.usage_of(two, "m") == Usage(input=300, output=20, model="m")


def test_render_message_is_what_the_export_writes_for_that_message():  # T3 Y4
    history = [user("read it"), tool_call("c1", "read", {"path": "a.py"}),
               tool_result("c1", "contents of a.py"), user("thanks")]
    nodes = chain(history)
    projection = Projection(None, tuple(branch_of(nodes).nodes))
    oa = to_openai(projection).messages
    an = to_anthropic(projection).messages
    for i, msg in enumerate(history):
        assert render_openai(msg) == [oa[i]]
        assert openai_chat.render_message(msg) == render_openai(msg)
    # Anthropic: the tool result shares the user turn with the text after it.
    assert render_anthropic(history[1]) == [an[1]]
    assert render_anthropic(history[2])[0]["content"] == an[2]["content"][:1]
    both = Message(role="tool", parts=(*history[2].parts, TextPart(text="thanks")))
    assert anthropic_messages.render_message(both) == [an[2]]


def test_the_proxy_answers_each_protocol_with_its_own_error_bodies_y3():  # Y3
    err = RequestTooLargeError("too big", overflow_tokens=3_000, estimated_tokens=12_000,
                               safe_input_limit=9_000)
    status, body = proxy_wire.too_large("openai", err)
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 9000 tokens" in body["error"]["message"]
    assert "(contextfold proxy: too big)" in body["error"]["message"]
    status, body = proxy_wire.too_large("anthropic", err)
    assert status == 400 and body["type"] == "error"
    assert body["error"]["message"].startswith("prompt is too long: 12000 tokens > 9000 maximum")


def test_the_wire_package_is_pure():  # DESIGN: no SDK, no asyncio, no store in contextfold.wire
    forbidden = ("contextfold.store", "contextfold.providers", "contextfold.runtime",
                 "contextfold.proxy", "contextfold.formats", "asyncio", "openai", "anthropic",
                 "sqlalchemy")
    root = Path(openai_chat.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["contextfold." + (node.module or "") if node.level >= 2
                         else (node.module or "")]
            else:
                continue
            assert not any(n.startswith(forbidden) for n in names), f"{path.name}: {names}"


def sse(*events: dict) -> bytes:
    return b"".join(b"event: x\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)


def test_a_zero_in_the_last_anthropic_usage_event_does_not_erase_the_prompt_e1():  # E1
    """Some servers repeat the prompt counts as 0 in message_delta: the prompt side of
    message_start stays (a 0 would make the next baseline far too small)."""
    reader = proxy_wire.StreamReader("anthropic", "m")
    stream = sse(
        {"type": "message_start", "message": {"id": "msg_1", "model": "m", "role": "assistant",
                                              "usage": {"input_tokens": 900, "output_tokens": 1,
                                                        "cache_read_input_tokens": 4_000}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": "done"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 30}},
        {"type": "message_stop"})
    for i in range(0, len(stream), 7):  # arbitrary network chunks
        reader.feed(stream[i:i + 7])
    reply = reader.reply()
    assert reply is not None and reply.text == "done"
    assert reply.usage == Usage(input=900, cache_read=4_000, output=30, model="m")
