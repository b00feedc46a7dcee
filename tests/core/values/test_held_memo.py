"""The byte-bounded memo of a pure function of one text (`core.values.held.HeldMemo`, SPEC Y14):
the summariser's memos over message texts no longer grow with what a process has read."""

from __future__ import annotations

import random
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.values.held import held_memo, text_bytes
from contextfold.summarize import extractive_facts, grounding, user_statements, user_typed


def _counted(fn):
    calls: list[str] = []

    def wrapped(text: str):
        calls.append(text)
        return fn(text)

    return wrapped, calls


def test_the_memo_stays_within_its_bytes_whatever_it_has_read():  # Y14
    memo = held_memo(20_000)(str.upper)
    rng = random.Random(7)
    for n in range(2_000):
        memo("".join(rng.choice("abc xyz") for _ in range(rng.randint(0, 400))) + str(n))
        assert memo.held.bytes <= 20_000
    # It holds about as many texts as fit, not a count: about 20 KB of them.
    assert 10 < len(memo.held) < 100
    memo.cache_clear()
    assert len(memo.held) == 0 and memo.held.bytes == 0


def test_the_least_recently_used_text_goes_first():
    fn, calls = _counted(str.upper)
    texts = [f"{i:03d}" + "x" * 300 for i in range(3)]
    one = text_bytes(texts[0]) + text_bytes(texts[0].upper()) + 240  # `Held`'s bookkeeping
    memo = held_memo(3 * one)(fn)
    for t in texts:
        memo(t)
    memo(texts[0])  # used again: now the most recent
    memo("new" + "x" * 300)  # one has to go: texts[1], the least recently used
    calls.clear()
    memo(texts[0])
    memo(texts[2])
    assert calls == []
    memo(texts[1])
    assert calls == [texts[1]]


def test_a_text_larger_than_the_bound_is_computed_and_not_kept():
    fn, calls = _counted(str.upper)
    memo = held_memo(1_000)(fn)
    big = "y" * 5_000
    assert memo(big) == big.upper() and memo(big) == big.upper()
    assert calls == [big, big] and len(memo.held) == 0 and memo.held.bytes == 0


@settings(max_examples=50, deadline=None)
@given(texts=st.lists(st.text(max_size=60), max_size=60), bound=st.integers(0, 3_000))
def test_the_summarisers_memos_answer_as_their_functions(texts, bound):
    for memo in (extractive_facts.norm_item, grounding.tokens, user_statements.user_statements,
                 user_statements.user_constraints, user_typed.split_typed):
        fn = memo.__wrapped__
        small = held_memo(bound)(fn)  # a tight bound evicts all the time
        for text in texts + texts[::-1]:
            assert small(text) == memo(text) == fn(text)
        assert small.held.bytes <= bound and memo.held.bytes <= memo.held.max_bytes


def test_threads_share_one_memo_safely():
    memo = held_memo(50_000)(lambda text: text[::-1])
    texts = [f"message {i} " * 20 for i in range(300)]
    wrong: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(2_000):
            t = rng.choice(texts)
            if memo(t) != t[::-1]:
                wrong.append(t)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and memo.held.bytes <= 50_000
    assert memo.held.bytes == sum(text_bytes(t) * 2 + 240 for t in texts if t in memo.held)
