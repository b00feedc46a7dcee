"""A branch grown at its leaf (`Branch.grown`) derives what a branch read afresh derives
(issue 26): the projection (T2-T4, N1, V1, K6) and a provider's compaction (Y7), over
random runs of turns, pins, unpins, checkpoints and provider compactions, with the shorter
branch's values handed on only when the new nodes are all messages."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.plan import NoOp
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.values.messages import (
    Message,
    Node,
    PinEvent,
    ProviderCompactionPart,
    TextPart,
)
from contextfold.core.values.tree import GROWN_FROM, Branch
from contextfold.core.view.pins import pin_event
from contextfold.core.view.projection import project, provider_compaction_index
from tests.builders import branch_of, chain, user
from tests.core.view.test_masking import tool_turn

CAP = ModelCapacity(model="m", context_window=12_000, max_output=2_000)

steps = st.lists(st.one_of(
    st.tuples(st.just("turn"), st.integers(500, 6_000)),
    st.tuples(st.just("turn"), st.integers(500, 6_000)),
    st.tuples(st.just("pin"), st.integers(0, 5)),
    st.tuples(st.just("unpin"), st.integers(0, 5)),
    st.tuples(st.just("compact"), st.sampled_from(["auto", "manual"])),
    st.tuples(st.just("provider"), st.sampled_from(["openai", "anthropic"])),
), min_size=1, max_size=25)


def _fresh(nodes: list[Node]) -> Branch:
    return Branch(nodes=tuple(nodes))  # nothing handed on: derived from every node


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.booleans())  # derive_each: each shorter branch's values known, handed on
def test_a_grown_branch_derives_what_a_fresh_one_does(script, derive_each) -> None:
    budget = derive_budget(CAP, CompactionSettings(masking="auto", tail_tokens=3_000))
    nodes: list[Node] = chain([user("start")], prefix="s")
    grown = Branch(nodes=tuple(nodes))
    for k, (action, arg) in enumerate(script):
        parent = nodes[-1].id
        if action == "turn":
            new = chain(tool_turn(k, arg), prefix=f"k{k}_", parent=parent)
        elif action == "pin":
            new = [Node(id=f"pin{k}", parent_id=parent, payload=pin_event(f"p{arg}", "keep"))]
        elif action == "unpin":
            new = [Node(id=f"unpin{k}", parent_id=parent,
                        payload=PinEvent(action="unpin", pin_id=f"p{arg}"))]
        elif action == "provider":
            msg = Message(role="assistant", parts=(
                ProviderCompactionPart(provider=arg, data={"type": "compaction", "k": k}),
                TextPart(text="compacted by the provider")))
            new = [Node(id=f"pc{k}", parent_id=parent, payload=msg)]
        else:
            result = plan_compaction(branch_of(nodes), budget, arg, capacity=CAP)
            if isinstance(result, NoOp):
                continue
            cp = build_checkpoint(result, "## Goal\nsummary", summarizer="t")
            new = [Node(id=f"cp{k}", parent_id=parent, payload=cp)]
        grown = grown.grown(new)
        nodes += new
        if not derive_each and k < len(script) - 1:
            continue  # nothing derived on the way: the last branch derives it all
        fresh = _fresh(nodes)
        assert grown.nodes == fresh.nodes
        assert project(grown) == project(fresh)
        assert provider_compaction_index(grown) == provider_compaction_index(fresh)
        assert grown.latest_checkpoint_index == fresh.latest_checkpoint_index


def test_grown_hands_on_only_over_messages() -> None:
    base = Branch(nodes=tuple(chain([user("a")], prefix="a")))
    project(base)
    after_message = base.grown(chain([user("b")], prefix="b", parent="a0"))
    # what was derived is handed on (the projection), never the shorter branch itself
    assert after_message.__dict__[GROWN_FROM] == {"_projection": (1, project(base))}
    twice = after_message.grown(chain([user("c")], prefix="c", parent="b0"))
    assert twice.__dict__[GROWN_FROM] == {"_projection": (1, project(base))}  # not derived
    assert project(twice) == project(Branch(nodes=twice.nodes))
    assert after_message.revision == base.revision + 1
    assert project(after_message).messages == after_message.nodes
    after_pin = base.grown([Node(id="p", parent_id="a0", payload=pin_event("p", "x"))])
    assert GROWN_FROM not in after_pin.__dict__
    assert project(after_pin).pins and project(after_pin) == project(
        Branch(nodes=after_pin.nodes))
