"""OpenAI-compatible specifics: each server's own overflow error, usage with cached tokens,
local servers' quirks, over real HTTP with the real `openai` SDK."""

from __future__ import annotations

import openai
import pytest

from contextfold.core.values.messages import text_message
from contextfold.providers import (
    ContextOverflowError,
    OpenAICompatModel,
    RetryPolicy,
    make_chat_model,
    simple_request,
)
from contextfold.wire.openai_chat import stop_reason_of, usage_of
from tests.fakeserver import Reply, ToolCallSpec, server_fixture

fake = server_fixture()


def model_for(server, provider: str = "vllm", **options) -> OpenAICompatModel:
    options.setdefault("retry", RetryPolicy(max_attempts=3, base_delay=0, jitter=0))
    model = make_chat_model(f"{provider}/some-model", base_url=server.openai_url,
                            api_key="k", **options)
    assert isinstance(model, OpenAICompatModel)
    return model


def big_request(max_tokens: int = 16):
    return simple_request([text_message("user", "many words " * 150)], max_tokens=max_tokens)


@pytest.mark.parametrize("flavor,numbers", [
    ("openai", True),
    ("vllm", True),
    ("llamacpp", True),
    ("openrouter", True),
    ("ollama", False),
])
async def test_each_servers_overflow_error_is_recognised(fake, flavor, numbers):  # P4
    fake.configure(context_window=100, openai_flavor=flavor, count_max_tokens=False)
    with pytest.raises(ContextOverflowError) as info:
        await model_for(fake).complete(big_request())
    err = info.value
    prompt = fake.requests[-1].prompt_tokens
    if numbers:
        assert (err.requested_tokens, err.limit_tokens) == (prompt, 100)
    else:
        assert err.requested_tokens is None and err.limit_tokens is None
    assert len(fake.requests) == 1


@pytest.mark.parametrize("flavor", ["openai", "vllm", "openrouter"])
async def test_overflow_caused_by_max_tokens_reports_both_parts(fake, flavor):  # P4
    fake.configure(context_window=1000, openai_flavor=flavor)
    with pytest.raises(ContextOverflowError) as info:
        await model_for(fake).complete(
            simple_request([text_message("user", "short")], max_tokens=999))
    prompt = fake.requests[-1].prompt_tokens
    assert info.value.requested_tokens == prompt + 999
    assert info.value.limit_tokens == 1000


async def test_cached_tokens_are_split_out_of_prompt_tokens(fake):  # E1, E3
    fake.enqueue(Reply(text="cached", cached_tokens=6))
    reply = await model_for(fake).complete(simple_request([text_message("user", "hi there")],
                                                          max_tokens=8))
    prompt = fake.requests[-1].prompt_tokens
    usage = reply.message.usage
    assert usage.cache_read == 6 and usage.input == prompt - 6
    assert usage.cache_write == 0
    assert usage.prompt == prompt  # what the request occupied, not a billing total


async def test_prompt_cache_simulation_reports_the_shared_prefix(fake):  # E1, A4
    fake.configure(prompt_cache=True)
    model = model_for(fake)
    first = [text_message("user", "a long shared question " * 10)]
    one = await model.complete(simple_request(first, max_tokens=8))
    two = await model.complete(simple_request(
        [*first, one.message, text_message("user", "and a follow-up")], max_tokens=8))
    assert one.message.usage.cache_read == 0
    assert 0 < two.message.usage.cache_read < fake.requests[-1].prompt_tokens


async def test_server_without_usage_gives_no_usage(fake):  # E1
    fake.enqueue(Reply(text="no usage here", report_usage=False))
    reply = await model_for(fake).complete(big_request())
    assert reply.message.usage is None


async def test_max_tokens_field_follows_the_provider(fake):  # B3
    await model_for(fake, provider="openai").complete(
        simple_request([text_message("user", "x")], max_tokens=33))
    await model_for(fake, provider="ollama").complete(
        simple_request([text_message("user", "x")], max_tokens=44))
    first, second = fake.requests
    assert first.body.get("max_completion_tokens") == 33 and "max_tokens" not in first.body
    assert second.body.get("max_tokens") == 44


async def test_tool_calls_with_stop_finish_reason_count_as_tool_use(fake):  # K1
    # Ollama answers finish_reason "stop" even when it called a tool.
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("ls", {"dir": "."}),), stop_reason="stop"))
    reply = await model_for(fake, provider="ollama").complete(big_request())
    assert reply.stop_reason == "tool_use" and reply.raw_stop_reason == "stop"


def test_usage_normalisation_without_details():  # E1
    sdk = openai.types.CompletionUsage(prompt_tokens=100, completion_tokens=7,
                                       total_tokens=107, prompt_tokens_details=None)
    for raw in (sdk, sdk.model_dump()):  # the SDK's object or the JSON: one rule
        usage = usage_of(raw, "m")
        assert (usage.input, usage.cache_read, usage.output) == (100, 0, 7)
    assert usage_of(None, "m") is None


@pytest.mark.parametrize("finish,calls,expected", [
    ("stop", False, "end_turn"), ("length", False, "max_tokens"),
    ("tool_calls", True, "tool_use"), ("content_filter", False, "refusal"),
    (None, False, "other"), ("weird", False, "other"),
])
def test_finish_reasons_are_normalised(finish, calls, expected):  # B3
    assert stop_reason_of(finish, calls) == expected
