"""`leading_run` (issue 26): the length of the leading run two sequences agree on, as the
Python loop it replaces counts it; and the cost trigger's rhythm counted from the new
messages only gives the rhythm of the whole projection."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.cost_trigger import session_rhythm
from contextfold.core.values.runs import leading_run
from contextfold.runtime.sizing import Sizer
from tests.builders import assistant, chain, user

_items = st.lists(st.sampled_from([0, 1, 1.0, True, "1", None]), max_size=12)


@given(_items, _items, st.booleans())
def test_leading_run_counts_what_the_loop_counts(a, b, as_tuple) -> None:
    expected = 0
    while expected < min(len(a), len(b)) and (a[expected] is b[expected]
                                              or a[expected] == b[expected]):
        expected += 1
    assert leading_run(tuple(a) if as_tuple else a, b) == expected


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), min_size=1, max_size=12))
def test_the_rhythm_from_new_messages_equals_the_whole_rhythm(steps) -> None:
    capacity = ModelCapacity(model="m", context_window=100_000, max_output=1_000)
    sizer = Sizer(capacity, derive_budget(capacity, CompactionSettings()), None, ())
    msgs = [user("go")]
    for k, (restart, n) in enumerate(steps):
        if restart:  # not an extension of the last call's nodes: counted afresh
            msgs = [user(f"again {k}")]
        msgs += [assistant(f"a{k}{i}" * (i + 1)) if i % 2 == 0 else user(f"u{k}{i}")
                 for i in range(n)]
        nodes = tuple(chain(msgs, prefix=f"r{k}_" if restart else "n"))
        whole = session_rhythm([n.message.role for n in nodes], [sizer.costs(n) for n in nodes])
        assert sizer._rhythm(nodes) == whole
