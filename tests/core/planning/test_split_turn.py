"""Split-turn boundary: long autonomous turns keep their recent tool rounds raw (SPEC K6)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.boundary import MIN_CLIP_CHARS, blocked_cuts, choose_boundary
from contextfold.core.planning.plan import NoOp, Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction, projection_after
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.sizing.estimator import estimate_message
from contextfold.core.values.messages import (
    ApprovalPart,
    Message,
    Node,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from contextfold.core.view.projection import CLIP_NOTE, TURN_HEADING, checkpoint_text, project
from contextfold.replay import ManagedSession, replay_messages, request_problems
from contextfold.summarize.extractive import summarize_extractive, summary_token_budget
from contextfold.summarize.prompts import build_summary_request

from ...builders import assistant, branch_of, chain, extend, tool_call, tool_result, user

CAP = ModelCapacity(model="claude-test", context_window=32_000, max_output=8_000)
BIG = ModelCapacity(model="claude-test", context_window=200_000, max_output=32_000)
REQUEST = "Fix the flaky test in tests/test_io.py and make sure `make check` passes. 修正して"



def length_cost(node: Node) -> int:
    msg = node.message
    assert msg is not None
    return 5 + len(msg.text) + sum(len(r.output) for r in msg.tool_results)


def long_turn(rounds: int, size: int = 1_500, request: str = REQUEST) -> list[Message]:
    """One user request and `rounds` tool rounds (read / edit / failing and passing bash)."""
    msgs: list[Message] = [user(request)]
    for r in range(rounds):
        cid = f"c{r}"
        kind = r % 4
        if kind == 0:
            call = tool_call(cid, "read", {"path": f"src/mod_{r % 7}.py"}, text=f"Reading {r}.")
            result = tool_result(cid, f"# module {r}\n" + "x = 1\n" * (size // 6))
        elif kind == 1:
            call = tool_call(cid, "edit", {"path": f"src/mod_{r % 7}.py", "old": "a", "new": "b"})
            result = tool_result(cid, "edited")
        elif kind == 2:
            call = tool_call(cid, "bash", {"command": "make check"})
            result = tool_result(cid, "FAILED tests/test_io.py::test_read - timeout\n"
                                 + "." * size, is_error=True)
        else:
            call = tool_call(cid, "bash", {"command": f"grep -n flaky src/mod_{r}.py"})
            result = tool_result(cid, f"{r}: ok\n" + "y" * size)
        msgs += [call, result]
    return msgs


def latest_call_ids(nodes: list[Node]) -> tuple[str, str]:
    """(id of the latest assistant node with a tool call, id of the node with its result)."""
    messages = [n for n in nodes if n.message is not None]
    call_node = next(n for n in reversed(messages) if n.message.tool_calls)
    call_id = call_node.message.tool_calls[-1].id
    result_node = next(n for n in messages
                       if any(r.call_id == call_id for r in n.message.tool_results))
    return call_node.id, result_node.id


def assert_valid(projection, system: str | None = None) -> None:
    assert openai_problems(to_openai(projection, system=system).messages) == []
    assert anthropic_problems(to_anthropic(projection, system=system).messages) == []


# --------------------------------------------------------------------------- the long turn


def test_300_round_single_turn_compacted_repeatedly():  # K6 K4 P2 A4
    session = ManagedSession(CAP, derive_budget(CAP))
    previous_start: int | None = None
    seen = 0
    for i, msg in enumerate(long_turn(300)):
        record = session.step(f"m{i}", msg)
        if record is not None:
            assert record.problems == ()  # both providers accept every request
            assert not record.over_limit
        if len(session.compactions) == seen:
            continue
        seen = len(session.compactions)
        c = session.compactions[-1]
        projection = session.projection()
        ids = [n.id for n in session.chain]
        # The most recent rounds stay raw: never an empty tail while rounds fit.
        assert c.split_turn and c.kept_messages > 0
        assert c.kept_tokens <= c.tail_budget
        assert c.kept_tokens >= c.tail_budget // 2
        # The latest call and its result are raw.
        call_id, result_id = latest_call_ids(session.chain[:-1])
        projected = {n.id for n in projection.messages}
        assert {call_id, result_id} <= projected
        # The projection starts with an assistant round, right after the checkpoint.
        assert projection.messages[0].message.role == "assistant"
        assert_valid(projection)
        # K4: the boundary never moves back.
        start = ids.index(c.first_kept_id)
        assert previous_start is None or start > previous_start
        previous_start = start
        # The request stays verbatim in the checkpoint, with the turn so far.
        cp = projection.summary
        assert cp is not None and cp.turn is not None
        assert cp.turn.request == REQUEST
        assert cp.turn.request_id == "m0"
        text = checkpoint_text(cp)
        assert REQUEST in text and TURN_HEADING in text
        assert "make check" in text and "src/mod_" in text
    assert len(session.compactions) >= 5
    # Folded rounds accumulate across compactions of the one turn.
    final = session.projection().summary
    assert final is not None and final.turn is not None
    assert final.turn.rounds_folded > 150
    assert session.dropped_messages() == 0


def test_no_compaction_loop_in_a_long_turn():  # K6 thrash guard
    report = replay_messages([(f"m{i}", m) for i, m in enumerate(long_turn(300))],
                             CAP, derive_budget(CAP))
    # One preflight per overflow, never two before the same request.
    befores = [c.before_request for c in report.compactions]
    assert len(befores) == len(set(befores))
    # Each compaction frees at least a third of the request it was made for.
    assert all(c.tokens_after < c.tokens_before * 2 / 3 for c in report.compactions)
    assert report.invalid_tool_sequences == 0 and report.dropped_messages == 0
    log = report.to_json()["compaction_log"]
    assert len(log) == len(report.compactions)
    assert all(e["kept_tokens"] > 0 and e["split_turn"] for e in log)


def test_split_turn_can_be_turned_off():  # K6 is a setting; off = K1-K3 only
    off = derive_budget(CAP, CompactionSettings(split_turn=False))
    report = replay_messages([(f"m{i}", m) for i, m in enumerate(long_turn(120))],
                             CAP, off)
    assert report.compactions
    assert all(c.kept_messages == 0 and not c.split_turn for c in report.compactions)


def test_manual_compaction_of_one_long_turn_splits_it():  # K6 M1 M3
    nodes = chain(long_turn(80))
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(result, Plan)
    assert result.kept and result.kept[0].message.role == "assistant"
    assert result.turn_context is not None and result.turn_context.request == REQUEST
    # M3 still holds for a single turn that fits the tail.
    short = chain(long_turn(2, size=50))
    noop = plan_compaction(branch_of(short), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(noop, NoOp) and noop.code == "single_turn"


def test_auto_compaction_after_a_long_turn_keeps_its_last_rounds():  # K6 A1 A3
    msgs = [*long_turn(60), assistant("Done: the flaky test now passes.")]
    nodes = chain(msgs)
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "auto", capacity=CAP)
    assert isinstance(result, Plan)
    call_id, result_id = latest_call_ids(nodes)
    assert {call_id, result_id, nodes[-1].id} <= {n.id for n in result.kept}


# --------------------------------------------------------------------------- candidate cuts


def test_parallel_calls_in_one_message_at_the_candidate_boundary():  # K6 K1
    calls = Message(role="assistant", parts=(ToolCallPart(id="p1", name="read", input={}),
                                             ToolCallPart(id="p2", name="read", input={})))
    msgs = [user("go"), tool_call("a"), tool_result("a", "r" * 300), calls,
            tool_result("p1", "1" * 300), tool_result("p2", "2" * 300),
            tool_call("b"), tool_result("b", "r" * 50)]
    nodes = chain(msgs)
    for budget in range(0, 1400, 10):
        b = choose_boundary(nodes, budget, length_cost, split_turn=True)
        assert b.first_kept_id not in {"n4", "n5"}  # never between the calls' results
        if b.kept:
            assert b.kept[0].message.role in ("assistant", "user")


def test_parallel_calls_written_one_block_per_node():  # K6 K1 (Claude Code's shape)
    msgs = [user("go"), tool_call("a"), tool_result("a", "r" * 300),
            assistant("Reading both."), tool_call("p1"), tool_call("p2"),
            tool_result("p1", "1" * 300), tool_result("p2", "2" * 300),
            tool_call("b"), tool_result("b", "r" * 50)]
    nodes = chain(msgs)
    allowed = {None, "n0", "n1", "n3", "n8"}
    for budget in range(0, 1400, 10):
        b = choose_boundary(nodes, budget, length_cost, split_turn=True)
        assert b.first_kept_id in allowed  # never inside the reply or between its calls


def test_approval_pending_blocks_the_compaction_and_every_cut_after_it():  # K6 A2
    pending = Message(role="user", parts=(ApprovalPart(call_id="w1", state="pending"),))
    msgs = [*long_turn(30), tool_call("w1", "write", {"path": "x.py"}), pending]
    nodes = chain(msgs)
    blocked = blocked_cuts(nodes)
    assert blocked[-1]  # the pending approval itself
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "preflight", capacity=CAP,
                             pending=[user("status?" * 3000)])
    assert isinstance(result, NoOp) and result.code == "unstable"


def test_decided_approval_is_never_split_from_its_call_or_result():  # K6 K1
    approved = Message(role="user", parts=(ApprovalPart(call_id="w1", state="approved"),))
    msgs = [user("go"), tool_call("a"), tool_result("a", "r" * 400),
            tool_call("w1", "write", {"path": "x.py"}), approved, tool_result("w1", "ok" * 200),
            tool_call("b"), tool_result("b", "r" * 40)]
    nodes = chain(msgs)
    for budget in range(0, 1500, 10):
        b = choose_boundary(nodes, budget, length_cost, split_turn=True)
        assert b.first_kept_id not in {"n4", "n5"}
        kept_calls = {c.id for n in b.kept for c in n.message.tool_calls}
        assert all(r.call_id in kept_calls for n in b.kept for r in n.message.tool_results)


# --------------------------------------------------------------------------- oversized round


def test_round_larger_than_the_tail_budget_is_clipped_in_the_projection_only():  # K6
    huge = "HEAD-MARK " + "z" * 120_000 + " TAIL-MARK"
    msgs = [*long_turn(10, size=300), tool_call("big", "bash", {"command": "cat big.log"}),
            tool_result("big", huge)]
    nodes = chain(msgs)
    budget = derive_budget(CAP)
    result = plan_compaction(branch_of(nodes), budget, "preflight", capacity=CAP)
    assert isinstance(result, Plan)
    assert [n.id for n in result.kept] == [nodes[-2].id, nodes[-1].id]
    assert result.tail_clips == {nodes[-1].id: result.tail_clips[nodes[-1].id]}
    assert MIN_CLIP_CHARS <= result.tail_clips[nodes[-1].id] < len(huge)
    assert result.kept_tokens <= result.tail_budget
    cp = build_checkpoint(result, summarize_extractive(result), summarizer="extractive")
    nodes = extend(nodes, [cp], "cp")
    projection = project(branch_of(nodes))
    after = projection_after(result, cp)
    assert (projection.messages, projection.clips) == (after.messages, after.clips)
    sent = projection.message_of(projection.messages[-1]).tool_results[0].output
    assert sent.startswith("HEAD-MARK") and sent.endswith("TAIL-MARK")
    assert "omitted" in sent and CLIP_NOTE in sent
    # The durable node is whole.
    assert nodes[-2].message.tool_results[0].output == huge
    body = to_openai(projection).messages[-1]["content"]
    assert len(body) < len(huge) // 4 and "TAIL-MARK" in body
    assert_valid(projection)
    # The next round folds the clipped one; a fresh compaction keeps only fresh rounds.
    more = long_turn(12, size=300)[1:]
    nodes = extend(nodes, [m.model_copy() for m in more], "z")
    later = plan_compaction(branch_of(nodes), budget, "preflight", capacity=CAP,
                            pending=[user("x" * 40_000)])
    assert isinstance(later, Plan)
    assert all(n.id not in {"n21", "n22"} for n in later.kept)


def test_round_that_cannot_fit_even_clipped_keeps_nothing():  # K6 K3
    args = {"path": "big.py", "content": "w" * 200_000}
    msgs = [*long_turn(4, size=100), tool_call("w", "write", args), tool_result("w", "ok")]
    nodes = chain(msgs)
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "preflight", capacity=CAP)
    assert isinstance(result, Plan)
    assert result.first_kept_id is None and result.kept == ()


# --------------------------------------------------------------------------- model switch


def test_switch_to_a_smaller_model_mid_turn():  # K6 K4 P2 B2
    msgs = long_turn(140, size=8_000)
    big = ManagedSession(BIG, derive_budget(BIG))
    for i, m in enumerate(msgs[:201]):  # ends with a tool result: the next request
        big.step(f"m{i}", m)
    first = big.compactions[-1] if big.compactions else None
    assert first is not None and first.split_turn
    # Same history, now on a 32k model: the next request must be made to fit it.
    small = ManagedSession(CAP, derive_budget(CAP), nodes=big.chain)
    start_before = [n.id for n in small.chain].index(first.first_kept_id)
    projection, tokens = small.before_request()
    assert tokens <= small.budget.safe_input_limit
    c = small.compactions[-1]
    assert c.split_turn and c.kept_messages > 0 and c.kept_tokens <= c.tail_budget
    assert [n.id for n in small.chain].index(c.first_kept_id) > start_before  # K4
    call_id, result_id = latest_call_ids(big.chain)
    assert {call_id, result_id} <= {n.id for n in projection.messages}
    assert request_problems(projection, None) == ()
    assert projection.summary.turn.request == REQUEST


# --------------------------------------------------------------------------- the checkpoint


def test_turn_context_lists_tried_failed_and_files_in_both_profiles():  # K6 S2
    nodes = chain(long_turn(40))
    for profile in ("coding", "research"):
        result = plan_compaction(branch_of(nodes), derive_budget(CAP), "preflight",
                                 capacity=CAP, profile=profile)
        assert isinstance(result, Plan) and result.turn_context is not None
        turn = result.turn_context
        assert turn.request == REQUEST and not turn.request_clipped
        assert any("make check" in f and "failed" in f for f in turn.failed)
        assert any("grep" in call for call, _ in turn.tried)
        assert any("src/mod_" in p for p in turn.files_modified)
        summary = summarize_extractive(result)
        text = checkpoint_text(build_checkpoint(result, summary, summarizer="x"))
        assert text.index(summary.strip()) < text.index(TURN_HEADING)
        # The summary and the turn context together stay within the summary budget.
        assert summary_token_budget(result) < result.budget.summary_budget


def test_long_request_is_clipped_head_and_tail_within_its_budget():  # K6
    request = "START " + "please refactor everything " * 3000 + " END"
    nodes = chain(long_turn(40, request=request))
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "preflight", capacity=CAP)
    assert isinstance(result, Plan) and result.turn_context is not None
    turn = result.turn_context
    assert turn.request_clipped and turn.request.startswith("START")
    assert turn.request.endswith("END")


def test_llm_prompt_says_the_turn_is_unfinished():  # K6 S1
    plain = build_summary_request(profile="coding", conversation_text="C", max_tokens=100)
    split = build_summary_request(profile="coding", conversation_text="C", max_tokens=100,
                                  split_turn=True)
    assert "unfinished turn" in split.prompt and "unfinished turn" not in plain.prompt


# --------------------------------------------------------------------------- properties


@st.composite
def agent_turns(draw) -> list[Message]:
    """One or two user turns of rounds with parallel calls, errors and approvals."""
    msgs: list[Message] = []
    for t in range(draw(st.integers(1, 2))):
        msgs.append(user("u" * draw(st.integers(1, 80))))
        for r in range(draw(st.integers(0, 12))):
            ids = [f"c{t}_{r}_{k}" for k in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                msgs.append(Message(role="assistant", parts=(
                    TextPart(text="t" * draw(st.integers(0, 40))),
                    *(ToolCallPart(id=i, name="bash", input={"command": i}) for i in ids))))
            else:  # one node per block
                msgs += [tool_call(i, "bash", {"command": i}) for i in ids]
            if draw(st.booleans()):
                msgs.append(Message(role="user", parts=(
                    ApprovalPart(call_id=ids[0], state="pending"),)))
                msgs.append(Message(role="user", parts=(
                    ApprovalPart(call_id=ids[0], state="approved"),)))
            for i in ids:
                msgs.append(Message(role="tool", parts=(ToolResultPart(
                    call_id=i, output="o" * draw(st.integers(0, 3000)),
                    is_error=draw(st.booleans())),)))
        if draw(st.booleans()):
            msgs.append(assistant("a" * draw(st.integers(1, 60))))
    return msgs


def _measure(msg: Message) -> int:
    return estimate_message(msg)


def _cost(node: Node) -> int:
    return _measure(node.message)


@settings(max_examples=300, deadline=None)
@given(agent_turns(), st.integers(0, 4_000))
def test_any_k6_boundary_keeps_tool_pairs_whole_and_exports_valid(msgs, budget):  # K6 K1
    nodes = chain(msgs)
    b = choose_boundary(nodes, budget, _cost, split_turn=True, measure=_measure)
    assert [n.id for n in (*b.newly_old, *b.kept)] == [n.id for n in nodes]
    assert b.kept_tokens <= budget or not b.kept
    if b.kept:
        first = b.kept[0].message
        assert first.role == "user" or (b.split and first.role == "assistant")
        assert not blocked_cuts(nodes)[len(b.newly_old)]
    kept_calls = {c.id for n in b.kept for c in n.message.tool_calls}
    kept_ids = set(kept_calls)
    for n in b.kept:
        for r in n.message.tool_results:
            assert r.call_id in kept_calls  # never a result without its call
        for a in n.message.approvals:
            assert a.call_id in kept_ids  # never an approval without its call
    # Exported as it would be sent after the checkpoint: valid for both providers.
    nodes_cp = nodes + chain([_checkpoint(b)], prefix="cp", parent=nodes[-1].id)
    assert_valid(project(branch_of(nodes_cp)), system="sys")


def _checkpoint(b):
    from contextfold.core.values.messages import Checkpoint

    return Checkpoint(summary="## Goal\n- (user) x", first_kept_id=b.first_kept_id,
                      tokens_before=1, tail_clips=dict(b.clips))
