"""A session's bill (SPEC Q4): reported usage priced as reported, summarising calls priced at
the summariser's model, and what the full history would have cost. Hand-computed figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from contextfold.core.money.costs import session_cost
from contextfold.core.money.prices import PriceBook
from contextfold.core.values.messages import Checkpoint, Node, Usage
from tests.builders import assistant, user

BOOK = PriceBook.packaged()
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def nodes_at(items: list, seconds: int = 10) -> list[Node]:
    out: list[Node] = []
    parent = None
    for i, payload in enumerate(items):
        node = Node(id=f"n{i}", parent_id=parent, payload=payload,
                    created_at=T0 + timedelta(seconds=seconds * i))
        out.append(node)
        parent = node.id
    return out


def test_q4_reported_usage_is_priced_as_reported() -> None:
    nodes = nodes_at([
        user("q1"),
        assistant("a1", usage=Usage(input=2_000, cache_write=10_000, output=400,
                                    model="claude-sonnet-4-5")),
        user("q2"),
        assistant("a2", usage=Usage(input=500, cache_read=10_000, cache_write=2_400,
                                    output=600, model="claude-sonnet-4-5")),
    ])
    cost = session_cost(nodes, BOOK)
    # a1: 2,000 x 3 + 10,000 x 3.75 + 400 x 15 = 6,000 + 37,500 + 6,000 = 49,500 / 1e6
    # a2: 500 x 3 + 10,000 x 0.3 + 2,400 x 3.75 + 600 x 15 = 1,500 + 3,000 + 9,000 + 9,000
    assert cost.requests.usd == pytest.approx(0.0495 + 0.0225)
    assert cost.model == "claude-sonnet-4-5" and cost.compactions == 0
    assert cost.summarizer.usd == 0 and cost.summarizer.requests == 0
    data = cost.to_json()
    assert data["usd"] == pytest.approx(0.072)
    assert (data["input_tokens"], data["cached_tokens"], data["cache_write_tokens"],
            data["output_tokens"]) == (2_500, 10_000, 12_400, 1_000)


def test_q4_summariser_usage_and_the_full_history() -> None:
    checkpoint = Checkpoint(summary="## Goal\nx", first_kept_id="n2", tokens_before=50_000,
                            tokens_after_estimate=8_000, summarizer="llm:claude-haiku-4-5",
                            details={"summarizer_usage": Usage(input=40_000,
                                                               output=2_000).model_dump()})
    nodes = nodes_at([
        user("q1"),
        assistant("a1", usage=Usage(input=50_000, output=1_000, model="gpt-4o")),
        checkpoint,
        user("q2"),
        assistant("a2", usage=Usage(input=9_000, output=1_000, model="gpt-4o")),
    ])
    cost = session_cost(nodes, BOOK)
    # summariser: haiku 4.5 at $1 in / $5 out: 40,000 x 1 + 2,000 x 5 = $0.05
    assert cost.summarizer.usd == pytest.approx(0.05)
    assert cost.compactions == 1
    # requests (gpt-4o $2.50 / $10, no cache reported): 59,000 x 2.5 + 2,000 x 10 = $0.1675
    assert cost.requests.usd == pytest.approx(0.1675)
    # the full history: a1 as sent (50,000 uncached), a2 = 9,000 + the 42,000 the checkpoint
    # folded = 51,000, of which OpenAI's cache reads 50,000 rounded down to 128s = 49,920 at
    # $1.25: a1 50,000 x 2.5 + 1,000 x 10 = 0.135; a2 1,080 x 2.5 + 49,920 x 1.25 + 1,000 x 10
    # = 0.0027 + 0.0624 + 0.01 = 0.0751
    assert cost.full_history.usd == pytest.approx(0.135 + 0.0751)
    assert cost.full_history.prompt_tokens == 50_000 + 51_000
    # saved: the full history against the requests as sent through the same cache model
    # (a1 0.135, a2 9,000 x 2.5 + 1,000 x 10 = 0.0325: shorter than a1, nothing cached)
    # and the summariser's $0.05: a small session loses money.
    assert cost.as_sent.usd == pytest.approx(0.1675)
    assert cost.saved_usd == pytest.approx(0.2101 - 0.1675 - 0.05)


def test_q4_unknown_model_counts_tokens_and_is_unpriced() -> None:
    nodes = nodes_at([user("q"), assistant("a", usage=Usage(input=100, output=10,
                                                             model="my-local-model"))])
    cost = session_cost(nodes, BOOK)
    assert cost.usd is None and cost.full_history.usd is None and cost.saved_usd is None
    assert cost.to_json()["input_tokens"] == 100 and cost.to_json()["usd"] is None
    # no usage at all: nothing was billed
    empty = session_cost(nodes_at([user("q"), assistant("a")]), BOOK)
    assert empty.usd == 0 and empty.requests.requests == 0


def test_q4_a_cold_cache_costs_the_full_history_its_write_again() -> None:
    # Anthropic, 10 minutes between replies: the 5-minute cache is cold every time, so the
    # full history writes its whole prefix each request (1.25x) instead of reading it.
    usage = Usage(input=0, cache_write=2_000, output=100, model="claude-sonnet-4-5")
    warm = session_cost(nodes_at([user("q"), assistant("a", usage=usage)] * 3, seconds=10),
                        BOOK)
    cold = session_cost(nodes_at([user("q"), assistant("a", usage=usage)] * 3, seconds=600),
                        BOOK)
    assert cold.full_history.cache_write_tokens == 6_000
    assert warm.full_history.cache_write_tokens == 2_000
    assert warm.full_history.cached_tokens == 4_000
    assert cold.full_history.usd > warm.full_history.usd


def test_q4_a_session_never_compacted_saved_nothing() -> None:
    """The reported bill and the modelled one differ (here the provider reported no cache
    reads, the model reads OpenAI's automatic cache): "saved" compares two bills of the same
    model, so that difference is not shown as money saved or lost."""
    nodes = nodes_at([
        user("q1"), assistant("a1", usage=Usage(input=20_000, output=500, model="gpt-4o")),
        user("q2"), assistant("a2", usage=Usage(input=21_000, output=500, model="gpt-4o")),
    ])
    cost = session_cost(nodes, BOOK)
    assert cost.full_history.usd < cost.requests.usd  # the model's cache reads differ
    assert cost.saved_usd == 0
    assert cost.to_json()["saved_usd"] == 0
