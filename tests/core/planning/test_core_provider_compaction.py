"""A provider's own compaction in the core (SPEC Y7): taken up as a checkpoint as it is, never
summarised, carried on by every later checkpoint, counted, never exported to another provider."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import NoOp, Plan
from contextfold.core.planning.planner import (
    adopt_provider_compaction,
    build_checkpoint,
    plan_compaction,
)
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.sizing.estimator import MessageCosts, estimate_request
from contextfold.core.values.messages import Message, Node, ProviderCompactionPart, TextPart
from contextfold.core.view.projection import fixed_part, project

from ...builders import branch_of, chain, extend, tool_call, tool_result, turn

CAP = ModelCapacity(model="small", context_window=8_192, max_output=2_048)
SECRET = "EncOpaque::" + "ab" * 400  # stands for the provider's encrypted content


def compaction(provider: str = "anthropic", text: str = "") -> Message:
    data = ({"type": "compaction", "content": "provider summary", "encrypted_content": SECRET}
            if provider == "anthropic" else
            {"type": "compaction", "id": "cmp_1", "encrypted_content": SECRET})
    parts = (ProviderCompactionPart(provider=provider, data=data),)
    if text:
        parts += (TextPart(text=text),)
    return Message(role="assistant", parts=parts)


def adopted(nodes: list[Node], then: list[Message] | None = None) -> list[Node]:
    """`nodes` with the checkpoint that takes up their provider compaction, then `then`
    (the next turn, as the mirror stores it after taking it up)."""
    found = adopt_provider_compaction(branch_of(nodes), derive_budget(CAP))
    assert found is not None
    _plan, cp = found
    return extend(extend(nodes, [cp], "p"), then or turn(99, size=50), "q")


def test_the_planner_never_summarises_a_provider_compaction_not_taken_up_y7():
    nodes = chain([*turn(0, size=2_000), compaction(), *turn(1, size=2_000), *turn(2, 2_000)])
    result = plan_compaction(branch_of(nodes), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(result, NoOp) and result.code == "provider_compaction"


def test_taken_up_the_projection_starts_from_it_and_only_what_follows_is_compacted_y7():
    before = turn(0, size=3_000)
    after = [m for i in range(1, 6) for m in turn(i, tools=1, size=1_500)]
    nodes = adopted(chain([*before, compaction(text="continuing"), *after]))
    projection = project(branch_of(nodes))
    cp = projection.summary
    assert cp is not None and cp.summary == "" and cp.provider == "anthropic"
    # Anthropic: its block opens the request; what it compacted is not projected again.
    assert cp.provider_base[0].parts[0].data["encrypted_content"] == SECRET
    assert [n.message for n in projection.messages][:len(after)] == after
    # Counted (Y2): the opaque block weighs what its JSON weighs.
    costs = MessageCosts(CAP)
    with_base = estimate_request(projection, CAP, costs=costs).tokens
    assert estimate_request(fixed_part(projection), CAP, costs=costs).tokens > len(SECRET) // 8
    assert with_base > sum(costs.measure(m) for m in after)
    # contextfold's own compaction: only what follows it, and the base carried on.
    p = plan_compaction(branch_of(nodes), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(p, Plan)
    folded = {n.id for n in p.newly_old}
    assert folded and all(n.message in after for n in p.newly_old)
    assert not any(isinstance(part, ProviderCompactionPart) for n in p.newly_old
                   for part in n.message.parts)
    own = build_checkpoint(p, "## Goal\n- read", summarizer="test")
    assert own.provider_base == cp.provider_base
    nodes = extend(nodes, [own], "c")
    again = project(branch_of(nodes))
    assert again.summary is not None and again.summary.provider_base == cp.provider_base
    # Never shown to another provider: exports leave the opaque content out.
    for export in (to_openai, to_anthropic):
        assert SECRET not in json.dumps(export(again).messages)


def test_a_carried_base_leaves_out_a_call_whose_result_was_folded_k1_y7():
    base = Message(role="assistant", parts=(
        compaction().parts[0], *tool_call("call_x").parts))
    rest = [tool_result("call_x", "r" * 4_000), *[m for i in range(1, 5)
                                                  for m in turn(i, size=1_500)]]
    nodes = adopted(chain([*turn(0), base, *rest]))
    p = plan_compaction(branch_of(nodes), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(p, Plan) and p.newly_old[0].message == rest[0]  # the result is folded
    own = build_checkpoint(p, "## Goal\n- g", summarizer="test")
    assert not own.provider_base[0].tool_calls  # so the call is not sent without it
    assert isinstance(own.provider_base[0].parts[0], ProviderCompactionPart)


def test_openai_keeps_the_items_its_compacted_window_kept_before_the_item_y7():
    window = [Message(role="user", parts=(TextPart(text="the task, kept by OpenAI"),)),
              compaction("openai")]
    nodes = adopted(chain([*window, *turn(1)]))
    cp = project(branch_of(nodes)).summary
    assert cp is not None and cp.provider == "openai"
    assert [m.parts for m in cp.provider_base] == [m.parts for m in window]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 4), st.integers(2, 6), st.sampled_from(["openai", "anthropic"]))
def test_no_plan_ever_folds_the_provider_compaction_or_what_it_compacted_y7(before, after,
                                                                           provider):
    msgs = [m for i in range(before) for m in turn(i, tools=1, size=800)]
    tail = [m for i in range(after) for m in turn(10 + i, tools=1, size=800)]
    nodes = adopted(chain([*msgs, compaction(provider), *tail]))
    for trigger in ("manual", "auto"):
        p = plan_compaction(branch_of(nodes), derive_budget(CAP), trigger, capacity=CAP)
        if isinstance(p, NoOp):
            continue
        assert all(n.message in tail for n in p.newly_old)
        cp = build_checkpoint(p, "## Goal\n- g", summarizer="test")
        assert any(isinstance(part, ProviderCompactionPart) for m in cp.provider_base
                   for part in m.parts)
