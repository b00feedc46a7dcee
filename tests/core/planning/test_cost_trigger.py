"""The cost-aware trigger (SPEC Q2): within the hard bounds, compact when it is cheaper.
Every figure is worked out by hand in the comment beside it (dollars x 1e6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.money.prices import PriceBook, cache_rules
from contextfold.core.planning.cost_trigger import CostInputs, decide_by_cost, turns_until

SONNET = PriceBook.packaged().lookup("claude-sonnet-4-5")  # 3 / 15, read 0.3, write 3.75
GPT4O = PriceBook.packaged().lookup("gpt-4o")  # 2.5 / 10, read 1.25, no write charge
assert SONNET is not None and GPT4O is not None

BASE = CostInputs(context=60_000, after=15_000, fixed=5_000, folded=50_000, summary=3_000,
                  growth=5_000, threshold=85_000)


def test_q2_horizon_is_the_turns_until_the_threshold() -> None:
    assert turns_until(60_000, 85_000, 5_000) == 5
    assert turns_until(90_000, 85_000, 5_000) == 1
    assert turns_until(60_000, 85_000, 0) == 10_000


# Q2: a warm Anthropic cache makes carrying cheap (reads at 0.1x): wait
def test_q2_warm_anthropic_cache_carries() -> None:
    d = decide_by_cost(BASE, SONNET.prices, SONNET.rules)
    # keep: 55k x 0.3 + 5k x 3.75 = 35.25k; turns 2-5 read 60/65/70/75k at 0.3 (81k) and
    # write 5k each at 3.75 (75k): 191.25k
    # compact: call 50k x 3 + 3k x 15 = 195k; then 5k x 0.3 + 10k x 3.75 = 39k; turns 2-5
    # read 15/20/25/30k (27k) and write 75k: 141k; in all 336k
    assert not d.compact and d.horizon == 5
    assert d.carry_usd == pytest.approx(191_250e-6)
    assert d.compact_usd == pytest.approx(336_000e-6)


# Q2: a cold cache costs no penalty: the large context would be written again anyway
def test_q2_cold_cache_compacts() -> None:
    cold = CostInputs(**{**BASE.__dict__, "idle_seconds": 600})
    d = decide_by_cost(cold, SONNET.prices, SONNET.rules)
    # keep: 60k x 3.75 = 225k + 156k = 381k; compact: 195k + 15k x 3.75 + 102k = 353.25k
    assert d.compact and "cold" in d.reason
    assert d.carry_usd == pytest.approx(381_000e-6)
    assert d.compact_usd == pytest.approx(353_250e-6)


# Q2: OpenAI reads its cache at half price: carrying 60k is dear, compact early
def test_q2_openai_half_price_reads_compact_early() -> None:
    d = decide_by_cost(BASE, GPT4O.prices, GPT4O.rules)
    # keep: 55k x 1.25 + 5k x 2.5 + (60+65+70+75)k x 1.25 + 4 x 5k x 2.5 = 468.75k
    # compact: 50k x 2.5 + 3k x 10 + 5k x 1.25 + 10k x 2.5 + 90k x 1.25 + 50k = 348.75k
    assert d.compact and d.carry_usd == pytest.approx(468_750e-6)
    assert d.compact_usd == pytest.approx(348_750e-6)


def test_q2_hard_bounds_and_no_prices() -> None:
    over = CostInputs(**{**BASE.__dict__, "context": 90_000})
    assert decide_by_cost(over, SONNET.prices, SONNET.rules).compact  # A1 stays
    small = CostInputs(**{**BASE.__dict__, "context": 16_000})  # under 0.2 x 85k
    assert not decide_by_cost(small, GPT4O.prices, GPT4O.rules).compact
    bigger = CostInputs(**{**BASE.__dict__, "after": 61_000})
    assert not decide_by_cost(bigger, GPT4O.prices, GPT4O.rules).compact
    assert not decide_by_cost(BASE, None, cache_rules(None, "x")).compact


# Q2: the cost trigger never waits past the threshold and never compacts what does not shrink
@given(st.integers(1_000, 200_000), st.integers(0, 200_000), st.integers(0, 20_000),
       st.integers(0, 20_000), st.floats(0, 50_000), st.integers(10_000, 150_000),
       st.floats(0, 4_000), st.sampled_from(["claude-sonnet-4-5", "gpt-4o", "gemini-2.5-pro"]))
def test_q2_within_the_hard_bounds(context, after, fixed, summary, growth, threshold, idle,
                                   model) -> None:
    price = PriceBook.packaged().lookup(model)
    assert price is not None
    inputs = CostInputs(context=context, after=after, fixed=fixed, folded=context,
                        summary=summary, growth=growth, threshold=threshold,
                        idle_seconds=idle)
    d = decide_by_cost(inputs, price.prices, price.rules)
    if context > threshold:
        assert d.compact
    elif after >= context:
        assert not d.compact
    if d.compact and context <= threshold:
        assert d.compact_usd < d.carry_usd


def test_q2_a_session_that_hardly_grows_is_forecast_a_bounded_horizon() -> None:
    from contextfold.core.planning.cost_trigger import MAX_HORIZON

    assert turns_until(60_000, 85_000, 1e-300) == MAX_HORIZON
    assert turns_until(60_000, 85_000, 5e-324) == MAX_HORIZON  # the quotient would be inf
    tiny = CostInputs(**{**BASE.__dict__, "growth": 1e-300})
    d = decide_by_cost(tiny, GPT4O.prices, GPT4O.rules)
    assert d.horizon == MAX_HORIZON and d.compact  # carrying 60k for ever is dear


# Q2: the forecast steps by request, not by user turn: a tool loop of five rounds a turn reads
# the prefix back five times, so the same growth per turn costs more to carry
def test_q2_a_tool_loop_is_forecast_per_request() -> None:
    loop = CostInputs(**{**BASE.__dict__, "growth": 1_000})  # 5k a turn in 5 requests
    d = decide_by_cost(loop, SONNET.prices, SONNET.rules)
    # horizon 25k / 1k = 25 requests
    # keep: 59k x 0.3 + 1k x 3.75 = 21.45k; requests 2-25 read 24 x 60k + 1k x 24 x 23 / 2
    # = 1,716k at 0.3 (514.8k) and write 24 x 1k at 3.75 (90k): 626.25k
    # compact: 195k; then 5k x 0.3 + 10k x 3.75 = 39k; reads 24 x 15k + 276k = 636k at 0.3
    # (190.8k) and writes 90k: 514.8k in all
    assert d.horizon == 25 and d.compact  # per turn (BASE) it waited: see the warm test
    assert d.carry_usd == pytest.approx(626_250e-6)
    assert d.compact_usd == pytest.approx(514_800e-6)


def test_q2_session_rhythm_counts_requests_and_turns() -> None:
    from contextfold.core.planning.cost_trigger import session_rhythm

    # one user turn, three model requests (two tool rounds and the answer)
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    r = session_rhythm(roles, [600, 100, 2_000, 100, 2_000, 200])
    assert (r.turns, r.requests, r.tokens) == (1, 3, 5_000)
    assert r.per_request == pytest.approx(5_000 / 3) and r.requests_per_turn == 3
    with pytest.raises(ValueError, match="2 roles but 1 token counts"):
        session_rhythm(["user", "assistant"], [1])


# Q2: splitting a turn's growth over k requests never forecasts a cheaper carry (each
# request reads the whole prefix back), apart from the first request, which writes only
# what one request adds rather than a whole turn's growth
@given(st.integers(40_000, 84_000), st.floats(200, 20_000), st.integers(1, 8),
       st.sampled_from(["claude-sonnet-4-5", "gpt-4.1", "gemini-2.5-pro"]))
def test_q2_per_request_carry_is_never_below_per_turn(context, growth, k, model) -> None:
    from contextfold.core.planning.cost_trigger import MAX_HORIZON, _rates

    price = PriceBook.packaged().lookup(model)
    assert price is not None
    turn = CostInputs(**{**BASE.__dict__, "context": context, "growth": growth})
    loop = CostInputs(**{**turn.__dict__, "growth": growth / k})
    by_turn = decide_by_cost(turn, price.prices, price.rules)
    by_request = decide_by_cost(loop, price.prices, price.rules)
    if by_request.horizon < MAX_HORIZON and by_turn.horizon:
        assert by_request.horizon >= by_turn.horizon
        _, read, write, _ = _rates(price.prices, price.rules)
        first = growth * (1 - 1 / k) * (write - read)  # the first request's smaller write
        assert by_request.carry_usd >= by_turn.carry_usd - first - 1e-12


# Q2 with Q3: a summariser that is the session's own model reads the context from the cache,
# so the compaction's call costs reads, not the folded part sent uncached
def test_q2_a_summariser_reading_the_session_prefix_costs_reads() -> None:
    warm = CostInputs(**{**BASE.__dict__, "summary_reads_cache": True})
    d = decide_by_cost(warm, SONNET.prices, SONNET.rules)
    # call: 55k read x 0.3 + 5k written x 3.75 + 3k out x 15 = 80.25k (was 195k uncached);
    # then 141k as in the warm test: 221.25k against carrying's 191.25k, still wait
    assert d.compact_usd == pytest.approx(221_250e-6) and not d.compact
    cold = CostInputs(**{**warm.__dict__, "idle_seconds": 600})
    # cold: the whole 60k is written (225k) + 45k out = 270k; + 15k x 3.75 + 102k: 428.25k
    assert decide_by_cost(cold, SONNET.prices, SONNET.rules).compact_usd == \
        pytest.approx(428_250e-6)


# Q2 in the sizing policy: at the same context size and a warm Anthropic cache, a session of
# tool loops (five requests a turn, each reading the prefix back) is compacted early, while
# a session of one request a turn carries its context up to the threshold
def test_q2_sizer_forecasts_a_tool_loop_per_request() -> None:
    from contextfold.core.models.budget import ModelCapacity, derive_budget
    from contextfold.core.view.projection import project
    from contextfold.runtime.sizing import Sizer
    from tests.builders import branch_of, chain, turn

    cap = ModelCapacity(model="claude-sonnet-4-5", context_window=200_000, max_output=16_384)

    def sized(turns: int, tools: int, size: int) -> tuple[int, bool]:
        nodes = chain([m for i in range(turns) for m in turn(i, tools=tools, size=size)])
        projection = project(branch_of(nodes))
        sizer = Sizer(cap, derive_budget(cap), None, ())
        assert sizer.budget.trigger == "cost"  # the default (docs/peers.md)
        return sizer.estimate(projection).tokens, sizer.auto_due(projection)

    chat_tokens, chat_due = sized(10, 0, 6_000)   # ~87k: one request per turn
    loop_tokens, loop_due = sized(16, 4, 1_200)   # ~90k: five requests per turn
    assert abs(chat_tokens - loop_tokens) < 5_000
    assert loop_due and not chat_due
