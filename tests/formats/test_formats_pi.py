"""Pi sessions -> contextfold nodes: the real v1 session and hand-written v1/v3 files."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import FilePart, ReasoningPart, TextPart, ToolResultPart
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.projection import project
from contextfold.formats import ImportFormatError, import_file, import_pi, tool_pairing
from contextfold.formats.pi import BRANCH_SUMMARY_PREFIX

LARGE = Path(__file__).parents[1] / "fixtures" / "pi-mono" / "large-session.jsonl"


@pytest.fixture(scope="module")
def large():
    return import_pi(LARGE)


@pytest.fixture(scope="module")
def raw_lines():
    return [(i, json.loads(line)) for i, line in enumerate(LARGE.read_text().splitlines(), 1)]


def healthy(result, leaf=None) -> Branch:
    branch = build_branch(result.nodes, leaf or result.leaf_id)
    assert isinstance(branch, Branch), branch
    return branch


# ----------------------------------------------------------------- the real session


def test_real_session_counts(large):  # D1
    roles = Counter(n.message.role for n in large.nodes)
    assert roles == {"user": 88, "assistant": 453, "tool": 373}
    assert large.messages == 914 and large.checkpoints == 0
    assert sum(len(n.message.tool_calls) for n in large.nodes) == 391
    assert large.skipped == {"model_change": 1, "session": 1, "thinking_level_change": 103}
    assert large.warnings == ()
    assert large.format == "pi"


def test_real_session_v1_chain_in_file_order_with_stable_ids(large, raw_lines):  # D1 C1
    session = raw_lines[0][1]["id"]
    expected_ids = [f"{session}-{i}" for i, obj in raw_lines if obj["type"] == "message"]
    assert [n.id for n in large.nodes] == expected_ids
    assert [n.parent_id for n in large.nodes] == [None, *expected_ids[:-1]]
    assert large.leaf_id == expected_ids[-1]
    branch = healthy(large)
    assert len(branch.nodes) == 914
    assert import_pi(LARGE).nodes == large.nodes  # re-import gives the same nodes


def test_real_session_usage_status_and_model(large, raw_lines):  # E1 E3
    by_id = {n.id: n.message for n in large.nodes}
    session = raw_lines[0][1]["id"]
    statuses = Counter()
    for i, obj in raw_lines:
        if obj["type"] != "message" or obj["message"]["role"] != "assistant":
            continue
        raw, msg = obj["message"], by_id[f"{session}-{i}"]
        u = raw["usage"]
        assert (msg.usage.input, msg.usage.output, msg.usage.cache_read,
                msg.usage.cache_write) == (u["input"], u["output"], u["cacheRead"],
                                           u["cacheWrite"])
        assert msg.model == msg.usage.model == raw["model"]
        statuses[msg.status] += 1
    assert statuses == {"complete": 431, "aborted": 21, "error": 1}
    assert large.metadata["models"] == ["gpt-5.1-codex", "claude-sonnet-4-5"]
    assert large.metadata["model_changes"][0]["model"] == "claude-sonnet-4-5"
    assert large.metadata["cwd"] == "/Users/badlogic/workspaces/pi-mono"
    assert len(large.metadata["assistant_errors"]) == 22


def test_real_session_tool_results_paired_and_unanswered_only_when_aborted(large):  # A2 K1
    assert tool_pairing(large) == Counter(paired=373, unanswered=18, orphan_results=0)
    answered = {r.call_id for n in large.nodes for r in n.message.tool_results}
    for node in large.nodes:
        for call in node.message.tool_calls:
            if call.id not in answered:
                assert node.message.is_closed_without_result, node.id
    names = Counter(r.name for n in large.nodes for r in n.message.tool_results)
    assert set(names) == {"bash", "edit", "read", "write"}


def test_real_session_reasoning_and_timestamps(large, raw_lines):  # R2
    thinking = [p for n in large.nodes for p in n.message.parts if isinstance(p, ReasoningPart)]
    assert len(thinking) == 1 and thinking[0].signature
    first = large.nodes[0]
    assert first.created_at == datetime.fromisoformat(raw_lines[1][1]["timestamp"])


def test_real_session_exports_valid_requests(large):  # T2
    projection = project(healthy(large))
    openai = to_openai(projection, system="You are Pi.")
    anthropic = to_anthropic(projection)
    assert openai_problems(openai.messages) == []
    assert anthropic_problems(anthropic.messages) == []
    # Aborted replies' calls are void, not repairs: nothing had to be dropped.
    assert openai.repairs == () and anthropic.repairs == ()


# ----------------------------------------------------------------- hand-written sessions


def write(tmp_path, entries, name="s.jsonl", tail="") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n" + tail)
    return path


def e(kind, id_, parent, **fields):
    return {"type": kind, "id": id_, "parentId": parent,
            "timestamp": "2025-12-01T10:00:00.000Z", **fields}


def msg(id_, parent, role, content, **fields):
    return e("message", id_, parent, message={"role": role, "content": content, **fields})


USAGE = {"input": 10, "output": 5, "cacheRead": 100, "cacheWrite": 7, "totalTokens": 122}

V3 = [
    {"type": "session", "version": 3, "id": "sess", "timestamp": "2025-12-01T10:00:00Z",
     "cwd": "/work"},
    msg("e1", None, "user", "hello"),
    msg("e2", "e1", "assistant", [
        {"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig"},
        {"type": "text", "text": "reading"},
        {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a.py"}}],
        usage=USAGE, stopReason="toolUse", model="claude-sonnet-4-5"),
    msg("e3", "e2", "toolResult", [{"type": "text", "text": "print(1)"},
                                   {"type": "image", "data": "aGVsbG8=",
                                    "mimeType": "image/png"}],
        toolCallId="t1", toolName="read", isError=False),
    e("model_change", "e4", "e3", provider="openai", modelId="gpt-5.1-codex"),
    msg("e5", "e4", "assistant", [{"type": "text", "text": "done"}], usage=USAGE,
        stopReason="stop", model="gpt-5.1-codex"),
    e("thinking_level_change", "e5b", "e5", thinkingLevel="high"),
    msg("e6", "e5b", "user", [{"type": "text", "text": "second"}]),
    msg("e7", "e6", "assistant", [{"type": "text", "text": "ok"}], usage=USAGE,
        stopReason="stop", model="gpt-5.1-codex"),
    e("compaction", "c1", "e7", summary="## Goal\nread a.py", firstKeptEntryId="e5b",
      tokensBefore=5000, details={"readFiles": ["a.py"], "modifiedFiles": []}),
    msg("e9", "c1", "user", "third"),
    msg("e10", "e9", "assistant", [{"type": "text", "text": "third answer"}], usage=USAGE,
        stopReason="stop", model="gpt-5.1-codex"),
    # The user went back to e3 and continued there: a branch that does not contain c1.
    e("branch_summary", "b1", "e3", fromId="e10", summary="Tried the third thing."),
    msg("b2", "b1", "user", "other way"),
    msg("b3", "b2", "assistant", [{"type": "text", "text": "other answer"}], usage=USAGE,
        stopReason="stop", model="gpt-5.1-codex"),
    e("label", "l1", "b3", targetId="e2", label="start"),
]


def test_v3_tree_ids_leaf_and_skipped(tmp_path):  # T5 D1
    result = import_pi(write(tmp_path, V3))
    assert [n.id for n in result.nodes] == [
        "e1", "e2", "e3", "e5", "e6", "e7", "c1", "e9", "e10", "b1", "b2", "b3"]
    parents = {n.id: n.parent_id for n in result.nodes}
    assert parents["e5"] == "e3" and parents["e6"] == "e5"  # settings entries re-linked
    assert parents["b1"] == "e3"
    assert result.leaf_id == "b3"  # the last entry (a label) resolves to its ancestor
    assert result.skipped == {"label": 1, "model_change": 1, "session": 1,
                              "thinking_level_change": 1}
    assert result.metadata["session_id"] == "sess" and result.metadata["version"] == 3
    assert result.metadata["thinking_level"] == "high"


def test_v3_compaction_becomes_checkpoint_with_first_kept_moved_forward(tmp_path):  # T3 K1
    result = import_pi(write(tmp_path, V3))
    cp_node = next(n for n in result.nodes if n.checkpoint)
    cp = cp_node.checkpoint
    assert cp_node.id == "c1" and cp_node.parent_id == "e7"
    # Pi named the thinking-level entry before e6; the first kept node is e6.
    assert cp.first_kept_id == "e6"
    assert (cp.summary, cp.tokens_before, cp.summarizer, cp.profile) == (
        "## Goal\nread a.py", 5000, "pi", "coding")
    assert cp.details["pi_details"] == {"readFiles": ["a.py"], "modifiedFiles": []}
    projection = project(healthy(result, "e10"))
    assert projection.checkpoint == cp_node
    assert [n.id for n in projection.messages] == ["e6", "e7", "e9", "e10"]


def test_v3_branch_summary_is_a_marked_user_message_and_fork_skips_checkpoint(tmp_path):  # T5
    result = import_pi(write(tmp_path, V3))
    branch = healthy(result)
    assert branch.latest_checkpoint is None  # the fork left before c1
    b1 = next(n for n in result.nodes if n.id == "b1").message
    assert b1.role == "user"
    assert b1.text == BRANCH_SUMMARY_PREFIX + "Tried the third thing.</summary>"
    assert result.metadata["branch_summaries"] == [{"id": "b1", "from_id": "e10"}]
    assert [n.id for n in project(branch).messages] == ["e1", "e2", "e3", "b1", "b2", "b3"]


def test_v3_parts_reasoning_tool_result_and_image(tmp_path):  # R2 R5 E1
    result = import_pi(write(tmp_path, V3))
    nodes = {n.id: n.message for n in result.nodes}
    e2 = nodes["e2"]
    assert isinstance(e2.parts[0], ReasoningPart) and e2.parts[0].signature == "sig"
    assert e2.tool_calls[0].input == {"path": "a.py"}
    assert (e2.usage.input, e2.usage.output, e2.usage.cache_read, e2.usage.cache_write) == (
        10, 5, 100, 7)
    e3 = nodes["e3"]
    assert e3.role == "tool"
    assert e3.parts == (ToolResultPart(call_id="t1", name="read", output="print(1)"),
                        FilePart(name="image-2.png", media_type="image/png", size=5))


def test_v1_compaction_index_and_other_message_roles(tmp_path):  # T3 K1
    entries = [
        {"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/w"},
        {"type": "message", "timestamp": "2025-01-01T00:00:01Z",
         "message": {"role": "user", "content": "one"}},
        {"type": "message", "timestamp": "2025-01-01T00:00:02Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "1"}],
                     "stopReason": "stop", "usage": USAGE}},
        {"type": "message", "timestamp": "2025-01-01T00:00:03Z",
         "message": {"role": "bashExecution", "command": "ls", "output": "a.py",
                     "exitCode": 2, "cancelled": False, "truncated": False}},
        {"type": "message", "message": {"role": "bashExecution", "command": "secret",
                                        "output": "x", "excludeFromContext": True}},
        {"type": "message", "message": {"role": "hookMessage", "content": "from a hook"}},
        {"type": "message", "message": {"role": "assistant", "content": [
            {"type": "toolCall", "id": "t9", "name": "bash", "arguments": {}}],
            "stopReason": "aborted", "usage": USAGE}},
        {"type": "compaction", "summary": "S", "firstKeptEntryIndex": 3, "tokensBefore": 9},
        {"type": "future_entry", "x": 1},
        {"type": "message", "message": {"role": "user", "content": "after"}},
    ]
    result = import_pi(write(tmp_path, entries))
    ids = [n.id for n in result.nodes]
    assert ids == ["old-2", "old-3", "old-4", "old-6", "old-7", "old-8", "old-10"]
    bash = result.nodes[2].message
    assert bash.role == "user" and bash.text == "Ran `ls`\n```\na.py\n```\n\n" \
        "Command exited with code 2"
    assert result.nodes[3].message.text == "from a hook"
    assert result.nodes[4].message.status == "aborted"
    cp = result.nodes[5]
    assert cp.checkpoint.first_kept_id == "old-4"  # entries[3] = the bash execution line
    assert result.nodes[6].parent_id == "old-8"  # re-linked over the unknown entry
    assert result.skipped == {"bashExecution:excluded": 1, "session": 1,
                              "unknown:future_entry": 1}
    assert result.nodes[4].created_at == result.nodes[2].created_at  # no timestamp: previous
    branch = healthy(result)
    assert [n.id for n in project(branch).messages] == ["old-4", "old-6", "old-7", "old-10"]
    assert openai_problems(to_openai(project(branch)).messages) == []


def test_compaction_pointing_nowhere_keeps_nothing_raw(tmp_path):  # K3 D1
    entries = [V3[0], msg("e1", None, "user", "hi"),
               msg("e2", "e1", "assistant", [{"type": "text", "text": "yo"}]),
               e("compaction", "c1", "e2", summary="S", firstKeptEntryId="nope",
                 tokensBefore=1)]
    result = import_pi(write(tmp_path, entries))
    assert result.nodes[-1].checkpoint.first_kept_id is None
    assert any("firstKeptEntryId 'nope' not found" in w for w in result.warnings)
    assert project(healthy(result)).messages == ()


def test_partial_file_imports_readable_part_with_warnings(tmp_path):  # D1 D2
    path = write(tmp_path, V3[:4], tail='{"type": "message", "id": "e4", "parentId": "e3", "mes')
    lines = path.read_text().splitlines()
    lines.insert(2, "\x00\x01 not json")
    path.write_text("\n".join(lines))
    result = import_pi(path)
    assert [n.id for n in result.nodes] == ["e1", "e2", "e3"]
    assert result.skipped["unreadable_line"] == 2
    assert [w.split(":")[1] for w in result.warnings] == ["3", "6"]
    assert "not UTF-8" in result.warnings[0] or "not valid JSON" in result.warnings[0]
    assert "truncated line?" in result.warnings[1]


def test_bad_entry_fields_are_skipped_with_line_and_reason(tmp_path):  # D1
    entries = [V3[0], msg("e1", None, "user", "hi"),
               msg("e2", "e1", "toolResult", "x"),  # no toolCallId
               e("compaction", "c1", "e2", summary=None, tokensBefore=-1),
               msg("e3", "c1", "user", "still here")]
    result = import_pi(write(tmp_path, entries))
    assert [(n.id, n.parent_id) for n in result.nodes] == [("e1", None), ("e3", "e1")]
    assert result.skipped["invalid_entry"] == 2
    assert result.warnings[0].startswith("s.jsonl:3: unreadable 'message' entry skipped")


def test_header_only_or_claude_code_file_is_fatal(tmp_path):  # D2
    with pytest.raises(ImportFormatError, match="no Pi session entries"):
        import_pi(write(tmp_path, [V3[0]]))
    cc = Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl"
    with pytest.raises(ImportFormatError, match=r"short\.jsonl: no conversation messages"):
        import_pi(cc)


def test_import_file_detects_pi(tmp_path):  # D1
    assert import_file(write(tmp_path, V3)).format == "pi"
    assert import_file(LARGE, format="pi").messages == 914
    text_parts = [p for p in import_pi(write(tmp_path, V3)).nodes[0].message.parts]
    assert text_parts == [TextPart(text="hello")]
