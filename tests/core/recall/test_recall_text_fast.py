"""The recall index's token folding has an ASCII fast path (issue 26: a per-character pass
over every token of every message stored, the first proxied request's largest cost), with
the same tokens as the full Unicode path (SPEC L1)."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.recall import recall_text


def _slow_fold_latin(token: str) -> str:
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_fold_latin_equals_the_unicode_path(token) -> None:  # L1
    assert recall_text._fold_latin(token) == _slow_fold_latin(token)


def test_ascii_tokens_skip_normalisation(monkeypatch) -> None:  # L1, issue 26
    class NoNormalize:
        def normalize(self, *_a):
            raise AssertionError("an ASCII token was normalised")

        combining = normalize

    monkeypatch.setattr(recall_text, "unicodedata", NoNormalize())
    assert recall_text._fold_latin("def_tokens42") == "def_tokens42"


def _slow_tokens(text: str) -> list[str]:
    out: list[str] = []
    for run in recall_text._RUN.findall(recall_text.fold(text)):
        pos = 0
        for m in recall_text._CJK.finditer(run):
            if m.start() > pos:
                out.append(_slow_fold_latin(run[pos:m.start()])[:recall_text.MAX_TOKEN_CHARS])
            cjk = m.group()
            out.extend([cjk] if len(cjk) == 1 else [cjk[i:i + 2] for i in range(len(cjk) - 1)])
            pos = m.end()
        if pos < len(run):
            out.append(_slow_fold_latin(run[pos:])[:recall_text.MAX_TOKEN_CHARS])
    return [t for t in out if t]


_mixed = st.text(st.one_of(st.characters(codec="ascii"), st.sampled_from(
    list("\u00e9\u00c9\u0301\u6f22\u5b57\u30ab\uff76\u00df\u0130\ufb01"))), max_size=80)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_mixed, st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)))
def test_tokens_equal_the_unicode_path(text) -> None:  # L1
    assert recall_text.tokens(text) == _slow_tokens(text)
    assert recall_text.tokens(text + "x" * 70) == _slow_tokens(text + "x" * 70)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta", "gamma42", "δέλτα", "東京大学", "x"]),
                min_size=0, max_size=60),
       st.integers(8, 120))
def test_index_document_fast_path_equals_the_bounded_loop(words, full) -> None:  # L1, issue 40
    """A message whose tokens fit FULL_INDEX_CHARS is joined whole; the bounded loop gives
    the same text for it, and over the bound the loop still decides (distinct words)."""
    import pytest

    text = " ".join(words)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(recall_text, "FULL_INDEX_CHARS", full)
        mp.setattr(recall_text, "MAX_INDEX_CHARS", full * 2)
        got = recall_text.index_document(text)
        kept, size, seen = [], 0, set()
        for word in recall_text.tokens(text):
            if size < full:
                kept.append(word)
                seen.add(word)
            elif word not in seen:
                if size + len(word) + 1 > full * 2:
                    break
                kept.append(word)
                seen.add(word)
            else:
                continue
            size += len(word) + 1
    assert got == " ".join(kept)
