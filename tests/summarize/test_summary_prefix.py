"""A summariser that is the session's own model reads the prompt cache (SPEC Q3): its request
starts with exactly the prefix the session sent last (system prompt, tools, history, in the
same bytes), then the reply that followed, then the instruction; every other summariser still
gets the serialised history (R)."""

from __future__ import annotations

import json

import pytest

from contextfold.providers.base import ToolSpec
from contextfold.runtime import Conversation
from contextfold.summarize.llm import LlmSummarizer
from contextfold.summarize.prompts import PREFIX_TASK_MARK
from tests.runtime.test_prompt_cache_marks import unmarked
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    capacity,
    chat_model,
    fill,
    runtime_fixtures,
)

store, close_models, fake = runtime_fixtures()

SYSTEM = "You help with a literature review. Cite Zotero keys verbatim. " * 10
TOOLS = (ToolSpec(name="zotero_search", description="Search the library",
                  input_schema={"type": "object", "properties": {"q": {"type": "string"}}}),)


def canonical(value) -> str:
    return json.dumps(unmarked(value), sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_q3_the_summarising_request_starts_with_the_sessions_prefix(fake, store,
                                                                          protocol):
    model = chat_model(fake, protocol, "fake-200k")
    summarizer = LlmSummarizer(model, capacity(200_000), session_prefix=True)
    conv = await Conversation.open(store, model=model, capacity=capacity(200_000),
                                   system=SYSTEM, tools=TOOLS, summarizer=summarizer)
    await fill(conv, 3, size=40)
    last = [r for r in fake.requests if not r.is_summary][-1].body
    outcome = await conv.compact()
    assert outcome.status == "compacted" and outcome.summarizer == "llm:fake-200k"
    summaries = [r for r in fake.requests if r.is_summary]
    assert len(summaries) == 1
    body = summaries[0].body
    messages = body["messages"]
    if protocol == "anthropic":
        assert canonical(body["system"]) == canonical(last["system"])
    n = len(last["messages"])
    # the prefix the session sent, byte for byte (cache marks aside), then the stored reply,
    # then the instruction
    assert canonical(messages[:n]) == canonical(last["messages"])
    assert canonical(body["tools"]) == canonical(last["tools"])
    assert messages[n]["role"] == "assistant"
    assert PREFIX_TASK_MARK in json.dumps(messages[-1])
    assert len(messages) == n + 2
    checkpoint = conv.branch.leaf.checkpoint
    assert checkpoint is not None and checkpoint.summarizer == "llm:fake-200k"
    await conv.close()


async def test_q3_another_model_gets_the_serialised_history(fake, store):
    model = chat_model(fake, "openai", "fake-200k")
    summarizer = LlmSummarizer(chat_model(fake, "openai", "fake-summary"), capacity(200_000))
    conv = await Conversation.open(store, model=model, capacity=capacity(200_000),
                                   system=SYSTEM, summarizer=summarizer)
    await fill(conv, 3, size=40)
    await conv.compact()
    body = next(r for r in fake.requests if r.is_summary).body
    assert SYSTEM not in json.dumps(body)  # the summariser's own system prompt, not the session's
    assert "<conversation>" in json.dumps(body)
    await conv.close()


def test_q3_the_factory_marks_the_chat_models_own_summariser(monkeypatch):
    from contextfold.core.sizing.resolver import ModelResolver
    from contextfold.summarize.factory import summarizer_for

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    resolver = ModelResolver()
    chat = resolver.resolve("gpt-4o")
    same = summarizer_for("gpt-4o", resolver, chat=chat)
    other = summarizer_for("gpt-4o-mini", resolver, chat=chat)
    assert same is not None and same.session_prefix
    assert other is not None and not other.session_prefix
