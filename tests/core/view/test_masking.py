"""Observation masking (SPEC V1-V2): old tool output becomes a placeholder in the
projection only; the planner masks when that alone is enough, and summarises otherwise."""

from __future__ import annotations

import json

import pytest

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.mask_planner import MASKING_SUMMARIZER
from contextfold.core.planning.plan import NoOp, Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.sizing.estimator import MessageCosts, estimate_request
from contextfold.core.values.messages import Message, Node, TextPart, ToolCallPart, ToolResultPart
from contextfold.core.view.masking import MASK_MARKER, MASKING_NOTE, MaskedNode, apply_mask
from contextfold.core.view.projection import checkpoint_text, project
from contextfold.replay import replay_messages
from tests.builders import assistant, branch_of, chain, extend, user
from tests.runtime.test_runtime_support import store_fixture, words

store = store_fixture()

CAP = ModelCapacity(model="m", context_window=32_000, max_output=4_000)
AUTO = CompactionSettings(masking="auto")
DOI = "10.1234/abcd.5678"


def big_output(i: int, size: int = 6_000) -> str:
    return f"file {i} mentions {DOI} and more\n" + ("line of output text\n" * (size // 20))


def tool_turn(i: int, size: int = 6_000) -> list[Message]:
    cid = f"call{i}"
    call = Message(role="assistant", parts=(
        TextPart(text=f"reading file {i}"),
        ToolCallPart(id=cid, name="read", input={"path": f"src/module_{i}.py"})))
    result = Message(role="tool", parts=(
        ToolResultPart(call_id=cid, name="read", output=big_output(i, size)),))
    return [user(f"please read module {i}"), call, result, assistant(f"module {i} read")]


def tool_session(turns: int, size: int = 6_000) -> list[Node]:
    nodes: list[Node] = []
    for i in range(turns):
        msgs = tool_turn(i, size)
        nodes = extend(nodes, msgs, f"t{i}_") if nodes else chain(msgs, prefix=f"t{i}_")
    return nodes


def commit(nodes: list[Node], plan: Plan, summary: str = "## Goal\ns") -> list[Node]:
    cp = build_checkpoint(plan, summary if plan.action == "summarize" else "", summarizer="t")
    return [*nodes, Node(id=f"cp{len(nodes)}", parent_id=nodes[-1].id, payload=cp)]


def test_placeholder_keeps_name_arguments_identifiers_size_and_handle():  # V1
    nodes = tool_session(3)
    masked = apply_mask(nodes, nodes[8].id)  # mask the first two turns
    result = masked[2]
    assert isinstance(result, MaskedNode)
    text = result.message.tool_results[0].output
    assert text.startswith(f"{MASK_MARKER} read")
    assert json.dumps({"path": "src/module_0.py"}) in text
    assert DOI in text
    assert f"{len(big_output(0)):,} characters" in text
    assert f'history_expand("{nodes[2].id}")' in text
    # The call id, tool name and error flag are kept, so the pair stays a pair.
    original = nodes[2].message.tool_results[0]
    assert result.message.tool_results[0].call_id == original.call_id
    # The durable node never changes; nodes in the tail are untouched.
    assert nodes[2].message.tool_results[0].output == big_output(0)
    assert masked[8:] == tuple(nodes[8:]) and masked[10] is nodes[10]


def test_small_results_stay_raw():  # V1
    nodes = tool_session(3, size=400)
    assert apply_mask(nodes, nodes[8].id) == tuple(nodes)


def test_auto_masks_when_that_alone_is_enough():  # V2
    nodes = tool_session(10)
    budget = derive_budget(CAP, AUTO)
    before = estimate_request(project(branch_of(nodes)), CAP).tokens
    assert before > budget.auto_threshold
    result = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
    assert isinstance(result, Plan) and result.action == "mask"
    assert result.newly_old == () and result.first_kept_id == nodes[0].id
    nodes = commit(nodes, result)
    cp = nodes[-1].checkpoint
    assert cp.summarizer == MASKING_SUMMARIZER and cp.summary == ""
    assert cp.masked_before_id == result.mask_before_id
    assert MASKING_NOTE in checkpoint_text(cp)
    projection = project(branch_of(nodes))
    after = estimate_request(projection, CAP).tokens
    assert after <= budget.auto_threshold
    assert any(isinstance(n, MaskedNode) for n in projection.messages)
    assert openai_problems(to_openai(projection).messages) == []
    assert anthropic_problems(to_anthropic(projection).messages) == []


def test_summarises_when_masking_is_not_enough():  # V2
    # Most of the context is prose, not tool output: masking cannot reach the threshold.
    nodes: list[Node] = []
    for i in range(12):
        msgs = [user(words(700, f"u{i}")), assistant(words(700, f"a{i}"))]
        nodes = extend(nodes, msgs, f"p{i}_") if nodes else chain(msgs, prefix=f"p{i}_")
    nodes = extend(nodes, tool_turn(99, 3_000), "t")
    budget = derive_budget(CAP, AUTO)
    result = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
    assert isinstance(result, Plan) and result.action == "summarize"


def test_masking_off_always_summarises():  # V2
    nodes = tool_session(10)
    for budget in (derive_budget(CAP, CompactionSettings(masking="off")), derive_budget(CAP)):
        result = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
        assert isinstance(result, Plan) and result.action == "summarize"  # off by default


def test_manual_compaction_always_summarises():  # V2 M1
    nodes = tool_session(10)
    result = plan_compaction(branch_of(nodes), derive_budget(CAP, AUTO), "manual", capacity=CAP)
    assert isinstance(result, Plan) and result.action == "summarize"


def test_always_masks_even_above_the_threshold():  # V2
    nodes = tool_session(14, size=4_000)
    auto = derive_budget(CAP, CompactionSettings(masking="auto", tail_tokens=2_000))
    always = derive_budget(CAP, CompactionSettings(masking="always", tail_tokens=2_000))
    # Bulky prose keeps the masked request above the threshold.
    prose = [user(words(5_000, "p")), assistant(words(5_000, "q"))]
    nodes = extend(chain(prose, prefix="p"), [m.message for m in nodes], "x")
    assert plan_compaction(branch_of(nodes), auto, "auto", capacity=CAP).action == "summarize"
    result = plan_compaction(branch_of(nodes), always, "auto", capacity=CAP)
    assert isinstance(result, Plan) and result.action == "mask"


def test_nothing_new_to_mask_falls_back_to_a_summary():  # V2 A3
    nodes = tool_session(10)
    budget = derive_budget(CAP, AUTO)
    nodes = commit(nodes, plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP))
    again = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
    assert isinstance(again, NoOp) and again.code == "already_compacted"
    # The next turns push the request over the threshold again: new old output is masked,
    # or, once nothing more can be masked, a summary is made (never a second empty mask).
    for step in range(12):
        chat = [user(words(500, f"u{step}")), assistant(words(500, f"a{step}"))]
        nodes = extend(nodes, chat + tool_turn(100 + step), f"n{step}_")
        result = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
        if isinstance(result, Plan):
            previous = branch_of(nodes).latest_checkpoint.checkpoint
            if result.action == "mask" and previous.masked_before_id is not None:
                ids = [n.id for n in nodes]
                assert ids.index(result.mask_before_id) > ids.index(previous.masked_before_id)
            nodes = commit(nodes, result)
    kinds = [n.checkpoint.summarizer for n in nodes if n.checkpoint is not None]
    assert MASKING_SUMMARIZER in kinds and "t" in kinds


def test_summary_after_masking_reads_the_durable_nodes():  # V2 ("masked parts included")
    nodes = tool_session(10)
    budget = derive_budget(CAP, AUTO)
    nodes = commit(nodes, plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP))
    nodes = extend(nodes, tool_turn(50), "z")
    result = plan_compaction(branch_of(nodes), budget, "manual", capacity=CAP)
    assert isinstance(result, Plan) and result.action == "summarize"
    assert result.previous_summary is None  # the masking step had no summary yet
    outputs = [p.output for n in result.newly_old for p in n.message.tool_results]
    assert big_output(0) in outputs  # the original, not the placeholder
    assert not any(isinstance(n, MaskedNode) for n in result.newly_old)


def test_projection_is_byte_stable_between_compactions():  # V1 (prompt caching)
    nodes = tool_session(10)
    budget = derive_budget(CAP, AUTO)
    nodes = commit(nodes, plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP))
    first = to_anthropic(project(branch_of(nodes))).messages
    nodes = extend(nodes, [user("next"), assistant("reply")], "y")
    second = to_anthropic(project(branch_of(nodes))).messages
    assert json.dumps(second[: len(first) - 1]) == json.dumps(first[:-1])
    assert to_anthropic(project(branch_of(nodes))).messages == second  # deterministic


def test_masked_copies_are_estimated_apart_from_their_durable_node():  # V1 E5
    nodes = tool_session(3)
    costs = MessageCosts(CAP)
    masked = apply_mask(nodes, nodes[8].id)[2]
    assert costs(nodes[2]) > costs(masked) and costs(nodes[2]) > costs(masked) * 5


@pytest.mark.parametrize("masking", ["off", "auto"])
def test_replay_with_masking_stays_valid(masking):  # V1 V2 (public replay path)
    nodes = tool_session(40)
    budget = derive_budget(CAP, CompactionSettings(masking=masking))
    report = replay_messages([(n.id, n.message) for n in nodes], CAP, budget,
                             lambda plan: ("## Goal\nsummary", "test"))
    assert report.invalid_tool_sequences == 0 and report.dropped_messages == 0
    assert not any(r.over_limit for r in report.requests)
    steps = [c.summarizer for c in report.compactions]
    assert (MASKING_SUMMARIZER in steps) == (masking == "auto")


async def test_masking_step_commits_without_calling_the_summariser(store):  # V2 C2
    from contextfold.runtime.compaction import CompactionRequest, compact_session

    session = await store.create_session()
    nodes = tool_session(10)
    await store.append_many(session.id, [n.message for n in nodes])
    budget = derive_budget(CAP, AUTO)

    async def must_not_run(plan):
        raise AssertionError("a masking step must not call the summariser")

    outcome = await compact_session(CompactionRequest(store, session.id, capacity=CAP,
                                                      budget=budget, trigger="auto",
                                                      summarize=must_not_run))
    assert outcome.status == "compacted" and outcome.summarizer == MASKING_SUMMARIZER
    branch = await store.load_branch(session.id)
    full = await store.load_full_branch(session.id)
    assert project(branch) == project(full)
    stored = [n for n in full.nodes if n.message is not None]
    assert [n.message for n in stored] == [n.message for n in nodes]  # durable unchanged
