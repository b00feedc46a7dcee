"""A JSON array export read as a stream gives what reading it whole gave (issue 41): the same
node ids, messages, tree, warnings and counts, for any messages — lone surrogates, a BOM,
numbers, tool calls, indentation — and for the real sessions turned into OpenAI arrays."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextfold.formats import chat, import_file

TEXT = st.text(st.characters(codec=None, exclude_categories=("Cn",)), max_size=40)
TOOL_CALL = st.fixed_dictionaries({
    "id": st.text("abc123", min_size=1, max_size=6),
    "type": st.just("function"),
    "function": st.fixed_dictionaries({
        "name": st.sampled_from(["read", "bash", "search"]),
        "arguments": st.dictionaries(st.text("xyz", min_size=1, max_size=3),
                                     st.one_of(st.integers(-10**12, 10**12),
                                               st.floats(allow_nan=False,
                                                         allow_infinity=False), TEXT),
                                     max_size=3).map(json.dumps)})})
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                           "content": TEXT}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                           "tool_calls": st.lists(TOOL_CALL, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": st.text("abc", max_size=3),
                           "content": TEXT}),
    st.fixed_dictionaries({"role": st.just("user"),
                           "content": st.lists(st.fixed_dictionaries(
                               {"type": st.just("text"), "text": TEXT}), max_size=2)}),
    st.integers(),  # not a message: skipped, with a warning, either way
)


def comparable(result: Any) -> dict[str, Any]:
    """An import's result without the import time (nodes are stamped when imported)."""
    return {"format": result.format, "leaf": result.leaf_id,
            "nodes": [(n.id, n.parent_id, n.payload.model_dump(mode="json"))
                      for n in result.nodes],
            "warnings": list(result.warnings), "skipped": dict(result.skipped),
            "metadata": result.metadata}


def whole(path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The import as it was before streaming: the file read whole, then parsed."""
    with monkeypatch.context() as m:
        m.setattr(chat, "first_byte", lambda _path: b"")
        return import_file(path, fmt)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(MESSAGE, min_size=1, max_size=8), bom=st.booleans(),
       indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
# An integer past 64 bits after a message (yajl overflows: read again past what was handed
# out) and a lone surrogate (yajl would write "?").
@example(messages=[{"role": "user", "content": "first"}, 2**70,
                   {"role": "assistant", "content": "second"}], bom=False, indent=None,
         ascii_only=True)
@example(messages=[{"role": "user", "content": "a\ud800b"}], bom=True, indent=1,
         ascii_only=True)
def test_a_streamed_array_imports_as_the_whole_file_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages: list[Any], bom: bool,
        indent: int | None, ascii_only: bool) -> None:
    path = tmp_path / "export.json"
    text = json.dumps(messages, indent=indent, ensure_ascii=ascii_only or True)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    for fmt in ("openai", "anthropic"):
        try:
            expected = comparable(whole(path, fmt, monkeypatch))
        except Exception as exc:  # the same refusal, worded alike
            with pytest.raises(type(exc)) as caught:
                import_file(path, fmt)
            assert str(caught.value) == str(exc)
            continue
        assert comparable(import_file(path, fmt)) == expected


FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize("name", ["claude-code/tool_heavy.jsonl", "pi-mono/large-session.jsonl"])
def test_a_real_session_as_an_openai_array_streams_like_the_whole_file(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real recorded session exported as an OpenAI array: detected and imported the same
    streamed as read whole (ids, messages, tree, warnings)."""
    from contextfold.core.render.export import to_openai
    from contextfold.core.values.tree import build_branch
    from contextfold.core.view.projection import project

    recorded = import_file(FIXTURES / name)
    exported = to_openai(project(build_branch(list(recorded.nodes), recorded.leaf_id))).messages
    path = tmp_path / "export.json"
    path.write_text(json.dumps(exported, ensure_ascii=False))
    assert chat.array_format(iter(exported)) == chat.chat_list_format(exported)
    streamed = import_file(path)
    assert comparable(streamed) == comparable(whole(path, streamed.format, monkeypatch))
    assert len(streamed.nodes) > 10
