"""Memoised message estimates give exactly the uncached figures (SPEC E2, E5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.budget import ModelCapacity
from contextfold.core.estimator import MessageCosts, estimate_message, estimate_request
from contextfold.core.projection import project

from .builders import branch_of, chain, turn

CAP = ModelCapacity(model="claude-sonnet-4-5", context_window=200_000, max_output=64_000,
                    family="claude", replays_reasoning=True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500)), min_size=1, max_size=8))
def test_cached_estimates_equal_uncached(turn_specs):  # E2
    msgs = [m for i, (tools, size) in enumerate(turn_specs) for m in turn(i, tools, size)]
    nodes = chain(msgs)
    costs = MessageCosts(CAP)
    projection = project(branch_of(nodes))
    plain = estimate_request(projection, CAP, system="sys")
    cached = estimate_request(projection, CAP, system="sys", costs=costs)
    again = estimate_request(projection, CAP, system="sys", costs=costs)
    assert plain == cached == again
    assert [costs(n) for n in nodes] == [estimate_message(n.message, CAP) for n in nodes]


def test_cached_checkpoint_cost_equals_uncached():  # E2 T3
    from contextfold.core.messages import Checkpoint

    from .builders import extend

    nodes = chain([m for i in range(3) for m in turn(i, tools=1, size=200)])
    cp = Checkpoint(summary="## Goal\n- keep every DOI 10.2307/2321200", first_kept_id="n8",
                    tokens_before=500)
    nodes = extend(nodes, [cp], "c")
    projection = project(branch_of(nodes))
    costs = MessageCosts(CAP)
    assert estimate_request(projection, CAP) == estimate_request(projection, CAP, costs=costs)
    assert costs(nodes[-1]) > 0  # the summary message is counted, once
