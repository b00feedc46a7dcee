"""Property tests: the projection invariants hold with pins and masking in any order (N1 N2
V1 V2): tool pairs intact and both providers' validity oracles pass, durable nodes never
change, the active pins are exactly the fold of the pin events on the branch, and an
O(tail) load projects the same as the full branch."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.plan import NoOp
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import Node, PinEvent
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.masking import MaskedNode
from contextfold.core.view.pins import pin_event
from contextfold.core.view.projection import project
from tests.builders import branch_of, chain, extend
from tests.core.view.test_masking import tool_turn

CAP = ModelCapacity(model="m", context_window=12_000, max_output=2_000)

_turn = st.tuples(st.just("turn"), st.integers(1_000, 12_000))
steps = st.lists(
    st.one_of(
        _turn, _turn, _turn,
        st.tuples(st.just("pin"), st.text(min_size=1, max_size=80).filter(str.strip)),
        st.tuples(st.just("unpin"), st.integers(0, 5)),
        st.tuples(st.just("compact"), st.sampled_from(["auto", "manual", "preflight"])),
    ),
    min_size=3, max_size=40)


def expected_pins(branch: Branch) -> list[str]:
    active: dict[str, str] = {}
    for node in branch.nodes:
        event = node.pin_event
        if event is None:
            continue
        if event.action == "pin":
            active.setdefault(event.pin_id, event.text)
        else:
            active.pop(event.pin_id, None)
    return list(active.values())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.sampled_from(["off", "auto", "always"]))
def test_projection_invariants_with_pins_and_masking(script, masking):  # N1 N2 V1 V2 K1 T2
    budget = derive_budget(CAP, CompactionSettings(masking=masking, tail_tokens=3_000))
    nodes: list[Node] = chain(tool_turn(0, 3_000), prefix="s")
    originals = {n.id: n for n in nodes}
    pin_ids: list[str] = []
    for k, (action, arg) in enumerate(script):
        parent = nodes[-1].id
        if action == "turn":
            nodes = extend(nodes, tool_turn(k, arg), f"k{k}_")
            # After a completed turn the runtime runs the auto check (A1).
            result = plan_compaction(branch_of(nodes), budget, "auto", capacity=CAP)
            if not isinstance(result, NoOp):
                cp = build_checkpoint(result, "## Goal\nsummary", summarizer="t")
                nodes.append(Node(id=f"auto{k}", parent_id=nodes[-1].id, payload=cp))
        elif action == "pin":
            pin_ids.append(f"pin{k}")
            nodes.append(Node(id=f"pin{k}", parent_id=parent, payload=pin_event(f"pin{k}", arg)))
        elif action == "unpin" and pin_ids:
            target = pin_ids[arg % len(pin_ids)]
            nodes.append(Node(id=f"unpin{k}", parent_id=parent,
                              payload=PinEvent(action="unpin", pin_id=target)))
        elif action == "compact":
            result = plan_compaction(branch_of(nodes), budget, arg, capacity=CAP)
            if isinstance(result, NoOp):
                continue
            cp = build_checkpoint(result, "## Goal\nsummary", summarizer="t")
            nodes.append(Node(id=f"cp{k}", parent_id=parent, payload=cp))
        originals.update((n.id, n) for n in nodes if n.id not in originals)

        full = branch_of(nodes)
        projection = project(full)
        # Durable nodes never change: the chain still holds exactly what was written.
        assert all(originals[n.id] is n for n in nodes)
        for node in projection.messages:
            if isinstance(node, MaskedNode):
                event("a projection with masked tool output")
                durable = originals[node.id]
                assert [p.call_id for p in node.message.tool_results] == \
                    [p.call_id for p in durable.message.tool_results]
        assert [p.text for p in projection.pins] == expected_pins(full)
        assert openai_problems(to_openai(projection).messages) == []
        assert anthropic_problems(to_anthropic(projection).messages) == []
        cp_node = full.latest_checkpoint
        if cp_node is not None:
            stop = cp_node.checkpoint.first_kept_id or cp_node.id
            tail = build_branch(nodes, nodes[-1].id, stop_at=stop)
            assert isinstance(tail, Branch)
            assert project(tail) == projection
