"""LangChain's reported context bugs, reproduced on real agents: the built-in
`SummarizationMiddleware` fails them (asserted, as evidence: if LangChain fixes one, this
test says so), `ContextfoldMiddleware` does not.

* #38352: parallel tool calls split over two AI messages at the cut leave an orphaned tool
  result, persisted in the state, so every later request is rejected;
* orphaned tool results after trimming (`trim_messages` without `start_on`);
* a switch to a smaller-window model mid-run (the built-in sizes by its summariser's profile).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately, trim_messages
from langgraph.checkpoint.memory import InMemorySaver

from contextfold.integrations.langchain import ContextfoldMiddleware
from tests.langchain_fakes import make_tools, problems, scripted_model, tool_session

SYSTEM = "You are a coding agent."


def summariser(window: int) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.repeat("summary of the earlier work"),
                                profile={"max_input_tokens": window})


def answers(n: int) -> Iterator[AIMessage]:
    return iter([AIMessage(content=f"answer {i}", id=f"answer-{i}") for i in range(n)])


def split_parallel_history(padding: int) -> list[BaseMessage]:
    """`padding` earlier turns, then parallel calls a model sent as two AI messages (one call
    each) answered by one run of results: the shape of LangChain #38352."""
    history: list[BaseMessage] = []
    for t in range(padding):
        history += [HumanMessage(f"Earlier question {t} about TKT-{t:04d}. " + "context " * 150,
                                 id=f"h{t}"),
                    AIMessage(f"Earlier answer {t}. " + "detail " * 150, id=f"a{t}")]
    history += [
        HumanMessage("Read both configuration files.", id="h-split"),
        AIMessage("", tool_calls=[{"id": "call_a", "name": "read_file",
                                   "args": {"path": "conf/a.toml"}, "type": "tool_call"}],
                  id="ai-a"),
        AIMessage("", tool_calls=[{"id": "call_b", "name": "read_file",
                                   "args": {"path": "conf/b.toml"}, "type": "tool_call"}],
                  id="ai-b"),
        ToolMessage("a = 1  # from conf/a.toml", tool_call_id="call_a", name="read_file",
                    id="t-a"),
        ToolMessage("b = 2  # from conf/b.toml", tool_call_id="call_b", name="read_file",
                    id="t-b"),
        AIMessage("Both files read: a = 1, b = 2.", id="ai-both"),
    ]
    return history


def test_38352_split_parallel_calls_at_the_cut(tmp_path):
    """LangChain #38352 (K1, P1): the built-in cuts at the AI message of call b and keeps the
    result of call a, whose call it summarised away; the orphan is persisted in the state,
    so the next turn's request is invalid too. The same history through contextfold: every request
    valid, both results sent with their calls, and the same broken thread is healed."""
    history = split_parallel_history(padding=6)
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "38352"}}
    builtin_model = scripted_model(answers(3), 8192)
    builtin = SummarizationMiddleware(model=summariser(8192), trigger=("messages", 10),
                                      keep=("messages", 4))
    agent = create_agent(builtin_model, tools=make_tools(), middleware=[builtin],
                         checkpointer=saver, system_prompt=SYSTEM)
    for turn in range(2):
        new = [*history, HumanMessage("Now compare them.")] if turn == 0 else \
            [HumanMessage(f"Follow-up {turn}.")]
        agent.invoke({"messages": new}, config)
    invalid = [problems(r, builtin_model.systems[i]) for i, r in enumerate(builtin_model.received)]
    # Evidence: the request right after the bad cut is rejected for the orphaned result of
    # call_a, and so is the next turn's: the cut was written to the state.
    assert any("call_a" in p for p in invalid[0]), invalid
    assert any("call_a" in p for p in invalid[1]), invalid

    # contextfold on the same history, on a window small enough to compact right there.
    ours_model = scripted_model(answers(3), 4096)
    ours = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    agent = create_agent(ours_model, tools=make_tools(), middleware=[ours],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    for turn in range(3):
        new = [*history, HumanMessage("Now compare them.")] if turn == 0 else \
            [HumanMessage(f"Follow-up {turn}.")]
        agent.invoke({"messages": new}, {"configurable": {"thread_id": "fresh"}})
    for i, request in enumerate(ours_model.received):
        assert problems(request, ours_model.systems[i]) == []
        assert count_tokens_approximately(request) <= 4096
    first = ours_model.received[0]
    assert first[0].id.startswith("contextfold-checkpoint-")  # it did compact
    sent = {m.tool_call_id for m in first if isinstance(m, ToolMessage)}
    assert sent == {"call_a", "call_b"}  # both results, each with its call
    callers = [m for m in first if isinstance(m, AIMessage) and m.tool_calls]
    assert [c["id"] for c in callers[-1].tool_calls] == ["call_a", "call_b"]  # merged

    # The thread the built-in broke, continued with contextfold: valid again, and the
    # repair is reported, not hidden.
    healed_model = scripted_model(answers(1), 8192)
    healer = ContextfoldMiddleware(str(tmp_path / "healed.db"))
    agent = create_agent(healed_model, tools=make_tools(), middleware=[healer],
                         checkpointer=saver, system_prompt=SYSTEM)
    agent.invoke({"messages": [HumanMessage("Go on.")]}, config)
    assert problems(healed_model.received[0], healed_model.systems[0]) == []
    assert "dropped tool result call_a without its call" in healer.last_repairs
    ours.close()
    healer.close()


def test_orphaned_tool_results_after_trimming(tmp_path):
    """A state trimmed by `trim_messages(strategy="last")` without `start_on` starts with
    tool results whose calls were cut: sent as they are (no middleware, or the built-in
    summariser below its trigger) the request is rejected; through contextfold the orphans
    are left out of the request (reported) and kept in the durable store."""
    prompts, replies = tool_session(12)
    full_model = scripted_model(replies, 32768)
    agent = create_agent(full_model, tools=make_tools(), checkpointer=InMemorySaver(),
                         system_prompt=SYSTEM)
    state = None
    for prompt in prompts:
        state = agent.invoke({"messages": [HumanMessage(prompt)]},
                             {"configurable": {"thread_id": "long"}})
    assert state is not None
    trimmed: list[BaseMessage] = []
    for budget in range(600, 6000, 97):  # find a cut that lands inside a tool run
        trimmed = trim_messages(state["messages"], max_tokens=budget, strategy="last",
                                token_counter=count_tokens_approximately)
        if trimmed and isinstance(trimmed[0], ToolMessage):
            break
    assert isinstance(trimmed[0], ToolMessage)
    orphan = trimmed[0].tool_call_id
    new = [*trimmed, HumanMessage("Continue.")]

    builtin_model = scripted_model(answers(1), 32768)
    builtin = SummarizationMiddleware(model=summariser(32768), trigger=("fraction", 0.8))
    create_agent(builtin_model, tools=make_tools(), middleware=[builtin],
                 system_prompt=SYSTEM).invoke({"messages": new})
    assert any("does not follow its call" in p for p in problems(builtin_model.received[0]))

    ours_model = scripted_model(answers(1), 32768)
    ours = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    create_agent(ours_model, tools=make_tools(), middleware=[ours],
                 system_prompt=SYSTEM).invoke({"messages": new})
    assert problems(ours_model.received[0], ours_model.systems[0]) == []
    assert f"dropped tool result {orphan} without its call" in ours.last_repairs
    ours.close()


class SwitchModelAfter(AgentMiddleware):
    """Sends every model call after the first `calls` to `model` (as a router would)."""

    def __init__(self, calls: int, model: GenericFakeChatModel) -> None:
        super().__init__()
        self.calls, self.model, self.seen = calls, model, 0

    def wrap_model_call(self, request, handler):
        self.seen += 1
        return handler(request.override(model=self.model) if self.seen > self.calls
                       else request)


def switch_run(middleware: AgentMiddleware, turns: int = 24):
    prompts, replies = tool_session(turns)
    big = scripted_model(replies, 32768, name="fake-32k")
    small = scripted_model(replies, 8192, name="fake-8k")
    switch_at = 40
    agent = create_agent(big, tools=make_tools(32768 // 8),
                         middleware=[SwitchModelAfter(switch_at, small), middleware],
                         checkpointer=InMemorySaver(), system_prompt=SYSTEM)
    for prompt in prompts:
        agent.invoke({"messages": [HumanMessage(prompt)]}, {"configurable": {"thread_id": "s"}})
    assert len(big.received) == switch_at and small.received
    return big, small


def test_model_switch_to_a_smaller_window_mid_run(tmp_path):
    """P2 (B1): after a router switches the agent from a 32k to an 8k model, the next
    request is compacted to the 8k window at once. The built-in, sized by its summariser's
    profile (32k), keeps sending requests the 8k model cannot take."""
    ours = ContextfoldMiddleware(str(tmp_path / "lc.db"))
    big, small = switch_run(ours)
    for model in (big, small):
        limit = model.profile["max_input_tokens"]
        for i, request in enumerate(model.received):
            assert problems(request, model.systems[i]) == []
            assert count_tokens_approximately(request) <= limit, (model.model_name, i)
    assert max(count_tokens_approximately(r) for r in big.received) > 8192  # it needed it
    ours.close()

    builtin = SummarizationMiddleware(model=summariser(32768), trigger=("fraction", 0.8),
                                      keep=("fraction", 0.3))
    _big, small = switch_run(builtin)
    over = [count_tokens_approximately(r) for r in small.received
            if count_tokens_approximately(r) > 8192]
    assert over  # evidence: the built-in sends requests over the new model's window
