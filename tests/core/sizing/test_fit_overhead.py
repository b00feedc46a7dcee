"""The budget beside a fixed overhead (`core.sizing.fit.budget_after_overhead`): the one rule
replay sizes a recorded agent's session with (its system prompt and tools ride on every
request), held here on numbers; replay only calls it (tests/replay)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.sizing.fit import (
    OverheadTooLargeError,
    budget_after_overhead,
    leaves_room,
)


def budget_of(window: int):
    return derive_budget(ModelCapacity(model="m", context_window=window,
                                       max_output=max(1, window // 4)))


@given(window=st.integers(4_000, 400_000), overhead=st.integers(-10, 0))
def test_no_overhead_leaves_the_budget_as_it_is(window: int, overhead: int) -> None:  # B2
    budget = budget_of(window)
    assert budget_after_overhead(budget, overhead) is budget


@given(window=st.integers(4_000, 400_000), share=st.floats(0.0, 1.0))
def test_the_messages_get_what_the_overhead_leaves(window: int, share: float) -> None:  # B2 K6
    budget = budget_of(window)
    overhead = max(1, int(budget.safe_input_limit * share))
    if not leaves_room(budget, overhead):
        with pytest.raises(OverheadTooLargeError) as caught:
            budget_after_overhead(budget, overhead)
        assert caught.value.overhead == overhead
        assert caught.value.safe_input_limit == budget.safe_input_limit
        return
    after = budget_after_overhead(budget, overhead)
    safe = budget.safe_input_limit - overhead
    assert after.safe_input_limit == safe
    # The automatic threshold keeps its share of the safe limit.
    assert after.auto_threshold == int(budget.auto_threshold * safe / budget.safe_input_limit)
    assert after.auto_threshold <= after.safe_input_limit
    # After a compaction, summary + tail leave room for the next turns (never a negative
    # tail, never more than the budget gave before).
    assert 0 <= after.tail_budget <= budget.tail_budget
    assert after.summary_budget + after.tail_budget < after.safe_input_limit
    # Everything else is the budget's own.
    same = {"safe_input_limit", "auto_threshold", "tail_budget"}
    assert {k: v for k, v in after.model_dump().items() if k not in same} == \
        {k: v for k, v in budget.model_dump().items() if k not in same}


def test_an_overhead_that_leaves_no_room_is_refused_with_the_numbers() -> None:  # P5
    budget = budget_of(32_000)
    overhead = budget.safe_input_limit - budget.summary_budget  # exactly no room
    with pytest.raises(OverheadTooLargeError) as caught:
        budget_after_overhead(budget, overhead)
    assert isinstance(caught.value, ValueError)
    text = str(caught.value)
    assert f"{overhead:,}" in text and f"{budget.safe_input_limit:,}" in text
    assert "--context-window" in text and "--overhead" in text
    assert budget_after_overhead(budget, overhead - 1).safe_input_limit == \
        budget.summary_budget + 1
