"""Keep boundary (SPEC K1-K5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.planning.boundary import choose_boundary, latest_turn_boundary
from contextfold.core.values.messages import Message, Node

from ...builders import assistant, chain, tool_call, tool_result, turn, user


def length_cost(node: Node) -> int:
    msg = node.message
    assert msg is not None
    return len(msg.text) + sum(len(r.output) for r in msg.tool_results) + 5


def test_keeps_whole_turns_that_fit():  # K1 K2
    nodes = chain([*turn(0), *turn(1), *turn(2)])
    per_turn = sum(length_cost(n) for n in nodes[:2])
    b = choose_boundary(nodes, per_turn * 2, length_cost)
    assert b.first_kept_id == "n2"
    assert [n.id for n in b.kept] == ["n2", "n3", "n4", "n5"]
    assert [n.id for n in b.newly_old] == ["n0", "n1"]  # K5


def test_boundary_never_inside_a_tool_turn():  # K1
    nodes = chain([*turn(0, tools=2), *turn(1, tools=2)])
    for budget in range(0, 400, 7):
        b = choose_boundary(nodes, budget, length_cost)
        assert b.first_kept_id is None or b.kept[0].is_user_message


def test_oversized_last_turn_keeps_nothing_raw():  # K3
    nodes = chain([*turn(0), *turn(1, size=5000)])
    b = choose_boundary(nodes, 200, length_cost)
    assert b.first_kept_id is None
    assert b.kept == ()
    assert len(b.newly_old) == len(nodes)


def test_oversized_middle_turn_boundary_moves_after_it():  # K3
    nodes = chain([*turn(0), *turn(1, size=5000), *turn(2)])
    b = choose_boundary(nodes, 200, length_cost)
    assert b.first_kept_id == "n4"
    assert all(n.id not in {"n2", "n3"} for n in b.kept)


def test_latest_turn_boundary_keeps_only_latest_turn():  # M2
    nodes = chain([*turn(0), *turn(1)])
    b = latest_turn_boundary(nodes, length_cost)
    assert b.first_kept_id == "n2"


@st.composite
def histories(draw) -> list[Message]:
    msgs: list[Message] = []
    n_turns = draw(st.integers(1, 8))
    for t in range(n_turns):
        msgs.append(user("u" * draw(st.integers(0, 60))))
        for r in range(draw(st.integers(0, 3))):
            calls = [f"c{t}_{r}_{k}" for k in range(draw(st.integers(1, 3)))]
            for c in calls:  # parallel calls, then their results
                msgs.append(tool_call(c))
            for c in calls:
                msgs.append(tool_result(c, "r" * draw(st.integers(0, 200))))
        msgs.append(assistant("a" * draw(st.integers(0, 80))))
    return msgs


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 1500))
def test_boundary_properties(msgs, budget):  # K1 K2 K3 K5
    nodes = chain(msgs)
    b = choose_boundary(nodes, budget, length_cost)
    # K1: a user-turn start, or nothing kept.
    assert b.first_kept_id is None or b.kept[0].is_user_message
    # Partition: newly old + kept is the whole region, in order.
    assert [n.id for n in (*b.newly_old, *b.kept)] == [n.id for n in nodes]
    # K2: what is kept fits, and one more whole turn would not.
    assert b.kept_tokens <= budget
    starts = [i for i, n in enumerate(nodes) if n.is_user_message]
    cut = len(b.newly_old)
    earlier = [s for s in starts if s < cut]
    if earlier:
        assert sum(length_cost(n) for n in nodes[earlier[-1]:]) > budget
    # Never splits a tool pair: every kept result has its call kept too.
    kept_calls = {c.id for n in b.kept for c in n.message.tool_calls}
    for n in b.kept:
        for r in n.message.tool_results:
            assert r.call_id in kept_calls
