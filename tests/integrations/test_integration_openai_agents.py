"""`ContextfoldSession` with the OpenAI Agents SDK's own runner and an offline `Model`.

Long tool-using sessions on 8k-32k windows: every request the model received is judged by
the validity oracles and counted with a real tokenizer against the window (`Ledger`); the
durable store keeps everything; the SDK's built-in session fails the same workload.
"""

from __future__ import annotations

import json

import pytest
from agents import Agent, Runner, SQLiteSession

from contextfold.integrations.openai_agents import ContextfoldSession
from contextfold.runtime.errors import RequestTooLargeError
from tests.framework_workload import (
    AT_8K_MISSES,
    INSTRUCTIONS,
    WINDOWS_AND_TURNS,
    Ledger,
    cap,
    checksum,
    prompt,
    record_id,
    stored_messages,
)
from tests.oa_fakes import WindowModel, lookup_record

pytest_plugins = ["tests.store_fixtures"]  # backend / db_url / store: SQLite and PostgreSQL


async def open_session(store, window: int, **options) -> ContextfoldSession:
    return await ContextfoldSession.open(store, capacity=cap(window), background=False,
                                         **options)


def agent_for(model: WindowModel, session: ContextfoldSession | None = None, **kw) -> Agent:
    tools = [lookup_record, *(session.recall_tools() if session else [])]
    return Agent(name="researcher", instructions=INSTRUCTIONS, model=model, tools=tools, **kw)


@pytest.mark.parametrize(("window", "turns"), WINDOWS_AND_TURNS)
async def test_long_tool_session_fits_every_window_and_loses_nothing(store, window, turns):
    """P1-P3, A1, K1, E1: zero invalid requests on 8k-32k windows; every message stored;
    every checksum the tools returned reported (identifiers kept)."""
    ledger = Ledger()
    session = await open_session(store, window)
    agent = agent_for(WindowModel("m", window, ledger), session)
    for t in range(turns):
        await Runner.run(agent, prompt(t), session=session, run_config=session.run_config())
    assert ledger.invalid == [] and ledger.overflows == []
    assert ledger.unknown_answers() == 0
    assert any(c.status == "compacted" for c in session.compactions)
    messages = await stored_messages(store, session.session_id)
    users = [m for m in messages if m.role == "user"]
    results = [r for m in messages for r in m.tool_results]
    assert len(users) == turns  # nothing dropped, nothing stored twice
    assert len(results) == sum(2 if t % 3 == 2 else 1 for t in range(turns))
    assert all(checksum(r.output.split()[1].rstrip(".")) in r.output for r in results)
    # the usage the SDK measured is on the replies (E1), per request, never the run total
    usages = [m.usage for m in messages if m.role == "assistant" and m.usage is not None]
    assert len(usages) == len([m for m in messages if m.role == "assistant"])
    assert max(u.input for u in usages) <= window


async def test_builtin_sqlite_session_overflows_the_same_workload(store):
    """Evidence: the SDK's own session sends the whole history; on 8k it overflows."""
    ledger = Ledger()
    agent = agent_for(WindowModel("m", 8192, ledger))
    session = SQLiteSession("builtin")
    for t in range(30):
        await Runner.run(agent, prompt(t), session=session)
    assert len(ledger.overflows) > 20
    assert ledger.max_tokens > 2 * 8192


@AT_8K_MISSES
async def test_streamed_run_is_sized_and_stored(store):
    """Runner.run_streamed: the same fitting, text streamed, the run stored."""
    ledger = Ledger()
    session = await open_session(store, 8192)
    agent = agent_for(WindowModel("m", 8192, ledger), session)
    streamed_text = []
    for t in range(20):
        result = Runner.run_streamed(agent, prompt(t), session=session,
                                     run_config=session.run_config())
        async for event in result.stream_events():
            if event.type == "raw_response_event" and \
                    getattr(event.data, "type", "") == "response.output_text.delta":
                streamed_text.append(event.data.delta)
    assert ledger.invalid_requests == 0 and ledger.unknown_answers() == 0
    assert "Checksums:" in "".join(streamed_text)
    messages = await stored_messages(store, session.session_id)
    assert len([m for m in messages if m.role == "user"]) == 20
    assert [m.text for m in messages if m.role == "assistant" and m.text][-1] == \
        ledger.answers[-1]


async def test_handoff_to_a_smaller_model_mid_run_compacts_before_its_call(store):
    """P2: a handoff to an 8k model inside a run: its first request already fits 8k."""
    ledger = Ledger()
    session = await open_session(store, 32768, capacities={"small-8k": cap(8192)})
    small = Agent(name="small", instructions=INSTRUCTIONS, model=WindowModel(
        "small-8k", 8192, ledger), tools=[lookup_record])
    big_model = WindowModel("big-32k", 32768, ledger)
    big = agent_for(big_model, session, handoffs=[small])
    for t in range(14):
        await Runner.run(big, prompt(t), session=session, run_config=session.run_config())
    assert ledger.max_tokens > 8192  # the history outgrew the small window
    big_model.handoff_to, big_model.handoff_after = "small", big_model.seen + 1
    before = len(session.compactions)
    result = await Runner.run(big, prompt(14), session=session, run_config=session.run_config())
    assert result.last_agent is small
    assert ledger.invalid == []
    assert ledger.overflows == []  # the small model never got more than its window
    assert any(c.status == "compacted" for c in session.compactions[before:])
    assert ledger.answers[-1] == (f"Checksums: {record_id(14)}={checksum(record_id(14))}, "
                                  f"{record_id(14, True)}={checksum(record_id(14, True))}.")


async def test_pop_item_moves_the_branch_back_and_keeps_the_old_reply(store):
    """O1: pop_item is retry's leaf move: the branch loses the item, the tree keeps it."""
    ledger = Ledger()
    session = await open_session(store, 16384)
    agent = agent_for(WindowModel("m", 16384, ledger), session)
    await Runner.run(agent, prompt(0), session=session, run_config=session.run_config())
    items = await session.get_items()
    popped = await session.pop_item()
    assert popped == items[-1] and popped["content"].startswith("Checksums:")
    assert await session.get_items() == items[:-1]
    # a reply with text and calls loses only its last call; its output goes first
    assert (await session.pop_item())["type"] == "function_call_output"
    call = await session.pop_item()
    assert call["type"] == "function_call"
    assert await session.get_items() == [items[0]]
    tree = await store.load_tree(session.session_id)
    assert any(n.message and n.message.text.startswith("Checksums:") for n in tree)
    await session.clear_session()
    assert await session.get_items() == []
    assert len(await store.load_tree(session.session_id)) == len(tree)  # nothing deleted


async def test_orphaned_tool_result_in_the_input_is_stored_but_never_sent(store):
    """A history with an output whose call was trimmed away (the reported orphan case):
    contextfold stores it and never sends it; the built-in session sends it."""
    orphan = [{"type": "function_call_output", "call_id": "call_gone", "output": "R-9999 ok"},
              {"role": "user", "content": prompt(0)}]
    ledger = Ledger()
    session = await open_session(store, 8192)
    agent = agent_for(WindowModel("m", 8192, ledger), session)
    await Runner.run(agent, orphan, session=session, run_config=session.run_config())
    assert ledger.invalid == []
    messages = await stored_messages(store, session.session_id)
    assert any(r.call_id == "call_gone" for m in messages for r in m.tool_results)

    builtin = Ledger()
    await Runner.run(agent_for(WindowModel("m", 8192, builtin)), orphan,
                     session=SQLiteSession("orphan"))
    assert any("call_gone" in p for p in builtin.invalid)


async def test_recall_tools_find_compacted_records(store):
    """L2: history_search over the durable branch finds a record compacted long ago."""
    ledger = Ledger()
    session = await open_session(store, 8192)
    agent = agent_for(WindowModel("m", 8192, ledger), session)
    for t in range(12):
        await Runner.run(agent, prompt(t), session=session, run_config=session.run_config())
    projected = json.dumps(await session.get_items())
    assert checksum(record_id(0)) not in projected  # compacted out of the projection
    search = next(t for t in session.recall_tools() if t.name == "history_search")
    found = json.loads(await search.on_invoke_tool(None, json.dumps({"query": record_id(0)})))
    node = found["matches"][0]["node_id"]
    expand = next(t for t in session.recall_tools() if t.name == "history_expand")
    text = await expand.on_invoke_tool(None, json.dumps({"node_id": node, "after": 3}))
    assert checksum(record_id(0)) in text


async def test_input_that_cannot_fit_is_refused_before_the_model(store):
    """P3: nothing is sent when even a compacted request cannot fit."""
    ledger = Ledger()
    session = await open_session(store, 8192)
    agent = agent_for(WindowModel("m", 8192, ledger), session)
    with pytest.raises(RequestTooLargeError):
        await Runner.run(agent, "x " * 20000, session=session, run_config=session.run_config())
    assert ledger.requests == 0


async def test_manual_compaction_and_projection_items(store):
    """M1: compact() with instructions; get_items then starts with the checkpoint."""
    ledger = Ledger()
    session = await open_session(store, 32768)
    agent = agent_for(WindowModel("m", 32768, ledger), session)
    for t in range(3):
        await Runner.run(agent, prompt(t), session=session, run_config=session.run_config())
    outcome = await session.compact("keep every checksum")
    assert outcome.status == "compacted"
    items = await session.get_items()
    assert items[0]["role"] == "user" and "[contextfold checkpoint]" in items[0]["content"]
    assert items[1]["content"] == prompt(2)  # the latest turn stays verbatim
