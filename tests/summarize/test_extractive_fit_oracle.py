"""The offline summariser's fit, made linear (issue 26), decides exactly as the oracle (S4,
L3, S9).

Fitting used to re-scan every item of every list on each trim, and `Section.add` re-built
its list once per added item: quadratic in the facts folded (a 20,000-message history of
distinct facts spent most of its compaction there). The old algorithms are kept here as
the oracle, with the fair shares of issue 37 (S9: a list is trimmed only while its kind
holds more than its floor, when any kind does): on random sections and budgets the linear
ones must give the same text and leave the sections in the same state.
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.text.text_estimate import Count
from contextfold.summarize.extractive_facts import norm_item
from contextfold.summarize.extractive_fit import (
    FLOORS,
    OMITTED_NOTE,
    SummaryBudgetTooSmall,
    _shorten_longest,
    _shrunk,
    fit_sections,
    render_sections,
)
from contextfold.summarize.extractive_sections import Section

# --------------------------------------------------------------------------- the oracle


def oracle_fit(ordered: list[Section], budget: int, count: Count) -> str:
    """`fit_sections` as it was before issue 26: every trim re-scans every item."""
    text = render_sections(ordered)
    if count(text) <= budget:
        return text
    cost = {id(s): [count(f"- {s.box}{i}\n") for i in s.items] for s in ordered}
    note = count(f"- (999 {OMITTED_NOTE})\n")
    frame = count("\n".join(s.heading for s in ordered)) + len(ordered)

    def estimate() -> int:
        lists = sum(sum(c) for c in cost.values())
        return frame + lists + note * sum(1 for s in ordered if s.omitted)

    target = budget * estimate() // max(1, count(text))
    floors = {kind: int(share * target) for kind, share in FLOORS.items()}
    while (over := estimate() - target) > 0 and _oracle_trim(ordered, cost, over, count,
                                                              floors):
        pass
    text = render_sections(ordered)
    while (over := count(text) - budget) > 0 and _oracle_trim(ordered, cost, over, count,
                                                              floors):
        text = render_sections(ordered)
    while (over := count(text) - budget) > 0 and _shorten_longest(ordered, over, count):
        text = render_sections(ordered)
    if count(text) > budget:
        for s in ordered:
            s.omitted += len(s.items)
            s.items = []
        text = render_sections(ordered)
    if count(text) > budget:
        raise SummaryBudgetTooSmall("headings do not fit")
    return text


def _oracle_pick(ordered: list[Section], cost: dict[int, list[int]],
                 floors: dict[str, int] | None, note: int, keep_last: bool = True
                 ) -> tuple[Section, int] | None:
    held: dict[str, int] = {}  # a kind's items and its lists' "omitted" notes
    items: dict[str, int] = {}
    for s in ordered:
        held[s.kind] = held.get(s.kind, 0) + sum(cost[id(s)]) + (note if s.omitted else 0)
        items[s.kind] = items.get(s.kind, 0) + len(s.items)
    best: tuple[Section, int] | None = None
    key: tuple[int, int] | None = None
    for s in ordered:
        costs = cost[id(s)]
        free = [i for i, item in enumerate(s.items) if norm_item(item) not in s.pinned]
        if not free or (floors is not None and held[s.kind] <= floors.get(s.kind, 0)):
            continue
        if keep_last and items[s.kind] <= 1:
            continue
        k = (s.rank, -sum(costs[i] for i in free))
        if key is None or k < key:
            best, key = (s, free[0]), k
    return best


def _oracle_trim(ordered: list[Section], cost: dict[int, list[int]], over: int,
                 count: Count, floors: dict[str, int]) -> bool:
    note = count(f"- (999 {OMITTED_NOTE})\n")
    best = (_oracle_pick(ordered, cost, floors, note)
            or _oracle_pick(ordered, cost, None, note)
            or _oracle_pick(ordered, cost, None, note, keep_last=False))
    if best is None:
        return False
    section, i = best
    shorter = _shrunk(section, section.items[i], cost[id(section)][i], over)
    if shorter is not None:
        section.items[i] = shorter
        cost[id(section)][i] = count(f"- {section.box}{shorter}\n")
        return True
    del section.items[i]
    del cost[id(section)][i]
    section.omitted += 1
    return True


def oracle_add(section: Section, items: list[str], pin: bool) -> None:
    """`Section.add` as it was: one pass over the held items per added item."""
    for item in items:
        key = norm_item(item)
        if not key or key in ("(none)", "none"):
            continue
        section.items = [i for i in section.items if norm_item(i) != key]
        section.items.append(item)
        if pin:
            section.pinned.add(key)


# --------------------------------------------------------------------------- inputs

_WORDS = ["alpha", "Beta", "gamma", "delta", "fact-7", "x", "NONE", "(×3)", "設定", "  "]
# Short items (dropped whole), long ones (shortened) and near-duplicates (case, spacing).
_item = st.one_of(
    st.lists(st.sampled_from(_WORDS), min_size=0, max_size=6).map(" ".join),
    st.builds(lambda words, n: " ".join(words * n),
              st.lists(st.sampled_from(_WORDS), min_size=2, max_size=5), st.integers(20, 120)),
    st.sampled_from(["(none)", "Alpha  beta", "alpha beta", "ALPHA beta (×2)", ""]),
)


@st.composite
def _sections(draw: st.DrawFn) -> list[Section]:
    out = []
    for n in range(draw(st.integers(1, 6))):
        items = draw(st.lists(_item, max_size=14))
        pinned = {norm_item(i) for i in items if draw(st.booleans()) and draw(st.booleans())}
        out.append(Section(
            heading=draw(st.sampled_from([f"## S{n}", f"### Sub{n}"])), items=items,
            pinned=pinned, omitted=draw(st.sampled_from([0, 0, 3])),
            box=draw(st.sampled_from(["", "[x] ", "[ ] "])), rank=draw(st.integers(0, 4)),
            kind=draw(st.sampled_from(sorted(FLOORS)))))
    return out


def _state(ordered: list[Section]) -> list[tuple]:
    return [(s.heading, s.items, s.omitted, sorted(s.pinned)) for s in ordered]


def _run(fit, ordered: list[Section], budget: int) -> tuple[str, list[tuple]]:
    try:
        text = fit(ordered, budget, estimate_text)
    except SummaryBudgetTooSmall:
        text = "too small"
    return text, _state(ordered)


# --------------------------------------------------------------------------- the tests


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sections(), st.floats(0.0, 1.1))
def test_s4_l3_the_linear_fit_trims_exactly_as_the_old_one(ordered, share):
    """S4, L3: same text, same items kept, shortened and counted as omitted, same error."""
    full = estimate_text(render_sections(ordered))
    budget = int(full * share)
    new, old = copy.deepcopy(ordered), copy.deepcopy(ordered)
    assert _run(fit_sections, new, budget) == _run(oracle_fit, old, budget)


@settings(max_examples=200, deadline=None)
@given(st.lists(_item, max_size=12), st.lists(_item, max_size=12), st.booleans())
def test_s4_adding_a_batch_is_adding_one_by_one(held, added, pin):
    """S4: a repeated item moves to the end (recent again), empty items are skipped,
    pinned keys recorded: the batched `Section.add` matches adding item by item."""
    new, old = Section("## X", items=list(held)), Section("## X", items=list(held))
    new.add(iter(added), pin=pin)  # a generator, as the callers pass
    oracle_add(old, added, pin)
    assert (new.items, new.pinned) == (old.items, old.pinned)
