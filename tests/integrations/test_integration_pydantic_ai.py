"""`history_processor` with pydantic-ai's own agent loop and its offline `FunctionModel`.

Every request the model received is judged by the validity oracles and counted with a real
tokenizer against its window (`Ledger`); the durable store keeps every message once; the
usual built-in handling (no processor, or the documented "keep the last N messages"
processor) fails the same workloads.
"""

from __future__ import annotations

import json

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from contextfold.core.render.export import CONTINUATION_PLACEHOLDER
from contextfold.integrations.pydantic_ai import history_processor, load_message_history, paired
from tests.framework_workload import (
    INSTRUCTIONS,
    WINDOWS_AND_TURNS,
    Ledger,
    cap,
    checksum,
    prompt,
    record_id,
    stored_messages,
)
from tests.pai_fakes import lookup_record, to_chat, window_model

pytest_plugins = ["tests.store_fixtures"]  # backend / db_url / store: SQLite and PostgreSQL


def agent_for(model, processor=None, tools=()) -> Agent:
    return Agent(model, instructions=INSTRUCTIONS, tools=[lookup_record, *tools],
                 capabilities=[processor.capability() if hasattr(processor, "capability")
                               else ProcessHistory(processor)] if processor else [])


async def run_session(agent, turns: int, history=None):
    history = history or []
    for t in range(turns):
        result = await agent.run(prompt(t), message_history=history)
        history = result.all_messages()
    return history


@pytest.mark.parametrize(("window", "turns"), WINDOWS_AND_TURNS)
async def test_long_tool_session_fits_and_stores_everything_once(store, window, turns):
    """Y1, P1-P3, K1, E1: zero invalid requests on 8k-32k; every message stored once; every
    checksum reported; usage on the replies."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(window))
    agent = agent_for(window_model("m", window, ledger), history, history.recall_tools())
    await run_session(agent, turns)
    assert ledger.invalid == [] and ledger.overflows == []
    assert ledger.unknown_answers() == 0
    messages = await stored_messages(store, history.session_id)
    assert len([m for m in messages if m.role == "user"]) == turns
    results = [r.call_id for m in messages for r in m.tool_results]
    assert len(results) == len(set(results)) == sum(2 if t % 3 == 2 else 1
                                                      for t in range(turns))
    answers = [m for m in messages if m.role == "assistant" and m.text.startswith("Checksums")]
    assert len(answers) == turns and all(m.usage is not None for m in answers)
    tree = await store.load_tree(history.session_id)
    assert any(n.checkpoint is not None for n in tree)
    assert all(n.parent_id is not None for n in tree[1:])


async def test_without_contextfold_the_same_workload_fails(store):
    """Evidence: no processor overflows the 8k window; the documented "keep the last
    messages" processor orphans tool returns (requests a provider refuses)."""
    plain = Ledger()
    await run_session(agent_for(window_model("m", 8192, plain)), 30)
    assert len(plain.overflows) > 20

    def keep_recent(messages):
        return messages[-5:]

    trimmed = Ledger()
    await run_session(agent_for(window_model("m", 8192, trimmed), keep_recent), 30)
    assert trimmed.invalid  # orphaned tool results, tool calls without results


async def test_orphaned_tool_return_in_the_given_history_is_never_sent(store):
    """A message_history trimmed elsewhere starts with a tool return whose call is gone: the
    request stays valid (pydantic-ai drops that part itself before the processor runs)."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(8192))
    agent = agent_for(window_model("m", 8192, ledger), history)
    orphan = [ModelRequest(parts=[ToolReturnPart(tool_name="lookup_record", content="old",
                                                 tool_call_id="call_gone")]),
              ModelResponse(parts=[TextPart("noted")])]
    await agent.run(prompt(0), message_history=orphan)
    assert ledger.invalid == []
    assert ledger.answers == [f"Checksums: {record_id(0)}={checksum(record_id(0))}."]


def test_paired_leaves_out_orphans_and_opens_with_the_user():
    """The last guard on what is sent: an orphaned return, an unanswered call, and a
    history that would open with the model's side."""
    messages = [
        ModelRequest(parts=[ToolReturnPart(tool_name="t", content="x", tool_call_id="gone")]),
        ModelResponse(parts=[TextPart("a"), ToolCallPart(tool_name="t", args={},
                                                         tool_call_id="open")]),
        ModelRequest(parts=[UserPromptPart(content="next")]),
    ]
    out = paired(messages)
    chat = to_chat(out, None)
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert "tool_calls" not in chat[1] and chat[0]["content"] == CONTINUATION_PLACEHOLDER


async def test_streamed_runs_are_sized_too(store):
    """run_stream: the processor runs before every request of a streamed run."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(8192))
    agent = agent_for(window_model("m", 8192, ledger), history)
    messages = []
    for t in range(20):
        async with agent.run_stream(prompt(t), message_history=messages) as result:
            text = await result.get_output()
        messages = result.all_messages()
    assert text.startswith("Checksums:") and "unknown" not in text
    assert ledger.invalid_requests == 0


async def test_switch_to_a_smaller_model_mid_session_compacts_first(store):
    """P2: the conversation moves from a 32k model to an 8k one; its first request fits."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(32768),
                                capacities={"small-8k": cap(8192)})
    big = agent_for(window_model("big-32k", 32768, ledger), history)
    messages = await run_session(big, 14)
    assert ledger.max_tokens > 8192
    small = agent_for(window_model("small-8k", 8192, ledger), history)
    before = ledger.requests
    result = await small.run(prompt(14), message_history=messages)
    assert ledger.requests > before and ledger.overflows == [] and ledger.invalid == []
    assert "unknown" not in result.output


async def test_a_new_process_continues_from_the_store_without_duplicates(store):
    """load_message_history + a new processor: the stored prefix is recognised by content,
    nothing is stored twice (Y1)."""
    ledger = Ledger()
    first = history_processor(store, capacity=cap(16384))
    await run_session(agent_for(window_model("m", 16384, ledger), first), 6)
    count = len(await stored_messages(store, first.session_id))
    restored = await load_message_history(store, first.session_id)
    second = history_processor(store, capacity=cap(16384), session_id=first.session_id)
    agent = agent_for(window_model("m", 16384, ledger), second)
    await agent.run(prompt(6), message_history=restored)
    after = await stored_messages(store, first.session_id)
    assert len(after) == count + 4  # the new user message, the call, its result, the answer
    assert ledger.invalid == []


async def test_tool_retry_stays_paired_and_is_stored_as_a_tool_error(store):
    """A tool raising ModelRetry: the retry prompt answers its call (a tool error)."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(8192))
    failed: set[str] = set()

    def lookup_record(record_id: str) -> str:
        """Look up a record by its id (R-0000) and return its full text."""
        if record_id not in failed:
            failed.add(record_id)
            raise ModelRetry("the archive is busy, try again")
        return f"Record {record_id}. checksum: {checksum(record_id)}."

    agent = Agent(window_model("m", 8192, ledger), instructions=INSTRUCTIONS,
                  tools=[lookup_record], capabilities=[history.capability()])
    await agent.run(prompt(0))
    assert ledger.invalid == []
    messages = await stored_messages(store, history.session_id)
    errors = [r for m in messages for r in m.tool_results if r.is_error]
    assert errors and "busy" in errors[0].output


async def test_recall_tools_reach_compacted_records(store):
    """L2: history_search / history_expand as pydantic-ai tools over the stored branch."""
    ledger = Ledger()
    history = history_processor(store, capacity=cap(8192))
    tools = history.recall_tools()
    await run_session(agent_for(window_model("m", 8192, ledger), history, tools), 12)
    assert history.last is not None and history.last.projection.checkpoint is not None
    search = next(t for t in tools if t.name == "history_search")
    found = json.loads(await search.function(query=record_id(0)))
    expand = next(t for t in tools if t.name == "history_expand")
    text = await expand.function(node_id=found["matches"][0]["node_id"], after=3)
    assert checksum(record_id(0)) in text
