"""Every compaction explained, and the cost trigger never compacts at a predicted loss
(issue 40, SPEC Q2; the realised saving by the one definition of `saved`, SPEC Q4).

The forecast (`core.planning.cost_trigger.forecast`), the explanation (`core.report.explain`) and
the realised saving (`core.money.costs.realised_savings`) are pure: checked here by hand-made
figures and properties; the compaction path stores the explanation with the checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.money.costs import Fold, PricedRequest, Saving, realised_savings, session_cost
from contextfold.core.money.prices import PriceBook, cache_rules
from contextfold.core.planning.cost_trigger import (
    CostInputs,
    decide_by_cost,
    forecast,
    owned_requests,
)
from contextfold.core.report.explain import CompactionExplanation, stored_explanation, trigger_kind
from contextfold.core.values.messages import Checkpoint, Node, Usage
from tests.builders import assistant, user

BOOK = PriceBook.packaged()
SONNET = BOOK.lookup("claude-sonnet-4-5")
GPT = BOOK.lookup("gpt-4o")
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def inputs(context: int = 40_000, after: int = 25_000, growth: float = 500.0,
           threshold: int = 155_000, **more) -> CostInputs:
    base = dict(context=context, after=after, fixed=2_000, folded=context - after,
                summary=3_000, growth=growth, threshold=threshold)
    return CostInputs(**{**base, **more})


def test_q2_a_compaction_owns_the_requests_until_the_context_grows_back() -> None:
    """The forecast covers the requests until this rule would compact again (the context
    regrown to its size now), or the threshold, whichever is sooner (issue 40: counting
    up to the threshold alone promised savings the next compaction took away)."""
    assert owned_requests(40_000, 25_000, 155_000, 500) == 30  # regrows 15k at 500/request
    assert owned_requests(150_000, 25_000, 155_000, 500) == 10  # the threshold first
    assert owned_requests(160_000, 25_000, 155_000, 500) == 260  # forced: back to threshold
    assert owned_requests(40_000, 25_000, 155_000, 0) == 10_000  # a session that never grows


def test_q2_a_small_gap_waits_a_large_one_compacts() -> None:
    """Sonnet's cache: a rewrite costs 12.5 reads, so folding 4k tokens at 400 a request
    (owned for 10 requests) never pays; folding 30k (owned for 75) does, with its
    break-even request inside the horizon."""
    small = decide_by_cost(inputs(context=36_000, after=32_000, growth=400), SONNET.prices,
                           SONNET.rules)
    assert not small.compact and small.forecast is not None and small.forecast.saving <= 0
    large = decide_by_cost(inputs(context=56_000, after=26_000, growth=400), SONNET.prices,
                           SONNET.rules)
    assert large.compact and large.forecast is not None
    assert large.forecast.saving > 0 and large.forecast.break_even is not None
    assert large.forecast.break_even <= large.forecast.horizon == 75


@settings(max_examples=300, deadline=None)
@given(context=st.integers(1_000, 200_000), after=st.integers(0, 200_000),
       fixed=st.integers(0, 20_000), summary=st.integers(1, 20_000),
       growth=st.floats(0, 20_000), threshold=st.integers(10_000, 200_000),
       idle=st.floats(0, 4_000), reads_cache=st.booleans(), free=st.booleans(),
       model=st.sampled_from(["claude-sonnet-4-5", "gpt-4o", "claude-opus-4-6"]))
def test_q2_the_cost_trigger_never_compacts_at_a_predicted_loss(
        context, after, fixed, summary, growth, threshold, idle, reads_cache, free,
        model) -> None:
    """Below the hard bounds, "compact" only with its own expected saving > 0; and the
    break-even request lies within the horizon exactly when the saving is positive (the
    difference of carrying and compacting grows linearly, request by request)."""
    price = BOOK.lookup(model)
    given_inputs = CostInputs(context=context, after=min(after, context * 2), fixed=fixed,
                              folded=max(0, context - after), summary=summary, growth=growth,
                              threshold=threshold, idle_seconds=idle,
                              summary_reads_cache=reads_cache, summary_free=free)
    d = decide_by_cost(given_inputs, price.prices, price.rules)
    if context <= threshold and d.compact:
        assert d.forecast is not None and d.forecast.saving > 0
    f = forecast(given_inputs, price.prices, price.rules)
    eps = 1e-9 * max(1.0, abs(f.carry))  # the closed forms' rounding
    if f.saving > eps:
        assert f.break_even is not None and f.break_even <= f.horizon
    if f.break_even is not None and f.break_even < f.horizon and f.saving < -eps:
        pytest.fail("a compaction that broke even before its horizon ended at a loss")


def test_q2_an_unpriced_model_is_forecast_in_tokens() -> None:
    f = forecast(inputs(), None, cache_rules(None, "local-model"))
    # Every token counted once: carrying reads 40k, compacting 25k, 30 requests, the call
    # reads what it folds and writes the summary.
    assert f.unit == "tokens" and f.horizon == 30
    assert f.saving == pytest.approx(15_000 * 30 - (15_000 + 3_000))


def priced(n: int, prompt: int, start: int = 0, step: int = 30, grow: int = 0
           ) -> list[PricedRequest]:
    return [PricedRequest(SONNET, "claude-sonnet-4-5", prompt + i * grow, 500,
                          float(start + i * step)) for i in range(n)]


def test_q2_realised_saving_a_loss_is_negative_never_zero() -> None:
    """Folding 4k tokens out of a 31k prompt for two requests: the first pays the cache
    rewrite of 27k (3.75 against 0.30 a million), two requests read 4k less; a loss."""
    before = priced(5, 30_000, grow=200)  # the last one: 30,800 tokens
    after = priced(2, 27_000, start=150, grow=200)  # 31,000 - 4,000 folded
    (saving,) = realised_savings(before + after, [Fold(5, 4_000)])
    assert saving.requests == 2 and saving.tokens == 8_000
    assert saving.usd is not None and saving.usd < 0
    explained = CompactionExplanation("cost", 31_000, 27_000).with_realised(saving)
    assert "realised −$" in explained.line()


def test_q2_realised_saving_pays_over_many_requests_and_none_before_any() -> None:
    before = priced(5, 90_000, grow=500)
    after = priced(60, 22_500, start=150, grow=500)  # 92,500 - 70,000 folded
    paid, waiting = realised_savings(before + after, [Fold(5, 70_000), Fold(65, 10_000)])
    assert paid.usd is not None and paid.usd > 0 and paid.requests == 60
    assert waiting == Saving(None, 0, 0)  # no request after it yet


def test_q4_one_checkpoint_realised_saving_is_the_sessions_saved() -> None:
    """The one definition of `saved`: with one checkpoint, its realised saving is the
    session's `saved_usd` (the requests before it cost the same either way)."""
    nodes = []
    parent = None
    items = [user("q1"), assistant("a1", usage=Usage(input=200, cache_write=60_000,
                                                     output=500, model="claude-sonnet-4-5")),
             Checkpoint(summary="## Goal\nx", first_kept_id=None, tokens_before=61_000,
                        tokens_after_estimate=12_000, summarizer="extractive")]
    for i in range(20):
        items += [user(f"q{i + 2}"),
                  assistant(f"a{i + 2}", usage=Usage(input=300, cache_read=12_000 + 800 * i,
                                                     output=400, model="claude-sonnet-4-5"))]
    for i, payload in enumerate(items):
        node = Node(id=f"n{i}", parent_id=parent, payload=payload,
                    created_at=T0 + timedelta(seconds=20 * i))
        nodes.append(node)
        parent = node.id
    cost = session_cost(nodes, BOOK)
    assert set(cost.savings) == {"n2"}
    assert cost.savings["n2"].usd == pytest.approx(cost.saved_usd)
    assert cost.savings["n2"].requests == 20
    assert cost.to_json()["checkpoints"]["n2"]["requests"] == 20


def test_q2_explanation_round_trips_and_reads() -> None:
    f = forecast(inputs(context=56_000, after=26_000, growth=400), SONNET.prices, SONNET.rules)
    e = CompactionExplanation.of("cost", 56_000, 26_000, f)
    stored = stored_explanation({"explanation": e.stored()})
    assert stored == e
    again = CompactionExplanation.from_json(
        e.with_realised(Saving(0.25, 30_000, 12)).to_json())
    assert again is not None and again.realised_saving == pytest.approx(0.25)
    line = again.line()
    assert line.startswith("cost: 56,000 → 26,000 tokens, expected +$")
    assert f"break-even at request {f.break_even}" in line and "realised +$0.25" in line
    assert stored_explanation({}) is None  # an older checkpoint has none
    assert trigger_kind("auto", over_threshold=True) == "threshold"
    assert trigger_kind("auto", over_threshold=False) == "cost"
    assert trigger_kind("preflight", over_threshold=False) == "overflow"


def test_q2_a_checkpoint_that_made_requests_larger_realised_a_loss() -> None:
    """A manual compaction may grow the request (its checkpoint outweighs what it folded):
    its realised saving is negative in tokens and dollars, never shown as 0."""
    before = priced(3, 5_000, grow=300)  # the last one: 5,600 tokens
    after = priced(4, 6_900, start=90, grow=300)  # 5,900 + 1,000 the checkpoint added
    (saving,) = realised_savings(before + after, [Fold(3, -1_000)])
    assert saving.tokens == -4_000 and saving.usd is not None and saving.usd < 0
    explained = CompactionExplanation("manual", 5_900, 6_900, "tokens").with_realised(saving)
    assert explained.realised_saving == -4_000
    assert "realised −4,000 tokens" in explained.line()
