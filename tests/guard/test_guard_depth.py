"""The JSON depth limit read from the text (issue 26): the same depth as the walk over the
decoded value, for any JSON, brackets, quotes and backslashes inside strings included."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.guard import body as guard_body
from contextfold.guard.body import JsonTooDeepError, json_depth, loads_bounded, text_depth

_tricky = st.text(st.sampled_from(list('[]{}"\\\\/ab\u00e9\u6f22\ud83d')), max_size=12)
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _tricky),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_tricky, inner, max_size=4)),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(_json, st.booleans())
def test_text_depth_equals_the_walk(value, ascii_only) -> None:  # Y8
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert text_depth(raw) == json_depth(value)
    assert text_depth(raw, stop_after=2) > 2 or json_depth(value) <= 2


def test_loads_bounded_refuses_deep_text_without_the_walk(monkeypatch) -> None:  # Y8
    def walk(*_a, **_k):
        raise AssertionError("the walk over every decoded value ran")

    monkeypatch.setattr(guard_body, "json_depth", walk)
    body = json.dumps({"messages": [{"role": "user", "content": "[" * 500}] * 2000})
    assert loads_bounded(body.encode())["messages"][0]["content"] == "[" * 500
    # a backslash written as \u005c before a closing quote, brackets in strings
    assert text_depth(rb'{"a": "\u005c", "b": [[], "]]\\"]}') == 3
    with pytest.raises(JsonTooDeepError):
        loads_bounded(b"[" * 200 + b"]" * 200)
