"""Both adapters, on the real SDKs, over real HTTP against the fake provider.

Every behaviour here must hold for the OpenAI-compatible and the Anthropic adapter alike, so
each test runs once per protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import Message, ToolResultPart, text_message
from contextfold.core.view.projection import Projection, project
from contextfold.providers import (
    AnthropicModel,
    ChatModel,
    ChatRequest,
    ContextOverflowError,
    MalformedResponseError,
    OpenAICompatModel,
    ProviderAuthError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    RetryPolicy,
    StreamDone,
    StreamInterruptedError,
    TextDelta,
    ToolSpec,
    simple_request,
)
from tests.builders import branch_of, chain, tool_call, tool_result, user
from tests.fakeserver import FakeServer, Reply, ToolCallSpec, server_fixture

fake = server_fixture()

PROTOCOLS = ["openai", "anthropic"]
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01, jitter=0)


def make_model(protocol: str, server: FakeServer, **options: Any) -> Any:
    options.setdefault("retry", FAST_RETRY)
    options.setdefault("api_key", "test-key")
    if protocol == "openai":
        return OpenAICompatModel("gpt-4o", base_url=server.openai_url, **options)
    return AnthropicModel("claude-test-model", base_url=server.anthropic_url, **options)


def projection_of(messages: Sequence[Message]) -> Projection:
    return project(branch_of(chain(messages)))


def hello(max_tokens: int = 256) -> ChatRequest:
    return simple_request([text_message("user", "Hello there")], system="Be brief.",
                          max_tokens=max_tokens)


async def collect(model: Any, request: ChatRequest) -> tuple[list[str], Any]:
    deltas: list[str] = []
    done = None
    async for event in model.stream(request):
        if isinstance(event, TextDelta):
            assert done is None, "a text delta arrived after StreamDone"
            deltas.append(event.text)
        else:
            assert isinstance(event, StreamDone)
            done = event.response
    return deltas, done


# --------------------------------------------------------------------------- plain


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_plain_completion_normalises_reply_and_usage(fake, protocol):  # E1
    fake.enqueue(Reply(text="Hi! How can I help?"))
    reply = await make_model(protocol, fake).complete(hello())
    sent = fake.requests[-1]
    assert reply.text == "Hi! How can I help?"
    assert reply.message.role == "assistant" and reply.message.status == "complete"
    assert reply.stop_reason == "end_turn"
    usage = reply.message.usage
    assert usage is not None and usage.model == reply.message.model
    # What the request occupied: the server's real token count of what it received.
    assert usage.prompt == sent.prompt_tokens
    assert usage.output > 0 and usage.occupied == sent.prompt_tokens + usage.output
    assert sent.system == "Be brief."
    assert sent.max_tokens == 256


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_pending_messages_follow_the_projection(fake, protocol):  # T3, P1
    history = projection_of([user("first question"), text_message("assistant", "first answer")])
    request = ChatRequest(projection=history, pending=(user("second question"),),
                          max_tokens=64)
    await make_model(protocol, fake).complete(request)
    sent = [m for m in fake.requests[-1].messages if m["role"] != "system"]
    texts = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
             for m in sent]
    assert texts == ["first question", "first answer", "second question"]


# --------------------------------------------------------------------------- tools


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tool_call_round_trip(fake, protocol):  # K1
    model = make_model(protocol, fake)
    tools = (ToolSpec("zotero_search", "Search the library",
                      {"type": "object", "properties": {"q": {"type": "string"}}}),)
    question = user("Find papers on tokenisers")
    fake.enqueue(Reply(text="Searching.",
                       tool_calls=(ToolCallSpec("zotero_search", {"q": "tokenizer"}),)))
    first = await model.complete(simple_request([question], tools=tools, max_tokens=128))
    assert first.stop_reason == "tool_use"
    (call,) = first.message.tool_calls
    assert call.name == "zotero_search" and call.input == {"q": "tokenizer"}
    sent_tools = fake.requests[-1].body["tools"]
    assert [t.get("name") or t["function"]["name"] for t in sent_tools] == ["zotero_search"]

    result = Message(role="tool", parts=(ToolResultPart(call_id=call.id, output="3 items"),))
    history = projection_of([question, first.message, result])
    fake.enqueue(Reply(text="Found 3 items."))
    second = await model.complete(ChatRequest(projection=history, tools=tools, max_tokens=128))
    assert second.text == "Found 3 items." and second.stop_reason == "end_turn"
    # The server validated the pairing like the provider does, and so does our oracle.
    sent = fake.requests[-1]
    assert sent.status == 200
    check = openai_problems if protocol == "openai" else anthropic_problems
    assert check(sent.messages) == []
    assert call.id in str(sent.messages)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_orphan_tool_results_never_reach_the_provider(fake, protocol):  # K1
    # A history that starts after the call (e.g. a bad import): the export drops the result.
    orphan = projection_of([user("q"), tool_call("c1"), tool_result("c1"), user("next")])
    stripped = Projection(checkpoint=None, messages=orphan.messages[2:])
    reply = await make_model(protocol, fake).complete(
        ChatRequest(projection=stripped, max_tokens=32))
    assert reply.repairs, "the export reports what it dropped"
    assert fake.requests[-1].status == 200
    assert "c1" not in str(fake.requests[-1].messages)


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_streaming_delivers_deltas_then_reply_with_usage(fake, protocol):  # E1
    text = "Streaming works, piece by piece, until the very end."
    fake.enqueue(Reply(text=text, cached_tokens=4))
    deltas, done = await collect(make_model(protocol, fake), hello())
    assert len(deltas) > 1 and "".join(deltas) == text
    assert done is not None and done.text == text and done.stop_reason == "end_turn"
    sent = fake.requests[-1]
    assert sent.stream
    if protocol == "openai":
        assert sent.body["stream_options"] == {"include_usage": True}
    usage = done.message.usage
    assert usage is not None
    assert usage.cache_read == 4 and usage.prompt == sent.prompt_tokens
    assert usage.output > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_streaming_tool_calls_are_assembled(fake, protocol):  # K1
    args = {"path": "src/app.py", "lines": [1, 2, 3], "note": "ünïcode"}
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("read", args), ToolCallSpec("ls", {}))))
    _, done = await collect(make_model(protocol, fake), hello())
    assert [c.name for c in done.message.tool_calls] == ["read", "ls"]
    assert done.message.tool_calls[0].input == args
    assert done.stop_reason == "tool_use"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_cut_off_reports_partial_reply_as_error(fake, protocol):  # E1
    fake.enqueue(Reply(text="This answer will not be finished at all", cut_stream_after=2))
    deltas: list[str] = []
    with pytest.raises(StreamInterruptedError) as info:
        async for event in make_model(protocol, fake).stream(hello()):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
    partial = info.value.partial
    assert partial.message.status == "error"  # never a usage baseline (E1)
    assert partial.text == "".join(deltas) and deltas
    assert len(fake.requests) == 1, "a stream that delivered text is not retried"


# --------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_overflow_is_normalised_with_numbers_and_not_retried(fake, protocol):  # P4
    fake.configure(context_window=120)
    request = simple_request([text_message("user", "lorem ipsum " * 200)], max_tokens=10)
    with pytest.raises(ContextOverflowError) as info:
        await make_model(protocol, fake).complete(request)
    err = info.value
    sent = fake.requests[-1]
    assert err.status == 400
    assert err.requested_tokens == sent.prompt_tokens > 120
    assert err.limit_tokens == 120
    assert err.excess_tokens == sent.prompt_tokens - 120
    assert len(fake.requests) == 1, "an overflow is surfaced, never retried"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_overflow_from_max_tokens_counts_prompt_plus_completion(fake, protocol):  # P4
    fake.configure(context_window=500)
    with pytest.raises(ContextOverflowError) as info:
        await make_model(protocol, fake).complete(hello(max_tokens=490))
    err = info.value
    prompt = fake.requests[-1].prompt_tokens
    assert err.prompt_tokens == prompt
    assert err.completion_tokens == 490
    assert err.requested_tokens == prompt + 490 and err.limit_tokens == 500


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_streaming_overflow_is_raised_before_any_event(fake, protocol):  # P4
    fake.configure(context_window=50)
    events = []
    with pytest.raises(ContextOverflowError):
        async for event in make_model(protocol, fake).stream(
                simple_request([text_message("user", "word " * 100)], max_tokens=5)):
            events.append(event)
    assert events == []


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_rate_limit_then_success_is_retried_with_server_hint(fake, protocol):  # P4
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    fake.enqueue(Reply(status=429, retry_after=1.5), Reply(text="finally"))
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=30, jitter=0)
    reply = await make_model(protocol, fake, sleep=sleep, retry=policy).complete(hello())
    assert reply.text == "finally"
    assert [r.status for r in fake.requests] == [429, 200]
    assert waits == [1.5], "Retry-After is honoured"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_persistent_server_error_gives_up_after_max_attempts(fake, protocol):  # P4
    fake.enqueue(*[Reply(status=500)] * 6)
    policy = RetryPolicy(max_attempts=4, base_delay=0.001, jitter=0)
    with pytest.raises(ProviderUnavailableError) as info:
        await make_model(protocol, fake, retry=policy).complete(hello())
    assert info.value.attempts == 4
    assert [r.status for r in fake.requests] == [500] * 4
    assert fake.pending_replies == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_rate_limit_exhausted_raises_rate_limit_error(fake, protocol):  # P4
    fake.enqueue(*[Reply(status=429)] * 3)
    with pytest.raises(RateLimitError) as info:
        await make_model(protocol, fake, retry=RetryPolicy(max_attempts=2, base_delay=0,
                                                           jitter=0)).complete(hello())
    assert info.value.attempts == 2 and len(fake.requests) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_timeout_is_retried_then_raised(fake, protocol):  # P4
    fake.enqueue(Reply(hang=True), Reply(hang=True))
    model = make_model(protocol, fake, timeout=0.3,
                       retry=RetryPolicy(max_attempts=2, base_delay=0, jitter=0))
    with pytest.raises(ProviderTimeoutError) as info:
        await model.complete(hello())
    assert info.value.attempts == 2 and len(fake.requests) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_slow_answer_within_timeout_succeeds(fake, protocol):  # P4
    fake.enqueue(Reply(text="late but fine", delay=0.2))
    reply = await make_model(protocol, fake, timeout=5).complete(hello())
    assert reply.text == "late but fine" and len(fake.requests) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_failing_before_first_delta_is_retried(fake, protocol):  # P4
    fake.enqueue(Reply(status=503), Reply(text="second try"))
    deltas, done = await collect(make_model(protocol, fake), hello())
    assert "".join(deltas) == "second try" == done.text
    assert [r.status for r in fake.requests] == [503, 200]


# --------------------------------------------------------------------------- bad answers


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True])
async def test_malformed_answer_is_a_malformed_response_error(fake, protocol, stream):  # E1
    fake.enqueue(Reply(malformed=True), Reply(text="never used"))
    model = make_model(protocol, fake)
    with pytest.raises(MalformedResponseError):
        if stream:
            await collect(model, hello())
        else:
            await model.complete(hello())
    assert len(fake.requests) == 1, "a malformed answer is not retried blindly"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_empty_answer_is_an_empty_complete_message(fake, protocol):  # E1
    fake.enqueue(Reply(empty=True))
    reply = await make_model(protocol, fake).complete(hello())
    assert reply.message.parts == () and reply.text == ""
    assert reply.stop_reason == "end_turn"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_answer_cut_at_max_tokens_says_so(fake, protocol):  # B3
    fake.enqueue(Reply(text="word " * 200))
    reply = await make_model(protocol, fake).complete(hello(max_tokens=20))
    assert reply.stop_reason == "max_tokens"
    assert reply.message.usage is not None and reply.message.usage.output <= 20


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_auth_error_names_the_variable_and_is_not_retried(fake, protocol):  # P4
    fake.configure(api_key="the-right-key")
    secret = "sk-wrong-key-0123456789"
    with pytest.raises(ProviderAuthError) as info:
        await make_model(protocol, fake, api_key=secret).complete(hello())
    err = info.value
    var = "OPENAI_API_KEY" if protocol == "openai" else "ANTHROPIC_API_KEY"
    assert err.env_var == var and var in str(err) and err.status == 401
    assert secret not in str(err) and secret not in repr(err)
    assert secret[-4:] + "." not in str(err), "not even the masked form the provider quotes"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_request_without_messages_is_refused_before_sending(fake, protocol):  # P1
    with pytest.raises(ValueError, match="no messages"):
        await make_model(protocol, fake).complete(ChatRequest(max_tokens=10))
    assert fake.requests == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_adapters_satisfy_the_chat_model_protocol(fake, protocol):  # P1
    model = make_model(protocol, fake)
    assert isinstance(model, ChatModel)
    assert model.model in repr(model)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stopping_a_stream_early_leaves_the_model_usable(fake, protocol):  # U3
    fake.enqueue(Reply(text="a long answer that the caller abandons " * 5))
    model = make_model(protocol, fake)
    stream = model.stream(hello())
    async for event in stream:
        assert isinstance(event, TextDelta)
        break
    await stream.aclose()
    reply = await model.complete(hello())
    assert reply.text == "ok" and len(fake.requests) == 2
