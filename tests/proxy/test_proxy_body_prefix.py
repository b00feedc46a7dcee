"""A body decoded from the bytes it shares with the previous one (Y10, Y8, issue 26): the
same value (types and key order included: `1`, `1.0` and `true` told apart) and the same
refusals as `loads_bounded` decoding it in full, across appended, edited, truncated,
reordered, respelled and broken resent lists, and the messages read from it the same as a
cold read's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.values.content_chain import chain_hashes
from contextfold.core.values.held import Held
from contextfold.guard.body import JsonTooDeepError, loads_bounded
from contextfold.proxy import wire as proxy_wire
from contextfold.proxy.body_prefix import resume, shared_elements, split
from contextfold.proxy.prefix_cache import PrefixCache, dumps

_text = st.text(st.characters(blacklist_categories=()), max_size=10)
_number = st.sampled_from([1, 1.0, True, 0, -0.0, False, None, 10**20, 1e300, "1"])


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "tool_use", "tool_result"]))
    if kind == "tool_use":
        return {"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{draw(st.integers(0, 3))}", "name": "calc",
             "input": {"n": draw(_number), "s": draw(_text)}}]}
    if kind == "tool_result":
        return {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{draw(st.integers(0, 3))}",
             "content": draw(_text) or "done"}]}
    return {"role": kind, "content": draw(_text) or "m"}


_SPELLINGS = [dict(separators=(",", ":")), dict(), dict(ensure_ascii=False),
              dict(indent=1), dict(separators=(" ,", " : "), ensure_ascii=False)]


@st.composite
def _steps(draw: st.DrawFn) -> list[bytes]:
    """The raw bodies of a conversation resent with random edits between requests."""
    current = draw(st.lists(_message(), min_size=1, max_size=4))
    spelling = draw(st.sampled_from(_SPELLINGS))
    extra = draw(st.sampled_from([{}, {"tools": [{"name": "calc", "input_schema": {}}]}]))
    out = []
    for _ in range(draw(st.integers(2, 6))):
        op = draw(st.sampled_from(["append", "append", "edit", "truncate", "reorder",
                                   "respell", "same_length", "break", "deep", "same"]))
        current = list(current)
        if op == "append":
            current += draw(st.lists(_message(), min_size=1, max_size=3))
        elif op == "edit":
            current[draw(st.integers(0, len(current) - 1))] = draw(_message())
        elif op == "truncate" and len(current) > 1:
            current = current[:draw(st.integers(1, len(current) - 1))]
        elif op == "reorder":
            current = draw(st.permutations(current))
        elif op == "respell":
            spelling = draw(st.sampled_from(_SPELLINGS))
        elif op == "same_length":  # one character changed, the length kept
            current[-1] = {**current[-1], "role": "user", "content": "x" * 5}
            current.append({"role": "assistant", "content": "y" * 5})
        elif op == "deep":
            nested: Any = 1
            for _ in range(draw(st.sampled_from([100, 123, 124, 140]))):
                nested = [nested]
            current.append({"role": "user", "content": [{"type": "text", "text": "d",
                                                         "extra": nested}]})
        raw = json.dumps({"model": "m", "messages": current, **extra}, **spelling).encode(
            "utf-8", "surrogatepass")  # a lone surrogate unescaped, as json.loads reads it
        if op == "break":
            cut = draw(st.integers(0, len(raw) - 1))
            raw = draw(st.sampled_from([raw[:cut], raw[:cut] + b"]" + raw[cut:],
                                        raw + b"{", raw[:cut] + b"\xff" + raw[cut + 1:],
                                        raw[:-1] + b',"messages":[]}']))
        out.append(raw)
    return out


def _outcome(load: Any, raw: bytes) -> tuple[str, str]:
    try:
        return "value", repr(load(raw))  # repr tells 1, 1.0 and True apart, and key order
    except (ValueError, RecursionError) as exc:
        return "error", type(exc).__name__


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps())
def test_prefix_decode_equals_full_decode(steps: list[bytes]) -> None:
    # Y10, Y8: the same value or the same refusal as loads_bounded; the same messages read
    cache = PrefixCache(Held(12_000))  # small: bodies evicted as they go
    for raw in steps:
        full = _outcome(loads_bounded, raw)
        assert _outcome(lambda r: cache.loads(r, ("anthropic", "k")), raw) == full
        if full[0] != "value":
            continue
        body = cache.loads(raw, ("anthropic", "k"))
        try:
            cold = proxy_wire.parse("anthropic", loads_bounded(raw))
        except proxy_wire.WireError:
            continue
        warm = proxy_wire.parse("anthropic", body, cache=cache, key="k")
        assert warm.messages == cold.messages
        assert chain_hashes("k", warm.messages) == chain_hashes("k", cold.messages)
        assert warm.raw == [dumps(m) for m in loads_bounded(raw)["messages"]]


def test_shared_elements_and_resume_reuse_the_objects() -> None:
    # Y10: an appended turn decodes only itself; the kept elements are the same objects
    first = json.dumps({"model": "m", "messages": [{"role": "user", "content": "é1"},
                                                   {"role": "assistant", "content": "2"}],
                        "max_tokens": 5}).encode()
    old = split(first)
    body = json.loads(first)
    more = json.dumps({**body, "messages": [*body["messages"],
                                            {"role": "user", "content": "3"}]}).encode()
    assert shared_elements(old, more) == 2
    new = resume(old, more, 2)
    assert new.body == json.loads(more) and list(new.body) == ["model", "messages",
                                                               "max_tokens"]
    assert new.body["messages"][0] is old.body["messages"][0]
    assert new.ends == split(more).ends and more[new.ends[-1] - 1:new.ends[-1]] == b"}"
    edited = first.replace(b'"2"', b'"4"')
    assert shared_elements(old, edited) == 1


@pytest.mark.parametrize(("levels", "refused"), [(125, False), (126, True), (400, True)])
def test_a_too_deep_new_message_is_refused_as_in_full(levels, refused) -> None:
    # Y8: the depth check of what is new, decoded alone: 128 levels pass, 129 do not
    cache = PrefixCache()
    msgs: list[Any] = [{"role": "user", "content": "a"}]
    cache.loads(json.dumps({"model": "m", "messages": msgs}).encode(), "k")
    deep: Any = "x"
    for _ in range(levels):  # body, messages and the message add 3
        deep = [deep]
    raw = json.dumps({"model": "m", "messages": [*msgs, {"role": "user", "content": deep}]})
    if refused:
        with pytest.raises(JsonTooDeepError):
            loads_bounded(raw.encode())
        with pytest.raises(JsonTooDeepError):
            cache.loads(raw.encode(), "k")
    else:
        assert cache.loads(raw.encode(), "k") == loads_bounded(raw.encode())
    assert cache.decoded == 1 + (0 if refused else 1)  # decoded from the shared bytes on
