"""Branch building, damage detection and stability (SPEC T, D1-D2, A2)."""

from __future__ import annotations

from contextfold.core.values.messages import ApprovalPart, Checkpoint, Message, Node
from contextfold.core.values.tree import (
    Branch,
    DamagedBranch,
    InvalidRecord,
    build_branch,
    check_stability,
)

from ...builders import assistant, branch_of, chain, tool_call, tool_result, turn, user


def test_branch_is_ancestor_chain_of_leaf_only():  # T5 (branches are chains, siblings excluded)
    nodes = chain([user("a"), assistant("b"), user("c"), assistant("d")])
    sibling = Node(id="s", parent_id="n1", payload=user("other branch"))
    result = build_branch([*nodes, sibling], "n3")
    assert isinstance(result, Branch)
    assert [n.id for n in result.nodes] == ["n0", "n1", "n2", "n3"]
    other = build_branch([*nodes, sibling], "s")
    assert [n.id for n in other.nodes] == ["n0", "n1", "s"]


def test_missing_parent_gives_read_only_damaged_view():  # D1 D2
    nodes = chain([user("a"), assistant("b"), user("c"), assistant("d")])
    without_n1 = [n for n in nodes if n.id != "n1"]
    result = build_branch(without_n1, "n3")
    assert isinstance(result, DamagedBranch)
    assert result.read_only
    assert [n.id for n in result.readable] == ["n2", "n3"]
    assert result.problems[0].kind == "missing_parent"
    assert "n1" in result.problems[0].detail


def test_cycle_is_detected():  # D1
    a = Node(id="a", parent_id="b", payload=user("x"))
    b = Node(id="b", parent_id="a", payload=assistant("y"))
    result = build_branch([a, b], "b")
    assert isinstance(result, DamagedBranch)
    assert result.problems[0].kind == "cycle"


def test_invalid_record_is_reported_with_its_error():  # D1
    nodes = chain([user("a"), assistant("b")])
    bad = InvalidRecord(id="n0", parent_id=None, error="parts.0: unknown part type 'video'")
    result = build_branch({"n0": bad, "n1": nodes[1]}, "n1")
    assert isinstance(result, DamagedBranch)
    assert result.problems[0].kind == "invalid_node"
    assert "video" in result.problems[0].detail


def test_checkpoint_pointing_off_branch_is_damage():  # D1
    cp = Checkpoint(summary="s", first_kept_id="elsewhere", tokens_before=10)
    nodes = chain([user("a"), assistant("b"), cp])
    result = build_branch(nodes, "n2")
    assert isinstance(result, DamagedBranch)
    assert result.problems[0].kind == "bad_checkpoint"


def test_partial_load_stops_at_first_kept():  # D3-friendly O(tail) loading
    cp = Checkpoint(summary="s", first_kept_id="n2", tokens_before=10)
    nodes = chain([user("a"), assistant("b"), user("c"), assistant("d"), cp, user("e")])
    loaded = [n for n in nodes if n.id not in ("n0", "n1")]
    result = build_branch(loaded, "n5", stop_at="n2", revision=7)
    assert isinstance(result, Branch)
    assert not result.complete
    assert result.revision == 7
    assert [n.id for n in result.nodes] == ["n2", "n3", "n4", "n5"]


def test_missing_leaf_is_reported():  # D1
    result = build_branch(chain([user("a")]), "nope")
    assert isinstance(result, DamagedBranch)
    assert result.problems[0].kind == "missing_leaf"


def test_open_tool_call_is_unstable():  # A2
    branch = branch_of(chain([user("q"), tool_call("c1")]))
    st = check_stability(branch)
    assert not st.stable and "c1" in st.reasons[0]


def test_answered_tool_call_is_stable():  # A2
    branch = branch_of(chain([user("q"), tool_call("c1"), tool_result("c1"), assistant("done")]))
    assert check_stability(branch).stable


def test_pending_approval_then_decision():  # A2
    pending = Message(role="user", parts=(ApprovalPart(call_id="c1", state="pending"),))
    approved = Message(role="user", parts=(ApprovalPart(call_id="c1", state="approved"),))
    msgs = [user("q"), tool_call("c1"), pending]
    assert not check_stability(branch_of(chain(msgs))).stable
    done = branch_of(chain([*msgs, approved, tool_result("c1"), assistant("ok")]))
    # The approval message is a user-role message; the turn restarts there, which is fine.
    assert check_stability(done).stable


def test_streaming_message_is_unstable():  # A2
    branch = branch_of(chain([user("q"), assistant("partial", status="streaming")]))
    assert not check_stability(branch).stable


def test_aborted_reply_calls_are_void_not_open():  # A2 (decision in docs/architecture.md)
    branch = branch_of(chain([user("q"), tool_call("c1", status="aborted")]))
    assert check_stability(branch).stable


def test_only_current_turn_matters_for_stability():  # A2
    msgs = [*turn(0, tools=1), user("next"), assistant("fine")]
    assert check_stability(branch_of(chain(msgs))).stable
