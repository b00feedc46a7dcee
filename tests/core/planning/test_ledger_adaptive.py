"""The adaptive identifier ledger (issue 11): it takes what it needs up to a cap that scales
with the window, the summary gets the rest; constraints are evicted last; every eviction is
recorded in the checkpoint (SPEC L3)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.ledger import evicted_since, ledger_tokens, merge_ledger
from contextfold.core.planning.plan import Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.text.identifiers import USER_CONSTRAINT, USER_WRITTEN
from contextfold.core.values.messages import Ledger, LedgerEntry
from contextfold.summarize.extractive import summarize_extractive, summary_token_budget

from ...builders import assistant, branch_of, chain, extend, user


def cap(window: int) -> int:
    return derive_budget(ModelCapacity(model="m", context_window=window,
                                       max_output=16_384)).ledger_budget


def test_ledger_cap_scales_with_the_window_and_leaves_the_summary_room():
    budgets = [derive_budget(ModelCapacity(model="m", context_window=w, max_output=16_384))
               for w in (16_000, 32_000, 128_000)]
    # S9 (issue 37): at most half the summary budget, so the text keeps the other half.
    assert [b.ledger_budget for b in budgets] == [int(b.summary_budget * 0.5) for b in budgets]
    assert budgets[0].ledger_budget < budgets[1].ledger_budget < budgets[2].ledger_budget
    assert all(b.summary_budget - b.ledger_budget >= 0.5 * b.summary_budget - 1
               for b in budgets)


def _entry(i: int, kind: str = "doi", priority: int = 0) -> LedgerEntry:
    value = f"10.{1000 + i}/x{i}" if kind == "doi" else f"data/file_{i}.csv"
    return LedgerEntry(kind=kind, value=value, priority=priority)


def test_constraints_are_evicted_last_then_user_written_then_tool_seen():
    constraints = [_entry(i, "path", USER_CONSTRAINT) for i in range(5)]
    typed = [_entry(100 + i, "path", USER_WRITTEN) for i in range(5)]
    seen = [_entry(200 + i, "doi") for i in range(30)]  # DOIs: the kind evicted last
    full = Ledger(entries=(*constraints, *typed, *seen))
    # Room for exactly these entries and the line saying that others were evicted.
    room = ledger_tokens(Ledger(entries=(*constraints, *typed), evicted=tuple(seen)))
    merged = merge_ledger(Ledger(), full.entries, room)
    kept = {e.value for e in merged.entries}
    assert {e.value for e in constraints + typed} <= kept
    assert ledger_tokens(merged) <= room
    # Tighter: the user's ordinary paths go before any constraint does.
    tight = ledger_tokens(Ledger(entries=tuple(constraints), evicted=tuple(seen)))
    merged = merge_ledger(Ledger(), full.entries, tight)
    kept = {e.value for e in merged.entries}
    assert {e.value for e in constraints} <= kept
    assert not kept & {e.value for e in seen}
    # Never silent: every entry is either kept or recorded as evicted.
    assert kept | {e.value for e in merged.evicted} == {e.value for e in full.entries}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.sampled_from(["doi", "path", "url"]),
                          st.integers(0, 2)), min_size=1, max_size=60),
       st.integers(20, 400))
def test_no_ordinary_entry_outlives_an_evicted_constraint(specs, budget):
    entries = [_entry(i, "doi" if kind == "doi" else "path", p)
               for i, kind, p in specs]
    merged = merge_ledger(Ledger(), entries, budget)
    assert ledger_tokens(merged) <= budget or not merged.entries
    lowest_kept = min((e.priority for e in merged.entries), default=3)
    highest_evicted = max((e.priority for e in merged.evicted), default=-1)
    assert highest_evicted <= lowest_kept


# ------------------------------------------------------------------ through the planner


def _session(n_turns: int, ids_per_turn: int) -> list:
    msgs = []
    for t in range(n_turns):
        dois = " ".join(f"10.{2000 + t}/paper.{t}.{i}" for i in range(ids_per_turn))
        msgs += [user(f"Turn {t}: read {dois}"),
                 assistant(f"Read them for turn {t}. " + "The method is sound. " * 60)]
    return chain(msgs)


def _plan(nodes, window: int = 16_000) -> Plan:
    capacity = ModelCapacity(model="m", context_window=window, max_output=16_384)
    result = plan_compaction(branch_of(nodes), derive_budget(capacity), "manual",
                             capacity=capacity)
    assert isinstance(result, Plan)
    return result


def test_ledger_takes_what_it_needs_and_the_summary_the_rest():
    few = _plan(_session(4, 1))
    assert few.ledger is not None and 1 <= len(few.ledger.entries) <= 3
    need = ledger_tokens(few.ledger)
    assert need < few.budget.ledger_budget / 4
    assert summary_token_budget(few) == few.budget.summary_budget - need
    many = _plan(_session(40, 6))
    assert many.ledger is not None and many.ledger.evicted  # more than the cap holds
    assert ledger_tokens(many.ledger) <= many.budget.ledger_budget
    assert ledger_tokens(many.ledger) > 0.9 * many.budget.ledger_budget
    assert summary_token_budget(many) >= many.budget.summary_budget - many.budget.ledger_budget
    text = summarize_extractive(many)
    cp = build_checkpoint(many, text, summarizer="extractive")
    assert cp.ledger == many.ledger


def test_every_eviction_is_recorded_in_the_checkpoint_that_made_it():  # L3
    nodes = _session(12, 6)
    seen: list[str] = []
    records: list[str] = []
    previous = Ledger()
    for round_ in range(4):
        p = _plan(nodes)
        cp = build_checkpoint(p, summarize_extractive(p), summarizer="extractive")
        detail = cp.details["ledger"]
        assert detail["tokens"] == ledger_tokens(cp.ledger) <= detail["cap"]
        assert detail["entries"] == len(cp.ledger.entries)
        records += [e["value"] for e in detail["evicted"]]
        assert [e["value"] for e in detail["evicted"]] == [
            e.value for e in evicted_since(previous, cp.ledger)]
        previous = cp.ledger
        nodes = extend(nodes, [cp], f"c{round_}")
        more = []
        for t in range(12):
            k = 100 * (round_ + 1) + t
            more += [user(f"Turn {k}: " + " ".join(f"10.{3000 + k}/p.{i}" for i in range(6))),
                     assistant("ok " + "The method is sound. " * 60)]
        nodes = extend(nodes, more, f"m{round_}")
        seen = [e.value for e in cp.ledger.evicted]
    assert records and sorted(records) == sorted(set(records))  # each recorded once
    assert set(seen) == set(records)  # the ledger's evicted list is the union of records


def test_the_users_rule_itself_is_carried_in_the_ledger():
    from contextfold.core.text.identifiers import extract_identifiers
    from contextfold.core.view.projection import render_ledger

    rule = "Never overwrite refs/library.bib or notes/review.md, they are the master copies."
    nodes = chain([user(f"Please open item K7QX4M2P. {rule}"), assistant("Understood.")])
    entries = extract_identifiers(nodes)
    assert {e.value: e.priority for e in entries} == {
        "K7QX4M2P": USER_WRITTEN, "refs/library.bib": USER_CONSTRAINT,
        "notes/review.md": USER_CONSTRAINT}
    text = render_ledger(merge_ledger(Ledger(), entries, 10_000))
    lines = text.splitlines()
    assert lines[1] == f"- [user constraint] {rule}"  # first, once, verbatim
    assert lines[2] == "- zotero_key: K7QX4M2P"
    # Under pressure, ordinary entries go before the rule's words...
    noise = [_entry(i) for i in range(40)]
    evicted = (LedgerEntry(kind="url", value="https://x.org/a"),)
    rules = [e for e in entries if e.priority == USER_CONSTRAINT]
    tight = merge_ledger(Ledger(), [*entries, *noise],
                         ledger_tokens(Ledger(entries=tuple(rules), evicted=evicted)))
    assert render_ledger(tight).splitlines()[1] == f"- [user constraint] {rule}"
    assert {e.value for e in tight.entries} == {"refs/library.bib", "notes/review.md"}
    # ... and the words go before the identifiers they name, which go last of all.
    bare = Ledger(entries=tuple(e.model_copy(update={"note": ""}) for e in rules),
                  evicted=evicted)
    tighter = merge_ledger(Ledger(), [*entries, *noise], ledger_tokens(bare))
    assert "path [user constraint]: refs/library.bib; notes/review.md" in \
        render_ledger(tighter)
