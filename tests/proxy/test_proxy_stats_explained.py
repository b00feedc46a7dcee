"""The proxy's stats explain each compaction as it takes effect (issue 40, SPEC Q2, Q4):
the explanation the checkpoint stored and its realised saving from the replies' reported
usage, by the core's one computation (`core.money.costs.SavingMeter`)."""

from __future__ import annotations

import pytest

from contextfold.core.money.costs import Fold, PricedRequest, realised_savings
from contextfold.core.money.prices import PriceBook
from contextfold.core.report.explain import CompactionExplanation
from contextfold.core.values.messages import Checkpoint, Node, Usage
from contextfold.proxy.stats import SessionStats
from tests.builders import assistant

MODEL = "claude-sonnet-4-5"


def checkpoint(node_id: str, before: int, after: int) -> Node:
    explained = CompactionExplanation("cost", before, after, "usd", 0.5, 1.0, 0.5, 40, 6)
    return Node(id=node_id, payload=Checkpoint(
        summary="## Goal\nx", first_kept_id=None, tokens_before=before,
        tokens_after_estimate=after, details={"explanation": explained.stored()}))


def reply(prompt: int) -> object:
    return assistant("ok", usage=Usage(input=200, cache_read=prompt - 200, output=300,
                                       model=MODEL))


def test_q2_proxy_stats_explain_each_compaction_with_its_realised_saving() -> None:
    stats = SessionStats()
    prompts_before = [50_000 + 500 * i for i in range(4)]
    prompts_after = [12_000 + 500 * i for i in range(30)]
    for prompt in prompts_before:
        stats.observe([b"head", b"m"], prompt)
        stats.bill(reply(prompt))
    cp = checkpoint("cp1", 52_000, 12_000)
    for prompt in prompts_after:
        stats.observe([b"head", b"m"], prompt, cp)
        stats.bill(reply(prompt))
    (shown,) = stats.to_json()["compactions"]
    assert shown["checkpoint_id"] == "cp1" and shown["trigger"] == "cost"
    assert shown["expected_saving"] == 0.5 and shown["break_even"] == 6
    # The same figure as the core's batch computation over the same requests.
    price = PriceBook.packaged().lookup(MODEL)
    requests = [PricedRequest(price, MODEL, p, 300, 0.0) for p in
                prompts_before + prompts_after]
    (expected,) = realised_savings(requests, [Fold(4, 40_000)])
    assert shown["realised"]["requests"] == 30 and expected.usd is not None
    assert shown["realised"]["usd"] == pytest.approx(expected.usd, abs=1e-6)
    assert shown["realised"]["usd"] > 0
    # Kept across a restart of the proxy (the stats are stored in the session's metadata).
    again = SessionStats.from_json(stats.to_json())
    assert again.to_json()["compactions"] == stats.to_json()["compactions"]


def test_q2_a_checkpoint_met_on_the_first_request_is_not_a_compaction_seen() -> None:
    """A session this process meets already compacted: nothing to compare with."""
    stats = SessionStats()
    stats.observe([b"head"], 12_000, checkpoint("cp0", 60_000, 12_000))
    stats.bill(reply(12_000))
    assert stats.to_json()["compactions"] == []
