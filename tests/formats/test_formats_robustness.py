"""Broken, truncated and random input: only `ImportFormatError`, and never a damaged tree.

Whatever an importer accepts must be a well-formed tree (parents before children, no
dangling parent, the leaf present, a healthy branch); whatever it refuses must be refused
with `ImportFormatError` naming the file.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.projection import project
from contextfold.formats import (
    FORMATS,
    ImportFormatError,
    ImportResult,
    detect_format,
    import_file,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"
CC_SMALL = (FIXTURES / "claude-code" / "tool_heavy.jsonl").read_bytes()
PI_HEAD = b"\n".join((FIXTURES / "pi-mono" / "large-session.jsonl").read_bytes()
                     .split(b"\n")[:120])
FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def assert_well_formed(result: ImportResult) -> None:
    """The invariants every accepted import keeps (SPEC D1: nothing damaged is produced)."""
    seen: set[str] = set()
    for node in result.nodes:
        assert node.id not in seen, f"duplicate node {node.id}"
        assert node.parent_id is None or node.parent_id in seen, f"{node.id}: parent later"
        seen.add(node.id)
    assert result.leaf_id in seen
    branch = build_branch(result.nodes, result.leaf_id)
    assert isinstance(branch, Branch), branch
    projection = project(branch)
    assert openai_problems(to_openai(projection).messages) in ([], ["empty history"])
    assert anthropic_problems(to_anthropic(projection).messages) in ([], ["empty history"])
    assert result.skipped.get("unreadable_line", 0) <= len(result.warnings)


def attempt(path: Path, fmt: str = "auto") -> ImportResult | None:
    try:
        result = import_file(path, format=fmt)
    except ImportFormatError as exc:
        assert str(exc).startswith(path.name), str(exc)
        return None
    assert_well_formed(result)
    return result


# ----------------------------------------------------------------- fatal input


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "the file is empty"),
    (b"  \n\n \t\n", "the file is empty"),
    (bytes(range(256)) * 8, "no readable JSON line"),
    (b"1\n2\n3\n", "JSON value is a number, not an object"),
    (b"[1, 2]\n", "not of chat messages"),
    (b"hello world\nthis is prose\n", "not valid JSON"),
    (b'{"a": 1}\n{"b": 2}\n', "not a known session format"),
    (b'{"name": "x", "items": []}', "neither a message list"),
])
def test_unrecognisable_input_is_fatal_with_file_and_reason(tmp_path, content, reason):  # D2
    path = tmp_path / "input.jsonl"
    path.write_bytes(content)
    with pytest.raises(ImportFormatError, match=reason) as err:
        import_file(path)
    assert str(err.value).startswith("input.jsonl")


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_importer_refuses_binary_and_empty_files(tmp_path, fmt):  # D2
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(ImportFormatError, match=r"^blob\.bin"):
        import_file(binary, format=fmt)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(ImportFormatError, match=r"^empty\.jsonl: the file is empty"):
        import_file(empty, format=fmt)


def test_mostly_unreadable_jsonl_is_fatal_not_partial(tmp_path):  # D2
    good = CC_SMALL.split(b"\n")[3]
    path = tmp_path / "mostly_bad.jsonl"
    path.write_bytes(b"\n".join([good, b"garbage", b"{broken", b"\xff\xfe"]))
    with pytest.raises(ImportFormatError, match="3 of 4 lines are unreadable"):
        import_file(path, format="claude-code")


def test_missing_path_directory_and_unknown_format(tmp_path):  # D2
    with pytest.raises(ImportFormatError, match="no such file"):
        import_file(tmp_path / "nope.jsonl")
    with pytest.raises(ImportFormatError, match="is a directory"):
        detect_format(tmp_path)
    path = tmp_path / "s.jsonl"
    path.write_bytes(CC_SMALL)
    with pytest.raises(ImportFormatError, match="unknown format 'gemini'; choose one of"):
        import_file(path, format="gemini")


def test_wrong_explicit_format_is_fatal(tmp_path):  # D2
    cc = tmp_path / "cc.jsonl"
    cc.write_bytes(CC_SMALL)
    pi = tmp_path / "pi.jsonl"
    pi.write_bytes(PI_HEAD)
    with pytest.raises(ImportFormatError, match="no conversation messages found in this pi"):
        import_file(cc, format="pi")
    with pytest.raises(ImportFormatError, match="no Claude Code entries"):
        import_file(pi, format="claude-code")
    with pytest.raises(ImportFormatError, match="no conversation messages found in this openai"):
        import_file(pi, format="openai")


# ----------------------------------------------------------------- fuzzing


@FUZZ
@given(data=st.binary(max_size=2000), fmt=st.sampled_from(("auto", *FORMATS)))
def test_random_bytes_raise_only_import_format_error(tmp_path, data, fmt):  # D1 D2
    path = tmp_path / "random.jsonl"
    path.write_bytes(data)
    attempt(path, fmt)


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(CC_SMALL)),
       source=st.sampled_from(("cc", "pi")))
def test_truncated_real_files_import_their_readable_prefix(tmp_path, cut, source):  # D1 D2
    data = CC_SMALL if source == "cc" else PI_HEAD
    cut = min(cut, len(data))
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data[:cut])
    result = attempt(path)
    complete_lines = data[:cut].count(b"\n")
    if result is not None:
        assert result.format == ("claude-code" if source == "cc" else "pi")
        # At most the cut line is lost, and it is reported, not dropped silently.
        assert result.skipped.get("unreadable_line", 0) <= 1
        if cut == len(data) or data[:cut].endswith(b"\n"):
            assert result.warnings == ()
    elif source == "pi":
        # Refusal only when no message line survived the cut.
        assert complete_lines < 3 or b'"type":"message"' not in data[:cut]


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6),
                      st.floats(allow_nan=False), st.text(string.printable, max_size=8),
                      st.sampled_from(["user", "assistant", "tool", "toolResult", "message",
                                       "text", "tool_use", "tool_result", "toolCall", "image",
                                       "thinking", "compaction", "compact_boundary", "system",
                                       "progress", "session", "a", "b", "c"]))
KEYS = ["type", "uuid", "parentUuid", "logicalParentUuid", "id", "parentId", "message",
        "role", "content", "text", "tool_use_id", "toolCallId", "name", "input", "arguments",
        "usage", "input_tokens", "output", "stopReason", "subtype", "isCompactSummary",
        "summary", "firstKeptEntryId", "firstKeptEntryIndex", "tokensBefore",
        "compactMetadata", "preTokens", "isSidechain", "timestamp", "source", "data",
        "tool_calls", "function", "tool_call_id", "is_error", "model"]
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=25,
)
entry_objects = st.dictionaries(st.sampled_from(KEYS), json_value, min_size=1, max_size=8)


@settings(FUZZ, max_examples=60)  # unstructured: almost all refused, so fewer examples
@given(entries=st.lists(entry_objects, min_size=1, max_size=12),
       fmt=st.sampled_from(("auto", *FORMATS)))
def test_random_entries_never_break_an_importer(tmp_path, entries, fmt):  # D1 D2
    path = tmp_path / "entries.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries))
    attempt(path, fmt)
    doc = tmp_path / "list.json"
    doc.write_text(json.dumps({"messages": entries, "system": "s"}))
    attempt(doc, fmt)


IDS = st.sampled_from(["u0", "u1", "u2", "u3", "u4", "u5"])
CALLS = st.sampled_from(["c0", "c1", "c2"])


def sometimes_wrong(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a valid value, sometimes any JSON value: a plausible but damaged entry."""
    return st.one_of(valid, valid, valid, json_leaf)


def blocks(kinds: list[str]) -> st.SearchStrategy:
    block = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"),
                               "text": sometimes_wrong(st.text(min_size=1))}),
        st.fixed_dictionaries({"type": st.sampled_from(kinds), "id": sometimes_wrong(CALLS),
                               "name": sometimes_wrong(st.sampled_from(["read", "bash"])),
                               "input": json_value, "arguments": json_value}),
        st.fixed_dictionaries({"type": st.just("tool_result"),
                               "tool_use_id": sometimes_wrong(CALLS),
                               "content": sometimes_wrong(st.text()),
                               "is_error": st.booleans()}),
        st.fixed_dictionaries({"type": st.just("image"), "mimeType": json_leaf,
                               "data": sometimes_wrong(st.just("aGVsbG8=")),
                               "source": sometimes_wrong(st.fixed_dictionaries(
                                   {"media_type": st.just("image/png"),
                                    "data": st.just("aGk=")}))}),
        st.fixed_dictionaries({"type": st.just("thinking"),
                               "thinking": sometimes_wrong(st.text())}),
    )
    return sometimes_wrong(st.one_of(st.text(min_size=1), st.lists(block, min_size=1,
                                                                   max_size=3)))


USAGE_DICT = st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "input",
                                              "output", "cacheRead", "cacheWrite",
                                              "cache_read_input_tokens"]),
                             st.one_of(st.integers(-2, 10**6), json_leaf), max_size=4)
claude_entries = st.fixed_dictionaries(
    {"uuid": sometimes_wrong(IDS), "parentUuid": st.one_of(st.none(), IDS),
     "type": st.sampled_from(["user", "assistant", "assistant", "system", "progress"]),
     "message": sometimes_wrong(st.fixed_dictionaries({
         "role": st.sampled_from(["user", "assistant"]),
         "id": st.sampled_from(["m0", "m1"]), "content": blocks(["tool_use"]),
         "usage": sometimes_wrong(USAGE_DICT), "model": json_leaf}))},
    optional={"subtype": st.sampled_from(["compact_boundary", "turn_duration"]),
              "logicalParentUuid": IDS, "isCompactSummary": st.booleans(),
              "isSidechain": st.booleans(), "timestamp": json_leaf,
              "compactMetadata": sometimes_wrong(st.fixed_dictionaries(
                  {"preTokens": sometimes_wrong(st.integers(0, 10**6))}))},
)
pi_entries = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "message", "message", "compaction",
                              "model_change", "branch_summary", "custom_message", "label"]),
     "message": sometimes_wrong(st.fixed_dictionaries({
                  "role": st.sampled_from(["user", "assistant", "toolResult",
                                           "bashExecution", "custom"]),
                  "content": blocks(["toolCall"]), "toolCallId": sometimes_wrong(CALLS),
                  "stopReason": st.sampled_from(["stop", "aborted", "error"]),
                  "usage": sometimes_wrong(USAGE_DICT), "command": json_leaf}))},
    optional={"id": IDS, "parentId": st.one_of(st.none(), IDS), "timestamp": json_leaf,
              "summary": sometimes_wrong(st.text()), "firstKeptEntryId": json_leaf,
              "firstKeptEntryIndex": st.integers(-1, 12),
              "tokensBefore": sometimes_wrong(st.integers(0, 10**6)),
              "content": blocks(["toolCall"])},
)
chat_messages = st.fixed_dictionaries(
    {"role": sometimes_wrong(st.sampled_from(["system", "user", "assistant", "tool"])),
     "content": st.one_of(st.text(min_size=1), blocks(["tool_use", "image_url"]))},
    optional={"tool_call_id": sometimes_wrong(CALLS),
              "tool_calls": sometimes_wrong(st.lists(st.fixed_dictionaries(
                  {"id": CALLS, "function": st.fixed_dictionaries(
                      {"name": st.just("f"), "arguments": json_leaf})}), max_size=2))},
)


def test_plausible_but_damaged_sessions_import_or_refuse_cleanly(tmp_path):  # D1 D2
    """Mostly-valid entries with damaged fields: every format must also reach success."""
    outcomes = Counter()

    # Derandomized: the success-path assertion below must not depend on the seed.
    @settings(FUZZ, max_examples=200, derandomize=True)
    @given(kind=st.sampled_from(FORMATS), data=st.data())
    def run(kind, data):
        strategy = {"pi": pi_entries, "claude-code": claude_entries}.get(kind, chat_messages)
        entries = data.draw(st.lists(strategy, min_size=1, max_size=10))
        path = tmp_path / "plausible.jsonl"
        if kind in ("pi", "claude-code"):
            header = [{"type": "session", "id": "s", "cwd": "/"}] if kind == "pi" else []
            path.write_text("\n".join(json.dumps(e) for e in header + entries))
        else:
            path.write_text(json.dumps(entries))
        for fmt in ("auto", kind):
            outcomes[kind, attempt(path, fmt) is not None] += 1

    run()
    # The fuzz must not only exercise refusals. Which formats reach success depends on
    # hypothesis's generation (it varied with test order), so require it overall.
    assert sum(n for (_, ok), n in outcomes.items() if ok) > 0, outcomes


@FUZZ
@given(index=st.integers(min_value=0, max_value=60), replacement=entry_objects)
def test_one_corrupted_entry_in_a_real_file_loses_at_most_that_entry(  # D1
        tmp_path, index, replacement):
    lines = CC_SMALL.rstrip(b"\n").split(b"\n")
    index %= len(lines)
    original = import_file_bytes(tmp_path, CC_SMALL)
    lines[index] = json.dumps(replacement).encode()
    result = import_file_bytes(tmp_path, b"\n".join(lines), fmt="claude-code")
    assert result is not None
    assert result.messages >= original.messages - 2  # the entry, or a merge it carried


def import_file_bytes(tmp_path: Path, data: bytes, fmt: str = "auto") -> ImportResult | None:
    path = tmp_path / "file.jsonl"
    path.write_bytes(data)
    return attempt(path, fmt)


def test_entry_problem_description_never_fails_on_an_empty_message():  # D1
    from contextfold.formats.builder import describe

    assert describe(ValueError()) == "ValueError"
    assert describe(KeyError("toolCallId")) == "KeyError: 'toolCallId'"
    assert describe(TypeError("a\nb")) == "TypeError: a"


def test_a_huge_single_json_value_is_refused_unread(tmp_path, monkeypatch):  # D2
    """A line (or a whole-file document) over the one-value limit is refused or skipped
    with the limit named, without reading it into memory: a 10 MiB line once cost 0.4 GB
    to import (100 MiB: 1.5 GB); every importer and detection streams past it."""
    import tracemalloc

    monkeypatch.setenv("CONTEXTFOLD_MAX_IMPORT_LINE_BYTES", str(1 << 20))
    text = "word " * (4 << 20)  # a 20 MiB message
    line = json.dumps({"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s",
                       "message": {"role": "user", "content": text}})
    alone, mixed, doc = tmp_path / "alone.jsonl", tmp_path / "mixed.jsonl", tmp_path / "d.json"
    alone.write_text(line + "\n")
    small = CC_SMALL.decode().splitlines()
    mixed.write_text("\n".join([*small[:4], line, *small[4:]]) + "\n")
    doc.write_text(json.dumps([{"role": "user", "content": "before"},
                               {"role": "user", "content": text},
                               {"role": "assistant", "content": "after"}]))
    refused = "over the 1.0 MB one JSON value may have.*CONTEXTFOLD_MAX_IMPORT_LINE_BYTES"
    tracemalloc.start()
    try:
        for path, fmt in ((alone, "auto"), (alone, "claude-code"), (alone, "pi")):
            with pytest.raises(ImportFormatError, match=refused):
                import_file(path, fmt)
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < 8 << 20, peak  # streamed past, never held
        tracemalloc.reset_peak()
        # A JSON array is read as a stream (issue 41): the file is not one value any more,
        # each element is; the oversized one is dropped, reported with the limit, and held
        # only while it is parsed (never with the file's bytes and text beside it).
        for fmt in ("auto", "openai"):
            streamed = import_file(doc, fmt)
            assert streamed.skipped.get("oversized_message") == 1
            assert any(re.search(refused, w) for w in streamed.warnings)
            assert [n.message.text for n in streamed.nodes] == ["before", "after"]
        assert tracemalloc.get_traced_memory()[1] < 3 * len(text), "held more than once"
    finally:
        tracemalloc.stop()
    result = import_file(mixed)  # one oversized line among good ones: skipped, reported
    assert result.skipped.get("unreadable_line") == 1
    assert any("over the 1.0 MB" in w for w in result.warnings)
    assert_well_formed(result)
