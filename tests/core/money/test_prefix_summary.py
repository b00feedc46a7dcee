"""SPEC Q3: what a same-model summarising request would read from the prompt cache, worked
out by hand from each provider's cache rule in the comment beside each figure."""

from __future__ import annotations

import pytest

from contextfold.core.money.prefix_summary import prefix_summary_costs
from contextfold.core.money.prices import Block, PriceBook

BOOK = PriceBook.packaged()


def _requests() -> list[tuple[list[Block], int, float]]:
    """Three requests of a growing session (fixed part marked, the end marked), then, after
    a compaction before the third, a request from the checkpoint."""
    fixed = Block("fixed", 2_000, breakpoint=True)
    return [([fixed, Block("m1", 500, breakpoint=True)], 100, 0.0),
            ([fixed, Block("m1", 500), Block("m2", 300, breakpoint=True)], 100, 10.0),
            ([fixed, Block("checkpoint:c1", 400, breakpoint=True),
              Block("m3", 200, breakpoint=True)], 100, 20.0)]


def test_q3_summary_request_reads_the_previous_request_from_the_cache() -> None:
    anthropic = BOOK.lookup("claude-sonnet-4-5")
    [first, second] = prefix_summary_costs(_requests(), [0, 2], [150, 100], anthropic,
                                           "claude-sonnet-4-5")
    # before the first request there is no prefix to start from
    assert first is None
    assert second is not None
    # Anthropic: the second request wrote its 2,800-token prefix; the summarising request
    # (that prefix, the mark moved to the 100-token instruction) reads it and writes the 100
    assert (second.cached_tokens, second.cache_write_tokens, second.input_tokens) == \
        (2_800, 100, 0)
    assert second.cache_read_share == pytest.approx(2_800 / 2_900)
    # its input only: 2,800 x 0.30 + 100 x 3.75 per million
    assert second.usd == pytest.approx((2_800 * 0.30 + 100 * 3.75) / 1e6)
    openai = BOOK.lookup("gpt-4.1")
    [_, o] = prefix_summary_costs(_requests(), [0, 2], [150, 100], openai, "gpt-4.1")
    # OpenAI: the shared 2,800-token start counted down to 128-token steps (21 x 128 = 2,688)
    assert o is not None and (o.cached_tokens, o.input_tokens) == (2_688, 212)
    assert o.cache_read_share == pytest.approx(2_688 / 2_900)


def test_q3_a_summary_request_not_after_the_prefix_reads_nothing_modelled() -> None:
    # a summariser that would not send the session's prefix (a preflight compaction): None
    assert prefix_summary_costs(_requests(), [2], [None], BOOK.lookup("gpt-4.1"),
                                "gpt-4.1") == [None]


def test_q3_summary_request_goes_out_with_the_previous_reply() -> None:
    requests = _requests()
    late = [*requests[:2], (requests[2][0], 100, 10.0 + 301)]  # the next turn, after 5 min
    [cost] = prefix_summary_costs(late, [2], [100], BOOK.lookup("claude-sonnet-4-5"),
                                  "claude-sonnet-4-5")
    # the compaction ends the previous turn: the cache is still warm then
    assert cost is not None and cost.cached_tokens == 2_800


def test_q3_a_compaction_after_the_last_request_starts_from_it() -> None:
    [cost] = prefix_summary_costs(_requests(), [3], [100], BOOK.lookup("claude-sonnet-4-5"),
                                  "claude-sonnet-4-5")
    # the third request left fixed + checkpoint + m3 (2,600 tokens) in the cache
    assert cost is not None and (cost.cached_tokens, cost.cache_write_tokens) == (2_600, 100)
