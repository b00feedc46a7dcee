"""The prepare step: manual, auto and preflight planning (SPEC M1-M6, A1-A3, P1-P2, K4-K5)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import NoOp, Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.sizing.estimator import estimate_message
from contextfold.core.values.messages import Checkpoint, Message, Node, text_message
from contextfold.core.view.projection import project

from ...builders import branch_of, chain, extend, tool_call, turn, user

BIG = ModelCapacity(model="big", context_window=200_000, max_output=64_000)
SMALL = ModelCapacity(model="small", context_window=8_192, max_output=4_096)


def plan(nodes, trigger="manual", capacity=BIG, **kw):
    return plan_compaction(branch_of(nodes), derive_budget(capacity), trigger,
                           capacity=capacity, **kw)


def commit(nodes: list[Node], p: Plan, prefix: str, summary: str = "## S\nsummary") -> list[Node]:
    cp = build_checkpoint(p, summary, summarizer="test")
    return extend(nodes, [cp], prefix)


def test_manual_noop_single_turn():  # M3
    result = plan(chain(turn(0, tools=1)))
    assert isinstance(result, NoOp) and result.code == "single_turn"


def test_manual_noop_when_checkpoint_is_leaf():  # M3
    nodes = chain([*turn(0), *turn(1)])
    nodes = commit(nodes, plan(nodes), "c")
    result = plan(nodes)
    assert isinstance(result, NoOp) and result.code == "already_compacted"


def test_manual_first_compaction_summarises_first_keeps_second():  # M1 M2
    nodes = chain([*turn(0), *turn(1)])
    result = plan(nodes)  # far below any threshold: manual ignores it (M1)
    assert isinstance(result, Plan)
    assert result.first_kept_id == "n2"
    assert [n.id for n in result.newly_old] == ["n0", "n1"]
    assert [n.id for n in result.kept] == ["n2", "n3"]


def test_manual_update_reuses_boundary_when_it_cannot_move():  # M4
    nodes = chain([*turn(0), *turn(1)])
    nodes = commit(nodes, plan(nodes), "c")  # C1 keeps turn 1 raw
    # A follow-up in the same turn after the checkpoint (no new user message).
    nodes = extend(nodes, [text_message("assistant", "one more thing")], "x")
    result = plan(nodes)
    assert isinstance(result, Plan)
    assert result.first_kept_id == "n2"  # boundary reused
    assert [n.id for n in result.newly_old] == ["x0"]
    assert result.previous_summary == "## S\nsummary"


def test_manual_moving_boundary_folds_newly_old():  # M5 K5 S4
    nodes = chain([*turn(0), *turn(1)])
    nodes = commit(nodes, plan(nodes), "c")
    nodes = extend(nodes, turn(2), "x")
    result = plan(nodes)
    assert isinstance(result, Plan)
    assert result.first_kept_id == "x0"
    assert [n.id for n in result.newly_old] == ["n2", "n3"]  # turn 1 is newly old
    assert result.previous_checkpoint_id == "c0"


def test_instructions_travel_with_plan_and_checkpoint():  # M6
    nodes = chain([*turn(0), *turn(1)])
    result = plan(nodes, instructions="keep all DOIs")
    assert isinstance(result, Plan) and result.instructions == "keep all DOIs"
    cp = build_checkpoint(result, "## S\ns", summarizer="test")
    assert cp.details["instructions"] == "keep all DOIs"


def test_auto_below_threshold_is_noop():  # A1 (the size trigger; Q2's cost trigger, the
    # default, has already decided in the check after the turn when it plans "auto")
    from contextfold.core.models.budget import CompactionSettings

    budget = derive_budget(BIG, CompactionSettings(trigger="size"))
    result = plan_compaction(branch_of(chain([*turn(0), *turn(1)])), budget, "auto",
                             capacity=BIG)
    assert isinstance(result, NoOp) and result.code == "below_threshold"


def long_session(n: int, size: int = 600) -> list[Node]:
    msgs: list[Message] = []
    for i in range(n):
        msgs += turn(i, tools=1, size=size)
    return chain(msgs)


def test_auto_compacts_above_threshold():  # A1 B1
    nodes = long_session(40)
    result = plan(nodes, trigger="auto", capacity=SMALL)
    assert isinstance(result, Plan)
    budget = derive_budget(SMALL)
    assert result.tokens_before > budget.auto_threshold
    assert result.kept_tokens <= budget.tail_budget


def test_auto_skips_unstable_session():  # A2
    nodes = extend(long_session(40), [user("go"), tool_call("open")], "x")
    result = plan(nodes, trigger="auto", capacity=SMALL)
    assert isinstance(result, NoOp) and result.code == "unstable"


def test_auto_requires_boundary_to_advance():  # A3
    # A huge system prompt keeps the request above the threshold, but the only turn since
    # the checkpoint fits the tail: compacting would free nothing, so auto does not run.
    nodes = chain([*turn(0), *turn(1)])
    nodes = commit(nodes, plan(nodes, capacity=SMALL), "c")
    system = "s " * 6_000
    result = plan(nodes, trigger="auto", capacity=SMALL, system=system)
    assert isinstance(result, NoOp) and result.code in ("already_compacted", "boundary_fixed")
    nodes = extend(nodes, [text_message("assistant", "follow-up")], "x")
    result = plan(nodes, trigger="auto", capacity=SMALL, system=system)
    assert isinstance(result, NoOp) and result.code == "boundary_fixed"


def test_auto_thrash_guard():  # A3 (thrash guard)
    # A big system prompt keeps the request above the threshold; only two small turns
    # would leave the tail, and their summary would be about as large as they are.
    budget = derive_budget(SMALL)
    per_turn = sum(estimate_message(m, SMALL) for m in turn(0, size=300))
    n_turns = budget.tail_budget // per_turn + 2
    assert 2 * per_turn < budget.summary_budget  # the premise of this test
    nodes = chain([m for i in range(n_turns) for m in turn(i, size=300)])
    result = plan(nodes, trigger="auto", capacity=SMALL, system="s " * 5_000)
    assert isinstance(result, NoOp) and result.code == "thrash_guard"
    assert "free" in result.reason


def test_preflight_noop_when_it_fits():  # P1
    result = plan(chain([*turn(0), *turn(1)]), trigger="preflight",
                  pending=[user("short question")])
    assert isinstance(result, NoOp) and result.code == "fits"


def test_preflight_big_paste_shrinks_tail():  # P1 P2
    nodes = long_session(6, size=300)
    paste = user("p" * 12_000)
    result = plan(nodes, trigger="preflight", capacity=SMALL, pending=[paste])
    assert isinstance(result, Plan)
    budget = derive_budget(SMALL)
    assert result.kept_tokens <= max(0, budget.tail_budget)


def test_preflight_after_switch_to_small_model():  # P2
    nodes = long_session(12, size=400)
    on_big = plan(nodes, trigger="preflight", capacity=BIG, pending=[user("next")])
    assert isinstance(on_big, NoOp)
    on_small = plan(nodes, trigger="preflight", capacity=SMALL, pending=[user("next")])
    assert isinstance(on_small, Plan)


def test_plan_records_branch_state():  # C1
    nodes = chain([*turn(0), *turn(1)])
    result = plan_compaction(branch_of(nodes, revision=5), derive_budget(BIG), "manual",
                             capacity=BIG)
    assert isinstance(result, Plan)
    assert result.session_leaf_id == "n3" and result.branch_revision == 5


def test_chunks_cover_newly_old_exactly_once():  # R3 (chunking never drops a message)
    tiny = ModelCapacity(model="tiny", context_window=4_096, max_output=1_024)
    nodes = long_session(30, size=500)
    result = plan(nodes, capacity=tiny, summarizer_budget=derive_budget(tiny))
    assert isinstance(result, Plan)
    flat = [n.id for chunk in result.chunks for n in chunk]
    assert flat == [n.id for n in result.newly_old]
    assert len(result.chunks) > 1


# --- property: a whole session managed by the planner ------------------------------------


@st.composite
def sessions(draw):
    turns = []
    for _ in range(draw(st.integers(2, 25))):
        turns.append((draw(st.integers(0, 2)), draw(st.integers(10, 3000)),
                      draw(st.sampled_from(["none", "auto", "manual"]))))
    return turns


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_session_invariants(turn_specs):  # K4 K5 T1 T4 A3
    cap = ModelCapacity(model="m", context_window=16_384, max_output=4_096)
    budget = derive_budget(cap)
    nodes: list[Node] = []
    previous_first_kept_pos = -1
    summarised: set[str] = set()
    for t, (tools, size, action) in enumerate(turn_specs):
        new = turn(t, tools=tools, size=size)
        nodes = extend(nodes, new, f"t{t}_") if nodes else chain(new, prefix=f"t{t}_")
        if action == "none":
            continue
        branch = branch_of(nodes)
        result = plan_compaction(branch, budget, action, capacity=cap)
        if isinstance(result, NoOp):
            continue
        # K4: the boundary never moves back.
        pos = (branch.position(result.first_kept_id) if result.first_kept_id
               else len(branch.nodes))
        assert pos >= previous_first_kept_pos
        previous_first_kept_pos = pos
        # K5: newly old nodes are still projected raw: nothing is folded twice after it
        # left the context (an M4 catch-up folds nodes that stay in the tail).
        assert {n.id for n in result.newly_old} <= {n.id for n in project(branch).messages}
        summarised |= {n.id for n in result.newly_old}
        nodes = commit(nodes, result, f"c{t}_")
        # Partition: every message node is summarised or projected; none is lost.
        p = project(branch_of(nodes))
        projected = {n.id for n in p.messages}
        for node in nodes:
            if node.message is not None:
                assert node.id in summarised or node.id in projected, node.id
        # Only the latest checkpoint is projected (T4) and the export is valid.
        oa = to_openai(p).messages
        assert sum("[contextfold checkpoint]" in str(m.get("content")) for m in oa) == 1
        assert openai_problems(oa) == []
        assert anthropic_problems(to_anthropic(p).messages) == []


def test_checkpoint_payload_is_valid_node():  # T1
    nodes = chain([*turn(0), *turn(1)])
    result = plan(nodes)
    assert isinstance(result, Plan)
    cp = build_checkpoint(result, "## S\ns", summarizer="test")
    assert isinstance(cp, Checkpoint)
    assert cp.first_kept_id == "n2" and cp.tokens_before == result.tokens_before
    assert cp.tokens_after_estimate is not None
    assert cp.tokens_after_estimate < result.tokens_before + 1000
