"""The recall index's token folding has an ASCII fast path (issue 26: a per-character pass
over every token of every message stored, the first proxied request's largest cost), with
the same tokens as the full Unicode path (SPEC L1)."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core import recall_text


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
