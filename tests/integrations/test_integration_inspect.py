"""contextfold as an Inspect AI compaction strategy (contextfold.integrations.inspect_ai).

The example eval of docs/inspect.md (examples/inspect_eval.py) runs here, offline, with
Inspect's mock model: one long multi-turn tool-using task under contextfold's strategy and
two of Inspect's own, side by side in one `eval()`. What is checked is what the model was
sent and what contextfold stored: the conversation mirrored by content and compacted into
checkpoints (Y1, M1, P2), every request inside the window (P3), tool calls and results whole
(K1), the task itself in every request."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from inspect_ai.tool import ToolCall

from contextfold.integrations.inspect_ai import (
    OWN_ID_PREFIX,
    ContextfoldCompaction,
    _Conversation,
    to_messages,
)
from contextfold.store import open_store

# Inspect's retry setup calls tenacity with a deprecated argument on every model call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:The 'initial' parameter is deprecated:DeprecationWarning")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inspect_eval.py"


def _example():
    spec = importlib.util.spec_from_file_location("inspect_eval_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory):
    """The example eval, run once: contextfold and Inspect's trim (the other strategies of
    the example cost the same again and add nothing the test checks)."""
    tmp = tmp_path_factory.mktemp("inspect")
    example = _example()
    mp = pytest.MonkeyPatch()
    # Inspect's logs and tiktoken's cache go to the test's directory, not the user's.
    mp.setenv("TIKTOKEN_CACHE_DIR", str(tmp / "tiktoken"))
    mp.setenv("INSPECT_LOG_DIR", str(tmp / "logs"))
    try:
        db = str(tmp / "contextfold.db")
        outcomes, strategies = example.run(["contextfold", "trim"],
                                           log_dir=tmp / "logs", store=db, rounds=20)
        yield example, {o.strategy: o for o in outcomes}, strategies, db, tmp
    finally:
        strategies_made = locals().get("strategies") or {}
        if "contextfold" in strategies_made:
            strategies_made["contextfold"].close()
        mp.undo()


def _stored(db: str, session_ids: list[str]) -> list[list]:
    async def load():
        store = await open_store(db)
        try:
            return [list((await store.load_full_branch(s)).nodes) for s in session_ids]
        finally:
            await store.close()

    return asyncio.run(load())


def test_contextfold_compacts_the_inspect_agent_into_stored_checkpoints(ran):  # Y1, M1, P2
    """The agent's conversation outgrows the 8k window: contextfold is asked to compact,
    compacts, and stores a checkpoint for each compaction, beside every message it saw."""
    _, outcomes, strategies, db, _ = ran
    ours = outcomes["contextfold"]
    assert ours.status == "success", ours.error
    assert ours.compactions >= 2  # Inspect's own record: a CompactionEvent per request
    strategy = strategies["contextfold"]
    sessions = list(strategy.session_ids().values())
    assert len(sessions) == 1  # one sample, one session
    made = [o for per_sample in strategy.outcomes().values() for o in per_sample]
    # Inspect's sample-end hook released the sample's messages; its session stays listed
    assert strategy.held() == []
    strategy.close()
    nodes = _stored(db, sessions)[0]
    checkpoints = [n for n in nodes if n.kind == "checkpoint"]
    assert len(checkpoints) == len(made) >= 2
    assert {c.id for c in checkpoints} == {o.checkpoint_id for o in made}
    # The durable history holds the conversation as sent, in order (stored by content up
    # to the last compaction: the strategy sees the conversation only when asked).
    texts = [n.message.text for n in nodes if n.message is not None]
    assert texts[0].startswith("The nightly build of the payments service fails")
    assert sum(1 for n in nodes if n.message is not None and n.message.role == "tool") >= 10


def test_every_request_fits_the_window_with_pairs_whole_and_the_task(ran):  # P3, K1, S8
    """What the mock model received, request by request, measured with a real tokenizer
    (o200k) against the window: never over it, no tool result without its call nor call
    without its result, and the task's own words in every request."""
    example, outcomes, _, _, _ = ran
    ours = outcomes["contextfold"]
    assert ours.requests >= 20
    assert 0 < ours.largest <= example.WINDOW
    assert ours.unpaired == 0
    assert ours.without_task == 0
    # ... and not only because Inspect re-adds the sample's input: contextfold's own
    # checkpoint carries the task's words verbatim in every request it opens (S8)
    assert ours.checkpointed >= 5
    assert ours.task_in_checkpoint == ours.checkpointed


def test_what_was_folded_is_one_search_away(ran):  # L2
    """The ticket id of the first tool result is folded out of view by the 8k window; the
    agent, given the strategy's recall tools, searches the sample's session for it and
    reports it: the tools run inside Inspect's sample, over that sample's session."""
    _, outcomes, _, _, _ = ran
    ours = outcomes["contextfold"]
    assert ours.searched
    assert ours.ticket_reported


def test_inspect_strategies_run_beside_it(ran):
    """The comparison the example prints: Inspect's trim ran on the same task in the same
    `eval()` and compacted too (the example stays a fair side-by-side)."""
    example, outcomes, _, _, _ = ran
    trim = outcomes["trim"]
    assert trim.status == "success", trim.error
    assert trim.compactions >= 1
    assert trim.largest <= example.WINDOW
    # the same script to the end (contextfold's run has the one search more)
    assert trim.requests == outcomes["contextfold"].requests - outcomes["contextfold"].searched
    text = example.table(list(outcomes.values()))
    assert "contextfold" in text and "trim" in text


def test_the_compacted_view_expands_to_the_whole_conversation():  # Y1
    """Inspect hands the strategy its compacted view (contextfold's checkpoint message, the
    prefix it re-adds, messages it merged); that view stands for the conversation already
    seen, so only what is new is added: a compaction never looks like an edit."""
    system = ChatMessageSystem(content="be brief")
    task = ChatMessageUser(content="fix the build")
    call = ChatMessageAssistant(content="", tool_calls=[
        ToolCall(id="c1", function="read_file", arguments={"path": "a.py"})])
    result = ChatMessageTool(content="x = 1", tool_call_id="c1", function="read_file")
    conversation = _Conversation()
    assert conversation.expand([system, task, call, result]) == [system, task, call, result]
    own = ChatMessageUser(id=OWN_ID_PREFIX + "cp1", content="[contextfold checkpoint] ...")
    merged = ChatMessageUser(content="fix the build\n[contextfold checkpoint] ...",
                             metadata={"combined_from": [task.id, own.id]})
    answer = ChatMessageAssistant(content="done")
    assert conversation.expand([system, merged, result, answer]) == \
        [system, task, call, result, answer]
    converted, sources, prompt = to_messages(conversation.messages)
    assert prompt == "be brief"
    assert [m.role for m in converted] == ["user", "assistant", "tool", "assistant"]
    assert sources == [1, 2, 3, 4]
    assert converted[1].tool_calls[0].input == {"path": "a.py"}
    assert converted[2].tool_results[0].call_id == "c1"


def test_a_masked_or_clipped_message_keeps_its_id_and_pairing():  # V1, K6, K1
    """Where the projection changed a message (a masked tool result, clipped arguments), the
    copy sent keeps the message's id, its call id and function: Inspect and the next
    compaction know it for the same message, and the pair stays whole."""
    from contextfold.core.values.messages import Message, TextPart, ToolCallPart, ToolResultPart
    from contextfold.integrations.inspect_messages import _changed

    call = ChatMessageAssistant(content="reading", tool_calls=[
        ToolCall(id="c1", function="read_file", arguments={"path": "a.py", "body": "x" * 99})])
    result = ChatMessageTool(content="y" * 500, tool_call_id="c1", function="read_file")
    masked = _changed(result, Message(role="tool", parts=(ToolResultPart(
        call_id="c1", name="read_file", output="[output masked: 500 chars]"),)))
    assert (masked.id, masked.tool_call_id, masked.function) == \
        (result.id, "c1", "read_file")
    assert masked.text == "[output masked: 500 chars]"
    clipped = _changed(call, Message(role="assistant", parts=(
        TextPart(text="reading"),
        ToolCallPart(id="c1", name="read_file", input={"path": "a.py", "body": "x…"}))))
    assert clipped.id == call.id and clipped.text == "reading"
    assert [(c.id, c.function, c.arguments) for c in clipped.tool_calls] == \
        [("c1", "read_file", {"path": "a.py", "body": "x…"})]
    assert call.tool_calls[0].arguments["body"] == "x" * 99  # the record is untouched


def test_threshold_given_or_contextfold_auto_threshold():
    """A threshold given is Inspect's; without one, Inspect is told contextfold's own auto
    threshold for the model's window (the budget of B1-B3, not a figure of the face)."""
    from inspect_ai.model import ModelInfo, get_model, set_model_info

    from contextfold.core.models.budget import derive_budget

    assert ContextfoldCompaction(threshold=0.7).threshold == 0.7
    set_model_info("mockllm/window-test", ModelInfo(context_length=16_384))
    strategy = ContextfoldCompaction()
    model = get_model("mockllm/window-test")
    capacity = strategy.capacity_of(model)
    assert capacity.context_window == 16_384
    assert derive_budget(capacity).auto_threshold < 16_384


def test_a_model_nobody_can_size_says_how_to_give_its_window(monkeypatch):
    """Neither Inspect's model info nor contextfold's catalog knows the model: the error
    names both ways to give its window, in Inspect's words and contextfold's."""
    from inspect_ai.model import get_model

    from contextfold.core.models.catalog import UnknownModelError
    from contextfold.integrations import inspect_ai as integration

    model = get_model("mockllm/unheard-of-model-x9")
    # Inspect gives every mockllm model a default window; a real provider's unknown model
    # has none, which is what this stands for.
    monkeypatch.setattr(integration, "get_model_input_tokens", lambda _model: None)
    with pytest.raises(UnknownModelError) as caught:
        ContextfoldCompaction().capacity_of(model)
    assert "set_model_info(" in str(caught.value)
    assert "capacity_for(" in str(caught.value)


def test_an_llm_summariser_is_built_the_one_way_every_face_builds_it():
    """`summarizer_model` goes through `summarize.factory.summarizer_for` (sized by the
    model resolver, served by contextfold's providers); with `summarizer` too it is refused."""
    from contextfold.summarize.llm import LlmSummarizer

    built = ContextfoldCompaction(summarizer_model="offline/echo").build_summarizer()
    assert isinstance(built, LlmSummarizer) and built.name == "llm:offline/echo"
    assert ContextfoldCompaction().build_summarizer() is None
    with pytest.raises(ValueError, match="not both"):
        ContextfoldCompaction(summarizer=object(), summarizer_model="offline/echo")
