"""The one sizing policy (SPEC P1-P3, P5): fit, compact, or refuse only what cannot fit.

The pure decision (`core.sizing.fit`) is tested on numbers; the driver every face runs
(`runtime.fitting.fit_request`) over the one compaction path is tested on random sessions
in the in-memory store with the offline summariser, the fastest real engine there is.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from contextfold._sync import run_now
from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.sizing.fit import (
    Blocked,
    Compact,
    Fits,
    after_compaction,
    decide,
    fit_budget,
    frame_reserve,
    smallest_checkpoint,
)
from contextfold.core.values.messages import Message, Node, PinEvent, text_message
from contextfold.core.view.projection import Projection
from contextfold.runtime.errors import DraftTooLargeError, RequestTooLargeError
from contextfold.runtime.fitting import SessionFit, fit_request
from contextfold.runtime.sizing import Sizer
from contextfold.runtime.summarizers import guarded
from contextfold.store.memory import MemoryStore
from contextfold.summarize.extractive import smallest_summary_tokens
from tests.builders import assistant, tool_call, tool_result, user

SMALLEST = smallest_checkpoint(smallest_summary_tokens())

# ------------------------------------------------------------------ the pure decision


def test_decide_fits_compacts_or_blocks_by_the_best_case():  # P1 P2 P3 P5
    assert decide(900, 1000, 300, SMALLEST) == Fits(900)
    # Over the limit, but the history folded into the smallest checkpoint would fit.
    assert isinstance(decide(5000, 1000 + SMALLEST, 1000, SMALLEST), Compact)
    blocked = decide(5000, 1000 + SMALLEST, 1001, SMALLEST)
    assert isinstance(blocked, Blocked)
    # "Shorten by N" is exact for the best case: N fewer tokens and it is no longer blocked.
    assert blocked.overflow_tokens == 1
    assert isinstance(decide(5000 - 1, 1000 + SMALLEST, 1001 - 1, SMALLEST), Compact)


def test_a_history_smaller_than_a_checkpoint_is_its_own_best_case():  # P3 P5
    # Folding 50 tokens of history into a checkpoint cannot make a request smaller.
    blocked = decide(1050, 1020, 1000, SMALLEST)
    assert isinstance(blocked, Blocked) and blocked.best_case == 1050
    assert blocked.overflow_tokens == 30


def test_after_compaction_refuses_with_the_smallest_request_tried():  # P3 P5
    final = after_compaction(1200, 1000, tried=1100)
    assert isinstance(final, Blocked) and final.overflow_tokens == 100
    assert after_compaction(990, 1000, tried=990) == Fits(990)


@given(safe=st.integers(2_000, 200_000), fixed=st.integers(0, 200_000))
def test_fit_budget_gives_way_tail_first_then_summary(safe, fixed):  # P2 P5
    capacity = ModelCapacity(model="m", context_window=safe * 2, max_output=safe)
    budget = derive_budget(capacity)
    smallest = smallest_summary_tokens()
    fitted = fit_budget(budget, fixed, smallest)
    room = budget.safe_input_limit - fixed - frame_reserve()
    assert fitted.summary_budget >= min(budget.summary_budget, smallest)
    assert fitted.tail_budget <= budget.tail_budget
    assert fitted.summary_budget <= budget.summary_budget
    assert fitted.ledger_budget <= max(1, fitted.summary_budget)
    if room >= budget.summary_budget + budget.tail_budget:
        assert fitted == budget  # room for both: nothing changes
    if fitted.summary_budget < budget.summary_budget:
        assert fitted.tail_budget == 0  # the summary shrinks only once no tail is left
    if room >= smallest:
        # Checkpoint (summary budget + frame) and tail together fit beside the fixed part.
        assert fitted.summary_budget + fitted.tail_budget + frame_reserve() + fixed <= \
            budget.safe_input_limit


# ------------------------------------------------------------------ the driver, on sessions

CAPACITIES = [ModelCapacity(model=f"m{w}", context_window=w, max_output=w // 4, family="gpt")
              for w in (8_192, 16_000, 32_000)]


def _words(n: int, seed: int) -> str:
    vocab = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
             "kappa", "lambda", "doi:10.1000/x", "K7QF2ZJ3", "ページ", "def f(x):", "{}")
    return " ".join(vocab[(seed * 7 + i * 13) % len(vocab)] for i in range(n))


def _text(tokens: int, seed: int) -> str:
    """About `tokens` tokens (by the gpt estimate) of `_words`."""
    per_word = estimate_text(_words(1_000, seed), "gpt") / 1_000
    return _words(max(1, int(tokens / per_word)), seed)


def _chain(turns: list[tuple[int, list[int]]], pins: list[int]) -> list[Node]:
    """A linear session: per turn a user message, tool rounds with results of the given
    sizes, a reply; pins (pin events) after the turns their positions name."""
    messages: list[Message | PinEvent] = []
    for t, (user_words, rounds) in enumerate(turns):
        messages.append(user(_words(user_words, t)))
        for r, size in enumerate(rounds):
            messages += [tool_call(f"c{t}_{r}", "read", {"n": r}),
                         tool_result(f"c{t}_{r}", _words(size, t + r))]
        messages.append(assistant(_words(20, t)))
        if t in pins:
            messages.append(PinEvent(action="pin", pin_id=f"pin{t}", text=_words(40, t)))
    nodes: list[Node] = []
    for i, payload in enumerate(messages):
        node_id = payload.pin_id if isinstance(payload, PinEvent) else f"n{i}"
        nodes.append(Node(id=node_id, parent_id=nodes[-1].id if nodes else None,
                          payload=payload))
    return nodes


def _session(capacity: ModelCapacity, nodes: list[Node], system: str,
             tools: tuple[dict, ...]) -> SessionFit:
    store = MemoryStore()
    info = run_now(store.import_tree(nodes, nodes[-1].id))
    sizer = Sizer(capacity, derive_budget(capacity), system or None, tools)
    return SessionFit(store, info.id, sizer, guarded(None),
                      run_now(store.load_branch(info.id)))


def _tools(count: int) -> tuple[dict, ...]:
    return tuple({"name": f"tool_{i}", "description": _words(30, i),
                  "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}
                 for i in range(count))


sessions = st.lists(st.tuples(st.integers(1, 1_500),
                              st.lists(st.integers(1, 3_000), max_size=3)),
                    min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.sampled_from(CAPACITIES), turns=sessions,
       pins=st.lists(st.integers(0, 24), max_size=2, unique=True),
       system_words=st.integers(0, 1_500), tool_count=st.integers(0, 4),
       share=st.floats(0.0, 1.0))
def test_a_draft_that_fits_beside_the_smallest_checkpoint_is_never_refused(
        capacity, turns, pins, system_words, tool_count, share):  # P1 P2 P3 P5 N1
    fit = _session(capacity, _chain(turns, pins), _words(system_words, 1), _tools(tool_count))
    safe = fit.sizer.budget.safe_input_limit
    empty = Projection(None, (), pins=fit.projection().pins)
    room = safe - fit.sizer.floor(empty) - fit.sizer.smallest_checkpoint
    assume(room > 50)
    draft = text_message("user", _words(max(1, int(room * share / 2)), 3))
    # The draft fits beside the system prompt, tools, pins and the smallest checkpoint.
    assume(fit.sizer.floor(fit.projection(), (draft,)) + fit.sizer.smallest_checkpoint <= safe)
    outcomes = run_now(fit_request(fit, (draft,), draft=draft))
    assert fit.sizer.estimate(fit.projection(), (draft,)).tokens <= safe
    assert all(o.status != "stale" for o in outcomes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.sampled_from(CAPACITIES), turns=sessions, extra=st.integers(1, 4_000))
def test_a_draft_that_cannot_fit_is_refused_by_exactly_its_overflow(capacity, turns, extra):
    # P3 P5: refused before any compaction, by how much its best case is over the limit.
    fit = _session(capacity, _chain(turns, []), "", ())
    safe = fit.sizer.budget.safe_input_limit

    def best_case(draft: Message) -> int:
        floor = fit.sizer.floor(fit.projection(), (draft,))
        history = fit.sizer.estimate(fit.projection(), (draft,)).tokens - floor
        return floor + min(history, fit.sizer.smallest_checkpoint)

    words = 1
    draft = text_message("user", _words(words, 5))
    while best_case(draft) <= safe + extra:
        words = words * 2
        draft = text_message("user", _words(words, 5))
    before = fit.branch
    with pytest.raises(DraftTooLargeError) as refused:
        run_now(fit_request(fit, (draft,), draft=draft))
    assert fit.branch is before and fit.outcomes == []  # nothing compacted, nothing stored
    best = best_case(draft)
    assert refused.value.overflow_tokens == best - safe
    assert refused.value.draft is draft


def test_a_draft_bigger_than_the_tail_and_summary_room_fits_by_a_tighter_summary():  # P5
    # 16k window: safe limit 12,000, summary budget 3,200. A 1.4k system prompt and a draft
    # of ~8.5k leave less than the full summary budget: before P5 the preflight refused it
    # without trying (floor + a full summary > safe); now the summary is fitted to the room.
    capacity = CAPACITIES[1]
    turns = [(600, [2_500]) for _ in range(12)]
    fit = _session(capacity, _chain(turns, []), _text(1_400, 2), ())
    draft = text_message("user", _text(8_400, 9))
    tokens = fit.sizer.floor(fit.projection(), (draft,))
    budget = fit.sizer.budget
    assert tokens + budget.summary_budget > budget.safe_input_limit
    assert tokens + fit.sizer.smallest_checkpoint <= budget.safe_input_limit
    outcomes = run_now(fit_request(fit, (draft,), draft=draft))
    assert [o.status for o in outcomes] == ["compacted"]
    assert outcomes[0].kept_messages == 0  # no raw tail is left: the summary gave way too
    assert fit.sizer.estimate(fit.projection(), (draft,)).tokens <= budget.safe_input_limit


def test_a_mid_turn_request_is_refused_with_the_request_error():  # P3
    capacity = CAPACITIES[0]
    fit = _session(capacity, _chain([(10, [])], []), _words(9_000, 4), ())
    with pytest.raises(RequestTooLargeError) as refused:
        run_now(fit_request(fit))
    assert not isinstance(refused.value, DraftTooLargeError)
    assert "even after compaction" in str(refused.value)
    assert refused.value.overflow_tokens > 0


def test_the_driver_runs_under_asyncio_too():  # P1
    fit = _session(CAPACITIES[0], _chain([(1_500, [3_000]) for _ in range(4)], []), "", ())
    draft = text_message("user", "and now?")
    outcomes = asyncio.run(fit_request(fit, (draft,), draft=draft))
    assert outcomes and outcomes[0].status == "compacted"


def test_y13_a_request_that_fits_on_a_branch_compacted_meanwhile_is_sent():  # P1 P3
    """issue 38 (the long fleet soak): a request is sized on the branch its process read;
    another process commits a checkpoint before it compacts; its own compaction then finds
    nothing to do — the stored branch fits. The request is sent on that branch, never
    refused "even after compaction"."""
    capacity = CAPACITIES[0]
    fit = _session(capacity, _chain([(700, [])] * 12, []), "", ())
    draft = text_message("user", _words(40, 99))
    assert isinstance(fit.sizer.decide(fit.projection(), (draft,)), Compact)
    # Another process (its own view of the same store) compacts first.
    other = SessionFit(fit.store, fit.session_id, fit.sizer, guarded(None),
                       run_now(fit.store.load_branch(fit.session_id)))
    assert run_now(other.compact("preflight", (draft,))).status == "compacted"
    outcomes = run_now(fit_request(fit, (draft,), draft=draft))  # not DraftTooLargeError
    assert [o.status for o in outcomes] == ["noop"]
    assert fit.branch.latest_checkpoint_index is not None  # sized on the stored branch
    assert fit.sizer.estimate(fit.projection(), (draft,)).tokens <= \
        fit.sizer.budget.safe_input_limit
