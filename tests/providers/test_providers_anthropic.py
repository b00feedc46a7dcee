"""Anthropic specifics over real HTTP with the real `anthropic` SDK."""

from __future__ import annotations

import anthropic
import pytest

from contextfold.core.values.messages import ReasoningPart, TextPart, ToolCallPart, text_message
from contextfold.providers import (
    AnthropicModel,
    ProviderUnavailableError,
    RetryPolicy,
    simple_request,
)
from contextfold.wire.anthropic_messages import read_reply, usage_of
from tests.builders import tool_call, tool_result, user
from tests.fakeserver import Reply, server_fixture

fake = server_fixture()


def model_for(server, **options) -> AnthropicModel:
    options.setdefault("retry", RetryPolicy(max_attempts=3, base_delay=0, jitter=0))
    return AnthropicModel("claude-test-model", base_url=server.anthropic_url, api_key="k",
                          **options)


async def test_overloaded_529_is_retried(fake):  # P4
    fake.enqueue(Reply(status=529), Reply(status=529), Reply(text="there you go"))
    reply = await model_for(fake).complete(simple_request([user("hi")], max_tokens=16))
    assert reply.text == "there you go"
    assert [r.status for r in fake.requests] == [529, 529, 200]


async def test_overloaded_529_gives_up_after_the_last_attempt(fake):  # P4
    fake.enqueue(*[Reply(status=529)] * 3)
    with pytest.raises(ProviderUnavailableError) as info:
        await model_for(fake, retry=RetryPolicy(max_attempts=2, base_delay=0)).complete(
            simple_request([user("hi")], max_tokens=16))
    assert info.value.status == 529 and info.value.attempts == 2


async def test_cache_read_and_write_map_one_to_one(fake):  # E1
    fake.enqueue(Reply(text="cached", cached_tokens=5, cache_write=7))
    reply = await model_for(fake).complete(
        simple_request([user("a question with some words in it")], max_tokens=16))
    usage = reply.message.usage
    prompt = fake.requests[-1].prompt_tokens
    assert (usage.cache_read, usage.cache_write) == (5, 7)
    assert usage.input == prompt - 12 and usage.prompt == prompt


async def test_streamed_usage_combines_start_and_delta_events(fake):  # E1
    fake.enqueue(Reply(text="a streamed answer", cached_tokens=3, cache_write=2))
    done = None
    async for event in model_for(fake).stream(simple_request([user("q " * 30)],
                                                             max_tokens=32)):
        done = event
    usage = done.response.message.usage
    assert usage.prompt == fake.requests[-1].prompt_tokens
    assert (usage.cache_read, usage.cache_write) == (3, 2) and usage.output > 1


async def test_consecutive_user_messages_are_merged_for_the_api(fake):  # K1
    # Tool results followed by user text share one user turn; the server enforces alternation.
    history = [user("q"), tool_call("c1"), tool_result("c1"), user("and now?")]
    reply = await model_for(fake).complete(simple_request(
        [*history, text_message("user", "one more")], max_tokens=16))
    sent = fake.requests[-1]
    assert sent.status == 200 and reply.text == "ok"
    assert [m["role"] for m in sent.messages] == ["user", "assistant", "user"]


def test_thinking_and_tool_blocks_are_parsed():  # R2
    # The SDK's own objects, read by the one Messages reader the proxy and importers use: a
    # redacted thinking block is kept as reasoning with its data (as they always kept it).
    reply = anthropic.types.Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 4},
        "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "Answer"},
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"d": "."}},
                    {"type": "redacted_thinking", "data": "xxx"}]})
    read = read_reply(reply, "fallback")
    assert read.message.parts == (
        ReasoningPart(text="hmm", signature="sig"), TextPart(text="Answer"),
        ToolCallPart(id="toolu_1", name="ls", input={"d": "."}),
        ReasoningPart(text="", signature="xxx"))
    assert (read.stop_reason, read.request_id, read.message.model) == (
        "tool_use", "msg_1", "claude-test")


def test_usage_with_missing_cache_fields():  # E1
    usage = usage_of(anthropic.types.Usage(input_tokens=10, output_tokens=2,
                                           cache_read_input_tokens=None), "m")
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (10, 2, 0, 0)
