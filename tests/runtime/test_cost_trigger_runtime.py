"""The cost trigger in a running conversation (SPEC Q2): with `trigger="cost"` and a model
whose cache does not make carrying cheap, the check after a turn compacts below the
automatic threshold; with the size trigger the same session waits for the threshold."""

from __future__ import annotations

import pytest

from contextfold.core.models.budget import CompactionSettings
from contextfold.core.report.explain import stored_explanation
from contextfold.runtime import Conversation
from tests.runtime.test_runtime_support import capacity, chat_model, fill, runtime_fixtures

store, close_models, fake = runtime_fixtures()


@pytest.fixture
def priced(tmp_path, monkeypatch):
    # An uncached provider at $3 / $15: every turn pays for the whole context again.
    prices = tmp_path / "models.toml"
    prices.write_text('[prices."fake-131k"]\ninput = 3.0\noutput = 15.0\n')
    monkeypatch.setenv("CONTEXTFOLD_MODELS", str(prices))


async def _run(store, fake, trigger: str) -> tuple[Conversation, int]:
    conv = await Conversation.open(store, model=chat_model(fake, "openai", "fake-131k"),
                                   capacity=capacity(131_072),
                                   settings=CompactionSettings(trigger=trigger))
    threshold = conv.budget.auto_threshold
    await fill(conv, 18, size=1500)  # ~4k tokens a turn: ~75k, below the threshold
    return conv, threshold


async def test_q2_cost_trigger_compacts_below_the_threshold(fake, store, priced):
    conv, threshold = await _run(store, fake, "cost")
    checkpoints = [n for n in conv.branch.nodes if n.checkpoint is not None]
    assert checkpoints, "the cost trigger should have compacted before the threshold"
    assert all(c.checkpoint.tokens_before <= threshold for c in checkpoints)
    assert all(c.checkpoint.details["trigger"] == "auto" for c in checkpoints)
    # each was worth it: the request after it is smaller than before
    assert all(c.checkpoint.tokens_after_estimate < c.checkpoint.tokens_before
               for c in checkpoints)
    # Issue 40: each stored with its explanation: the cost trigger's, at an expected saving
    # > 0, the request before and after as measured.
    for c in checkpoints:
        why = stored_explanation(c.checkpoint.details)
        assert why is not None and why.trigger == "cost" and why.unit == "usd"
        assert why.expected_saving is not None and why.expected_saving > 0
        assert (why.tokens_before, why.tokens_after) == (c.checkpoint.tokens_before,
                                                         c.checkpoint.tokens_after_estimate)
    await conv.close()


async def test_q2_size_trigger_waits_for_the_threshold(fake, store, priced):
    conv, threshold = await _run(store, fake, "size")
    assert not [n for n in conv.branch.nodes if n.checkpoint is not None]
    assert conv.gauge().tokens <= threshold
    await conv.close()
