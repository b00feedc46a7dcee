"""The middleware's application surface: recall tools, manual compaction with instructions,
usage, and the LangChain <-> contextfold message conversion."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from contextfold.core.values.messages import ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from contextfold.integrations.langchain import ContextfoldMiddleware
from contextfold.integrations.langchain_messages import settle, to_message, usage_of
from contextfold.store import open_store
from tests.langchain_fakes import make_tools, problems, scripted_model, tool_session

SYSTEM = "You are a coding agent."


def call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": name, "args": args,
                                      "type": "tool_call"}])


def test_recall_tools_find_compacted_identifiers(tmp_path):
    """L2: `history_search` and `history_expand` are LangChain tools the agent runs; after
    compaction, a ticket from the first turns is found and read back verbatim."""
    prompts, session = tool_session(16)
    holder: list = []

    def recall_script() -> Iterator[AIMessage]:
        yield call("history_search", {"query": "TKT-0002"}, "recall-1")
        found = json.loads(holder[0].received[-1][-1].text)
        node_id = found["matches"][0]["node_id"]
        yield call("history_expand", {"node_id": node_id}, "recall-2")
        yield AIMessage("Found it.")

    model = scripted_model(itertools.chain(session, recall_script()), 8192)
    holder.append(model)
    middleware = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    assert {t.name for t in middleware.tools} == {"history_search", "history_expand"}
    agent = create_agent(model, tools=make_tools(), middleware=[middleware],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    config = {"configurable": {"thread_id": "recall"}}
    for prompt in prompts:
        agent.invoke({"messages": [HumanMessage(prompt)]}, config)
    # S8: the user's words are carried by the checkpoint; the identifiers of what the tools
    # returned are what recall brings back.
    state = agent.invoke({"messages": [HumanMessage("What was TKT-0002 about?")]}, config)
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)
               and m.tool_call_id.startswith("recall-")]
    search = json.loads(results[0].text)
    assert search["match"] == "all terms" and search["matches"]
    expanded = json.loads(results[1].text)
    assert "TKT-0002" in expanded["messages"][0]["text"]
    for i, request in enumerate(model.received):
        assert problems(request, model.systems[i]) == []
    middleware.close()


def test_manual_compaction_with_instructions(tmp_path):
    """M1, M6: `compact(thread_id, instructions=...)` compacts the thread's session now; the
    next request starts from the new checkpoint, whose summary records the instructions."""
    prompts, replies = tool_session(8)
    model = scripted_model(itertools.chain(replies, iter([AIMessage("ok")])), 32768)
    middleware = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    agent = create_agent(model, tools=make_tools(), middleware=[middleware],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    config = {"configurable": {"thread_id": "m"}}
    for prompt in prompts:
        agent.invoke({"messages": [HumanMessage(prompt)]}, config)
    assert not model.received[-1][0].id.startswith("contextfold-checkpoint-")
    outcome = middleware.compact("m", instructions="Keep every ticket id for release Bluefin.")
    assert outcome.status == "compacted" and outcome.summarized_messages > 0
    agent.invoke({"messages": [HumanMessage("Next.")]}, config)
    head = model.received[-1][0]
    assert head.id == f"contextfold-checkpoint-{outcome.checkpoint_id}"
    assert "release Bluefin" in head.text
    middleware.close()


def test_compact_before_any_call_says_so(tmp_path):
    middleware = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    try:
        middleware.compact("never-seen")
    except LookupError as exc:
        assert "never-seen" in str(exc)
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("compact of an unknown thread must raise LookupError")


async def test_open_store_is_used_on_the_callers_loop(tmp_path):
    """An application's open store: `ainvoke` uses it on the caller's loop; the reply is
    stored with its usage (E1)."""
    store = await open_store(str(tmp_path / "own.db"))
    model = scripted_model(iter([AIMessage("hello")]), 8192)
    middleware = ContextfoldMiddleware(store)
    agent = create_agent(model, tools=make_tools(), middleware=[middleware],
                         system_prompt=SYSTEM)
    await agent.ainvoke({"messages": [HumanMessage("hi")]})
    session_id = middleware.session_id_for(None)
    branch = await store.load_full_branch(session_id)
    reply = branch.nodes[-1].message
    assert reply.text == "hello" and reply.usage is not None and reply.usage.input > 0
    await store.close()


def test_open_store_refuses_sync_use(tmp_path):
    async def opened():
        return await open_store(str(tmp_path / "own.db"))

    store = asyncio.run(opened())
    model = scripted_model(iter([AIMessage("hello")]), 8192)
    agent = create_agent(model, middleware=[ContextfoldMiddleware(store)], system_prompt=SYSTEM)
    try:
        agent.invoke({"messages": [HumanMessage("hi")]})
    except RuntimeError as exc:
        assert "ainvoke" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a sync call with an open store must say to use ainvoke")


# --------------------------------------------------------------------------- conversion


def test_ai_message_with_parallel_calls_and_cached_usage():
    """E1: LangChain's `input_tokens` includes cache reads and writes; the core's does not."""
    ai = AIMessage(
        content=[{"type": "thinking", "thinking": "plan", "signature": "sig"},
                 {"type": "text", "text": "Reading both."}],
        tool_calls=[{"id": "c1", "name": "read_file", "args": {"path": "a.py"}},
                    {"id": "c2", "name": "read_file", "args": {"path": "b.py"}}],
        usage_metadata={"input_tokens": 1000, "output_tokens": 50, "total_tokens": 1050,
                        "input_token_details": {"cache_read": 600, "cache_creation": 100}},
        response_metadata={"model_name": "claude-sonnet-4-5"})
    msg = to_message(ai)
    assert msg.role == "assistant" and msg.model == "claude-sonnet-4-5"
    assert msg.parts == (ReasoningPart(text="plan", signature="sig"),
                         TextPart(text="Reading both."),
                         ToolCallPart(id="c1", name="read_file", input={"path": "a.py"}),
                         ToolCallPart(id="c2", name="read_file", input={"path": "b.py"}))
    usage = usage_of(ai)
    assert (usage.input, usage.cache_read, usage.cache_write, usage.output) == (300, 600, 100, 50)
    assert usage.occupied == 1050


def test_tool_message_keeps_its_call_id_and_error_status():
    msg = to_message(ToolMessage("boom", tool_call_id="c9", name="bash", status="error"))
    assert msg.role == "tool"
    assert msg.parts == (ToolResultPart(call_id="c9", name="bash", output="boom",
                                        is_error=True),)
    assert to_message(SystemMessage("be brief")).role == "system"


def test_settle_pairs_calls_and_results():
    """Orphaned results and unanswered calls are left out, each repair reported; the first
    message is a user message; a valid list passes unchanged."""
    ok = [HumanMessage("go"), call("grep", {"pattern": "x"}, "c1"),
          ToolMessage("found", tool_call_id="c1"), AIMessage("done")]
    assert settle(ok) == (ok, [])
    broken = [ToolMessage("stray", tool_call_id="gone"), AIMessage("hm"),
              call("grep", {"pattern": "x"}, "c2"), HumanMessage("stop"), AIMessage("")]
    fixed, repairs = settle(broken)
    assert problems(fixed) == []
    assert repairs == ["dropped tool result gone without its call",
                       "dropped tool call c2 without a result", "dropped an empty AI message",
                       "added a user message at the start"]


def test_conversion_is_reused_per_object_and_redone_after_an_edit():
    """The whole list comes every call: a message object converted once is reused, unless it
    was changed in place (then it is converted again, so the mirror never stores stale
    content)."""
    from contextfold.integrations.langchain_messages import Converted

    convert = Converted()
    human, ai = HumanMessage("first"), call("grep", {"pattern": "x"}, "c1")
    one = convert([human, ai])
    two = convert([human, ai, ToolMessage("found", tool_call_id="c1")])
    assert one[0] is two[0] and one[1] is two[1]
    human.content = "first, edited"
    three = convert([human, ai])
    assert three[0] is not one[0] and three[0].text == "first, edited"
    assert three[1] is one[1]
