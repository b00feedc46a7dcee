"""The context breakdown (core/report/breakdown.py): its parts add up to the gauge's number (E9)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity
from contextfold.core.report.breakdown import CATEGORIES, context_breakdown, scale_parts
from contextfold.core.sizing.estimator import MessageCosts
from contextfold.core.view.projection import project
from tests.builders import assistant, branch_of, chain, tool_call, tool_result, user

parts_st = st.fixed_dictionaries({c: st.integers(0, 200_000) for c in CATEGORIES})


@given(parts_st, st.integers(-10, 400_000))
def test_e9_scaled_parts_add_up_exactly(parts: dict[str, int], total: int) -> None:
    # E9: whatever the estimates, the parts shown add up to the measured total.
    scaled = scale_parts(parts, total)
    assert set(scaled) == set(parts)
    assert sum(scaled.values()) == max(0, total)
    assert all(v >= 0 for v in scaled.values())
    if sum(parts.values()) == max(0, total):
        assert scaled == parts  # nothing to scale: the estimates themselves


@given(parts_st, st.integers(1, 400_000))
def test_e9_scaling_keeps_the_order_of_the_parts(parts: dict[str, int], total: int) -> None:
    scaled = scale_parts(parts, total)
    for a in CATEGORIES:
        for b in CATEGORIES:
            if parts[a] > parts[b]:
                assert scaled[a] >= scaled[b]


def test_e9_an_estimated_breakdown_is_the_estimate_itself() -> None:
    from contextfold.core.sizing.estimator import estimate_request

    nodes = chain([user("find refs/library.bib"), tool_call("c1"),
                   tool_result("c1", "refs/library.bib: 40 entries " * 20),
                   assistant("found it"), user("thanks")])
    branch = branch_of(nodes)
    capacity = ModelCapacity(model="offline/echo", context_window=8192, max_output=1024)
    costs = MessageCosts(capacity)
    projection = project(branch)
    estimate = estimate_request(projection, capacity, system="be brief", costs=costs)
    out = context_breakdown(projection, costs, system="be brief", tools=None,
                            used=estimate.tokens, limit=6000)
    assert not out.scaled and out.used == estimate.tokens
    assert out.parts["system"] > 0 and out.parts["messages"] > 0
    assert out.parts["tool_results"] > out.parts["messages"] / 2  # the long result
    assert out.parts["tools"] == out.parts["checkpoint"] == out.parts["pins"] == 0
    assert out.free == 6000 - estimate.tokens


@given(st.integers(0, 5_000), st.integers(0, 3_000), st.integers(0, 40_000),
       st.integers(0, 40_000), st.integers(-5_000, 200_000))
def test_e9_fixed_parts_are_never_scaled(system_words: int, tool_words: int,
                                         user_words: int, result_words: int,
                                         measured_extra: int) -> None:
    """The system prompt, tool definitions and pins are sent as estimated: a measured total
    larger or smaller than the estimate changes the history's parts, never those (issue 41:
    an imported session's usage made a request without tools read "tools 15,436"), unless
    the total is smaller than the fixed parts alone. A request without tools shows 0."""
    from contextfold.core.report.breakdown import FIXED, estimated_parts

    nodes = chain([user("question " * (user_words // 10 + 1)), tool_call("c1"),
                   tool_result("c1", "row " * (result_words // 10 + 1)), assistant("ok")])
    projection = project(branch_of(nodes))
    costs = MessageCosts(ModelCapacity(model="offline/echo", context_window=8192,
                                       max_output=1024))
    system = "rule " * system_words or None
    tools = [{"type": "function", "function": {"name": "t", "description": "d " * tool_words,
                                               "parameters": {"type": "object"}}}] \
        if tool_words else None
    estimated = estimated_parts(projection, costs, system=system, tools=tools)
    used = max(0, sum(estimated.values()) + measured_extra)
    out = context_breakdown(projection, costs, system=system, tools=tools, used=used,
                            limit=500_000)
    assert sum(out.parts.values()) == used
    if used >= sum(estimated[k] for k in FIXED):
        assert all(out.parts[k] == estimated[k] for k in FIXED)
    if tools is None:
        assert out.parts["tools"] == 0


@given(st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=12),
       st.integers(0, 50_000), st.integers(1, 60_000))
def test_next_compaction_is_when_the_pace_reaches_the_threshold(roles: list[str], used: int,
                                                                threshold: int) -> None:
    """The next automatic compaction: the tokens left below the threshold, and at the
    projection's pace (tokens a model request adds) enough requests to cover them."""
    from contextfold.core.report.breakdown import next_compaction

    items = []
    for i, role in enumerate(roles):
        items.append(user(f"question {i} " * 20) if role == "user" else
                     assistant(f"answer {i} " * 30) if role == "assistant" else
                     tool_result(f"c{i}", f"row {i} " * 40))
    projection = project(branch_of(chain(items)))
    costs = MessageCosts(ModelCapacity(model="offline/echo", context_window=8192,
                                       max_output=1024))
    nxt = next_compaction(projection, costs, used=used, threshold=threshold)
    assert nxt.threshold == threshold and nxt.tokens_to_go == max(0, threshold - used)
    if nxt.tokens_to_go == 0:
        assert nxt.requests == nxt.turns == 0
    elif "assistant" not in roles:
        assert nxt.requests is None  # no model request yet: no pace to go by
    else:
        grown = sum(costs(n) for n in projection.messages) / roles.count("assistant")
        assert nxt.requests is not None and nxt.requests * max(1, round(grown)) >= \
            nxt.tokens_to_go
        # A turn is requests-per-turn requests: as many turns as that makes of them.
        assert (nxt.turns is None) == ("user" not in roles)
        if nxt.turns is not None:
            per_turn = roles.count("assistant") / roles.count("user")
            assert nxt.turns >= 1 and abs(nxt.turns * per_turn - nxt.requests) <= \
                per_turn + 1 + nxt.requests * 0.5
