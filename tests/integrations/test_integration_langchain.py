"""`ContextfoldMiddleware` inside real `create_agent` agents, on LangChain's own fake models.

Every request a model receives is judged by the project's validity oracles (OpenAI and
Anthropic rules) and sized against the model's window; the durable store must hold every
message of the agent's state, in order. Long tool-using sessions run on 8k-32k windows,
sync (`invoke`) and async (`ainvoke`), with a LangGraph checkpointer and thread ids.
"""

from __future__ import annotations

import asyncio

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.memory import InMemorySaver

from contextfold.core.values.messages import Message
from contextfold.core.view.projection import CLIP_NOTE
from contextfold.integrations.langchain import ContextfoldMiddleware
from contextfold.integrations.langchain_messages import to_message
from contextfold.store import open_store
from tests.langchain_fakes import make_tools, problems, scripted_model, tool_session

pytest_plugins = ["tests.store_fixtures"]  # backend / db_url: SQLite and PostgreSQL

SYSTEM = "You are a coding agent. Read files before changing them."


async def stored_messages(db: str, session_id: str) -> list[Message]:
    """The session's durable branch, messages only (checkpoints left out)."""
    async with await open_store(db) as store:
        branch = await store.load_full_branch(session_id)
        return [n.message for n in branch.nodes if n.message is not None]


def run_session(db: str, window: int, turns: int, *, thread: str = "t1"):
    prompts, replies = tool_session(turns)
    model = scripted_model(replies, window)
    middleware = ContextfoldMiddleware(db)
    agent = create_agent(model, tools=make_tools(window // 6), middleware=[middleware],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    config = {"configurable": {"thread_id": thread}}
    state = None
    for prompt in prompts:
        state = agent.invoke({"messages": [HumanMessage(prompt)]}, config)
    return model, middleware, agent, state


def assert_every_request_fits_and_is_valid(model, window: int) -> None:
    for i, request in enumerate(model.received):
        assert problems(request, model.systems[i]) == [], (i, problems(request))
        assert count_tokens_approximately(request) <= window, i


@pytest.mark.parametrize("window", [8192, 32768])
def test_long_tool_session_sync_zero_invalid_nothing_dropped(window, db_url):
    """P1-P3, A1, E1: 30 tool-using turns (parallel calls included) through `invoke` on a small
    window: every request valid and inside the window, compactions happened, and the store
    holds every message of the agent's state, in order, with the reply usage recorded."""
    db = db_url
    model, middleware, _agent, state = run_session(db, window, 30)
    assert_every_request_fits_and_is_valid(model, window)
    # The model was shown less than the state holds: the projection, not the whole list.
    assert len(model.received[-1]) < len(state["messages"]) / 2
    assert model.received[-1][0].id.startswith("contextfold-checkpoint-")
    session_id = middleware.session_id_for("t1")
    stored = asyncio.run(stored_messages(db, session_id))
    expected = [to_message(m) for m in state["messages"]]
    assert [m.parts for m in stored] == [m.parts for m in expected]
    replies = [m for m in stored if m.role == "assistant"]
    assert replies and all(m.usage is not None and m.usage.input > 0 for m in replies)
    middleware.close()


def test_tail_is_the_agents_own_messages(db_url):
    """K6: the tail is the agent's own messages (ids, tool-call ids, metadata kept); only a
    tool result the projection clipped differs, in its content, which says so."""
    model, middleware, _agent, state = run_session(db_url, 8192, 12)
    by_id = {m.id: m for m in state["messages"] if m.id}
    clipped = 0
    for request in model.received:
        for m in request:
            if (m.id or "").startswith("contextfold-checkpoint-"):
                continue
            original = by_id[m.id].model_dump()
            shown = m.model_dump()
            if original["content"] != shown["content"]:
                assert m.type == "tool" and CLIP_NOTE in m.text
                clipped += 1
                original.pop("content"), shown.pop("content")
            assert original == shown
    assert clipped  # the workload has results too big for an 8k tail: K6 clipped them
    middleware.close()


async def test_long_tool_session_async_with_thread_resume(db_url):
    """The async path (`ainvoke`), then the same LangGraph thread resumed by a new agent and a
    new middleware over the same store: the stored prefix continues (no message stored
    twice, one session) and requests stay valid (P1-P3)."""
    db = db_url
    window = 16384
    prompts, replies = tool_session(24)
    model = scripted_model(replies, window)
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "resumed"}}
    first = ContextfoldMiddleware(db)
    agent = create_agent(model, tools=make_tools(window // 6), middleware=[first],
                         checkpointer=saver, system_prompt=SYSTEM)
    for prompt in prompts[:12]:
        await agent.ainvoke({"messages": [HumanMessage(prompt)]}, config)
    session_id = first.session_id_for("resumed")
    await first.aclose()

    second = ContextfoldMiddleware(db)
    agent = create_agent(model, tools=make_tools(window // 6), middleware=[second],
                         checkpointer=saver, system_prompt=SYSTEM)
    for prompt in prompts[12:]:
        state = await agent.ainvoke({"messages": [HumanMessage(prompt)]}, config)
    assert second.session_id_for("resumed") == session_id
    await second.aclose()
    assert_every_request_fits_and_is_valid(model, window)
    stored = await stored_messages(db, session_id)
    assert [m.parts for m in stored] == [to_message(m).parts for m in state["messages"]]


def test_threads_get_their_own_sessions(db_url):
    """One contextfold session per LangGraph thread, even when both start alike."""
    db = db_url
    prompts, replies = tool_session(4)
    model = scripted_model(replies, 8192)
    middleware = ContextfoldMiddleware(db)
    agent = create_agent(model, tools=make_tools(), middleware=[middleware],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    for thread, prompt in (("a", prompts[0]), ("b", prompts[0])):
        agent.invoke({"messages": [HumanMessage(prompt)]}, {"configurable": {"thread_id": thread}})
    assert middleware.session_id_for("a") != middleware.session_id_for("b")
    middleware.close()
