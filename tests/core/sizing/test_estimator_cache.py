"""Memoised message estimates give exactly the uncached figures (SPEC E2, E5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity
from contextfold.core.sizing.estimator import MessageCosts, estimate_message, estimate_request
from contextfold.core.view.projection import project

from ...builders import branch_of, chain, turn

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
    from contextfold.core.values.messages import Checkpoint

    from ...builders import extend

    nodes = chain([m for i in range(3) for m in turn(i, tools=1, size=200)])
    cp = Checkpoint(summary="## Goal\n- keep every DOI 10.2307/2321200", first_kept_id="n8",
                    tokens_before=500)
    nodes = extend(nodes, [cp], "c")
    projection = project(branch_of(nodes))
    costs = MessageCosts(CAP)
    assert estimate_request(projection, CAP) == estimate_request(projection, CAP, costs=costs)
    assert costs(nodes[-1]) > 0  # the summary message is counted, once


def test_text_estimates_memoised_equal_uncached_and_bounded(monkeypatch):  # E2, L5, issue 40
    """A recall block or pin note is in every request until the next checkpoint (SPEC Q5):
    its count is memoised by text, equal to the uncached one, and the memo stays bounded."""
    from contextfold.core.sizing import estimator
    from contextfold.core.sizing.estimator import MESSAGE_OVERHEAD
    from contextfold.core.text.text_estimate import estimate_text

    monkeypatch.setattr(estimator, "TEXTS_HELD", 4)
    counted: list[str] = []
    costs = MessageCosts(CAP)
    real = costs._count
    costs._count = lambda text: counted.append(text) or real(text)  # type: ignore[assignment]
    texts = [f"[contextfold recall] node n{i}: the DOI 10.2307/{i} " * (i + 1)
             for i in range(7)]
    first = [costs.text_tokens(t) for t in texts]
    assert first == [MESSAGE_OVERHEAD + estimate_text(t, "claude") for t in texts]
    assert costs.text_tokens(texts[-1]) == first[-1]
    assert counted.count(texts[-1]) == 1  # the second request's count is a look-up
    assert len(costs._texts) <= 4
    assert costs.text_tokens("") == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300), st.booleans()), min_size=1,
                max_size=6),
       st.lists(st.tuples(st.integers(0, 12), st.integers(1, 400)), max_size=4))
def test_recall_blocks_added_to_an_estimate_equal_the_whole_estimate(turn_specs, specs):
    """SPEC L5 (issue 40): a request's estimate with its recall blocks, worked out from its
    estimate without them, is the figure of estimating it whole, with or without a
    reported baseline and wherever the blocks go (a missing message's block included)."""
    from dataclasses import replace

    from contextfold.core.sizing.estimator import with_recalled
    from contextfold.core.values.messages import Usage
    from contextfold.core.view.projection import RecallBlock

    msgs = []
    for i, (tools, size, reported) in enumerate(turn_specs):
        *head, answer = turn(i, tools, size)
        if reported:  # a reply with usage: the estimate counts from it (E1)
            answer = answer.model_copy(update={"usage": Usage(input=3, cache_read=900 + i,
                                                              output=40)})
        msgs += [*head, answer]
    nodes = chain(msgs)
    projection = project(branch_of(nodes))
    ids = [n.id for n in nodes] + ["gone"]
    blocks = tuple(RecallBlock(text="[contextfold recall] " + "z " * size, node_ids=("n0",),
                               tokens=size, before_id=ids[at % len(ids)])
                   for at, size in specs)
    out = replace(projection, recalled=blocks)
    costs = MessageCosts(CAP)
    base = estimate_request(projection, CAP, system="sys", costs=costs)
    assert with_recalled(base, out, costs) == estimate_request(out, CAP, system="sys",
                                                               costs=costs)
