"""Claude Code transcripts -> contextfold nodes: real fixtures and hand-written edge cases."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import FilePart, ReasoningPart, ToolResultPart
from contextfold.core.values.tree import Branch, build_branch, check_stability
from contextfold.core.view.projection import project
from contextfold.formats import ImportFormatError, import_claude_code, import_file, tool_pairing

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude-code"
LONG = {
    "258c7280-ae70-4798-800f-63464d01a85d.jsonl": 167094,
    "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl": 142431,
}
ALL = sorted(p.name for p in FIXTURES.glob("*.jsonl"))


def raw_entries(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()
            if line.strip()]


def healthy(result) -> Branch:
    branch = build_branch(result.nodes, result.leaf_id)
    assert isinstance(branch, Branch), branch
    return branch


# ----------------------------------------------------------------- real fixtures


@pytest.mark.parametrize("name", ALL)
def test_real_transcript_one_assistant_message_per_response(name):  # E1
    """Entries split per content block merge back: one node per API response `message.id`,
    with the usage of the response's last entry."""
    entries = [e for e in raw_entries(name) if e.get("type") == "assistant"]
    last_usage = {e["message"]["id"]: e["message"]["usage"] for e in entries}
    result = import_claude_code(FIXTURES / name)
    assistants = [n for n in result.nodes if n.message and n.message.role == "assistant"]
    assert len(assistants) == len(last_usage)
    for node in assistants:
        source = next(e for e in entries if e["uuid"] == node.id)
        expected = last_usage[source["message"]["id"]]
        usage = node.message.usage
        assert usage is not None
        assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (
            expected["input_tokens"], expected["output_tokens"],
            expected["cache_read_input_tokens"], expected["cache_creation_input_tokens"])
        assert usage.model == node.message.model == source["message"]["model"]


@pytest.mark.parametrize("name", ALL)
def test_real_transcript_every_tool_call_paired_on_the_leaf_branch(name):  # K1 D1
    entries = raw_entries(name)
    uses = {b["id"] for e in entries if e.get("type") == "assistant"
            for b in e["message"]["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for e in entries if e.get("type") == "user"
               and isinstance(e["message"]["content"], list)
               for b in e["message"]["content"] if b["type"] == "tool_result"}
    result = import_claude_code(FIXTURES / name)
    assert tool_pairing(result) == Counter(paired=len(uses & results),
                                           unanswered=len(uses - results),
                                           orphan_results=len(results - uses))
    branch = healthy(result)
    # Parallel calls' results are siblings in the file; folded, they are all on the branch.
    assert len(branch.nodes) == len(result.nodes)
    on_branch_calls = {c.id for n in branch.nodes if n.message for c in n.message.tool_calls}
    on_branch_results = {r.call_id for n in branch.nodes if n.message
                         for r in n.message.tool_results}
    assert on_branch_calls == on_branch_results == uses
    assert check_stability(branch).stable


@pytest.mark.parametrize("name", ALL)
def test_real_transcript_exports_without_repairs(name):  # T2 T3
    branch = healthy(import_file(FIXTURES / name))
    projection = project(branch)
    openai = to_openai(projection, system="sys")
    anthropic = to_anthropic(projection)
    assert openai_problems(openai.messages) == []
    assert anthropic_problems(anthropic.messages) == []
    assert openai.repairs == () and anthropic.repairs == ()


@pytest.mark.parametrize("name", sorted(LONG))
def test_real_compact_boundary_becomes_one_checkpoint(name):  # T3 T4 K3
    entries = raw_entries(name)
    boundary = next(e for e in entries if e.get("subtype") == "compact_boundary")
    summary = next(e for e in entries if e.get("isCompactSummary"))
    result = import_claude_code(FIXTURES / name)
    assert result.checkpoints == 1
    cp_node = next(n for n in result.nodes if n.checkpoint)
    cp = cp_node.checkpoint
    assert cp_node.id == boundary["uuid"]
    assert cp.summary == summary["message"]["content"]
    assert cp.tokens_before == LONG[name] == boundary["compactMetadata"]["preTokens"]
    assert cp.first_kept_id is None  # Claude Code keeps nothing raw
    assert cp.details["trigger"] == boundary["compactMetadata"]["trigger"]
    assert summary["uuid"] not in {n.id for n in result.nodes}  # folded into the checkpoint
    # Followed across the boundary: the checkpoint hangs below the pre-compaction history.
    branch = healthy(result)
    position = branch.position(cp_node.id)
    assert position is not None and position > 100
    assert branch.nodes[0].message is not None
    # Projection: the summary, then only what came after the boundary.
    projection = project(branch)
    assert projection.checkpoint == cp_node
    after = [n.id for n in branch.nodes[position + 1:] if n.message]
    assert [n.id for n in projection.messages] == after
    text = to_openai(projection).messages[0]["content"]
    assert "This session is being continued" in text


@pytest.mark.parametrize("name", ALL)
def test_real_transcript_skips_and_counts_non_messages(name):  # D1
    entries = raw_entries(name)
    kinds = Counter(e["type"] for e in entries)
    result = import_claude_code(FIXTURES / name)
    skipped = result.skipped
    for kind in ("progress", "file-history-snapshot", "queue-operation"):
        assert skipped.get(kind, 0) == kinds.get(kind, 0)
    systems = Counter(f"system:{e['subtype']}" for e in entries
                      if e["type"] == "system" and e["subtype"] != "compact_boundary")
    for key, n in systems.items():
        assert skipped[key] == n
    assert result.warnings == ()
    assert result.metadata["session_id"] == entries[-1]["sessionId"]


def test_real_thinking_blocks_become_reasoning_parts():  # R2
    result = import_claude_code(FIXTURES / "tool_heavy.jsonl")
    reasoning = [p for n in result.nodes if n.message for p in n.message.parts
                 if isinstance(p, ReasoningPart)]
    assert len(reasoning) == 1
    assert reasoning[0].text.startswith("The user wants me to research")
    assert reasoning[0].signature


def test_real_ids_are_source_uuids_and_reimport_is_identical():  # C1
    first = import_claude_code(FIXTURES / "tool_heavy.jsonl")
    again = import_claude_code(FIXTURES / "tool_heavy.jsonl")
    assert first.nodes == again.nodes and first.leaf_id == again.leaf_id
    uuids = {e["uuid"] for e in raw_entries("tool_heavy.jsonl") if "uuid" in e}
    assert {n.id for n in first.nodes} <= uuids


# ----------------------------------------------------------------- hand-written cases


def entry(uuid, parent, kind="user", content="hi", **extra):
    base = {"uuid": uuid, "parentUuid": parent, "type": kind, "sessionId": "s1",
            "timestamp": "2026-01-01T00:00:00.000Z", "isSidechain": False}
    if kind == "user":
        base["message"] = {"role": "user", "content": content}
    elif kind == "assistant":
        base["message"] = {"id": extra.pop("msg_id"), "role": "assistant", "model": "claude-x",
                           "content": content,
                           "usage": extra.pop("usage", {"input_tokens": 1, "output_tokens": 1})}
    base.update(extra)
    return base


def write(tmp_path, entries, tail: str = "") -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n" + tail)
    return path


def use(call_id, name="Read"):
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"p": call_id}}


def res(call_id, content="ok", **kw):
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **kw}


def test_parallel_results_hanging_off_each_call_are_folded(tmp_path):  # K1
    entries = [
        entry("u1", None, content="do two things"),
        entry("a1", "u1", "assistant", [{"type": "text", "text": "ok"}], msg_id="m1"),
        entry("a2", "a1", "assistant", [use("c1")], msg_id="m1"),
        entry("a3", "a2", "assistant", [use("c2", "Grep")], msg_id="m1",
              usage={"input_tokens": 5, "output_tokens": 9}),
        entry("p1", "a3", "progress"),
        entry("r2", "p1", content=[res("c2", "two")]),  # result of c2 under the c2 entry
        entry("r1", "a2", content=[res("c1", [{"type": "text", "text": "one"}])]),
        entry("a4", "r1", "assistant", [{"type": "text", "text": "done"}], msg_id="m2"),
    ]
    result = import_claude_code(write(tmp_path, entries))
    ids = [n.id for n in result.nodes]
    assert ids == ["u1", "a1", "r2", "a4"]
    a1 = result.nodes[1].message
    assert [c.id for c in a1.tool_calls] == ["c1", "c2"]
    assert a1.usage.output == 9  # from the response's last entry
    tool = result.nodes[2].message
    assert tool.role == "tool"
    assert [(r.call_id, r.name, r.output) for r in tool.tool_results] == [
        ("c2", "Grep", "two"), ("c1", "Read", "one")]
    assert result.nodes[3].parent_id == "r2"  # a4's parent r1 was folded into r2
    assert result.leaf_id == "a4"
    assert result.skipped == {"progress": 1}
    assert result.metadata["merged_entries"] == {"assistant_block": 2, "parallel_tool_result": 1}


def test_response_continuing_after_an_early_tool_result_is_one_request(tmp_path):  # E1 K1
    """Claude Code runs a call as soon as its block streamed: A(c1) R1 A(c2) R2, one message
    id. It was one request: one assistant node with both calls, one tool node after it."""
    entries = [
        entry("u1", None),
        entry("a1", "u1", "assistant", [use("c1")], msg_id="m1",
              usage={"input_tokens": 3, "output_tokens": 1}),
        entry("r1", "a1", content=[res("c1", "one")]),
        entry("a2", "r1", "assistant", [use("c2")], msg_id="m1",
              usage={"input_tokens": 3, "output_tokens": 50}),
        entry("r2", "a2", content=[res("c2", "two")]),
        entry("a3", "r2", "assistant", [{"type": "text", "text": "next"}], msg_id="m2"),
        entry("r3", "a3", content=[res("c1", "late duplicate")]),
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert [(n.id, n.parent_id) for n in result.nodes] == [
        ("u1", None), ("a1", "u1"), ("r1", "a1"), ("a3", "r1"), ("r3", "a3")]
    a1, r1 = result.nodes[1].message, result.nodes[2].message
    assert [c.id for c in a1.tool_calls] == ["c1", "c2"] and a1.usage.output == 50
    assert [r.call_id for r in r1.tool_results] == ["c1", "c2"]
    assert result.nodes[3].message.role == "assistant"  # m2 is a new request


def test_second_result_for_same_call_is_a_fork_not_merged(tmp_path):  # T5
    entries = [
        entry("u1", None),
        entry("a1", "u1", "assistant", [use("c1")], msg_id="m1"),
        entry("r1", "a1", content=[res("c1", "first")]),
        entry("r1b", "a1", content=[res("c1", "retry")]),
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert [n.id for n in result.nodes] == ["u1", "a1", "r1", "r1b"]
    assert result.nodes[3].parent_id == "a1"
    assert result.leaf_id == "r1b"
    assert isinstance(build_branch(result.nodes, "r1"), Branch)


def test_boundary_follows_logical_parent_and_relinks_children(tmp_path):  # T1 K3
    entries = [
        entry("u1", None, content="first"),
        entry("a1", "u1", "assistant", [{"type": "text", "text": "answer"}], msg_id="m1"),
        entry("h1", "a1", "system", subtype="stop_hook_summary"),
        {"uuid": "b1", "parentUuid": None, "logicalParentUuid": "h1", "type": "system",
         "subtype": "compact_boundary", "timestamp": "2026-01-01T00:01:00Z",
         "compactMetadata": {"trigger": "manual", "preTokens": 1234}},
        entry("s1", "b1", content="This session is being continued... SUMMARY",
              isCompactSummary=True),
        entry("u2", "s1", content="next"),
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert [n.id for n in result.nodes] == ["u1", "a1", "b1", "u2"]
    cp = result.nodes[2]
    assert cp.parent_id == "a1"  # logical parent h1 was skipped: re-linked to a1
    assert cp.checkpoint.summary.endswith("SUMMARY")
    assert cp.checkpoint.tokens_before == 1234 and cp.checkpoint.first_kept_id is None
    assert result.nodes[3].parent_id == "b1"
    projection = project(healthy(result))
    assert [n.id for n in projection.messages] == ["u2"]
    assert result.metadata["compactions"] == [{"id": "b1", "trigger": "manual",
                                               "pre_tokens": 1234}]


def test_boundary_without_summary_is_reported(tmp_path):  # D1
    entries = [
        entry("u1", None),
        {"uuid": "b1", "parentUuid": None, "logicalParentUuid": "u1", "type": "system",
         "subtype": "compact_boundary", "compactMetadata": {"preTokens": 10}},
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert result.checkpoints == 1 and result.nodes[1].checkpoint.summary == ""
    assert any("without its summary" in w for w in result.warnings)


def test_sidechain_entries_are_skipped_and_counted(tmp_path):  # D1
    entries = [
        entry("u1", None),
        entry("x1", "u1", isSidechain=True, content="subagent prompt"),
        entry("x2", "x1", "assistant", [{"type": "text", "text": "sub"}], msg_id="mx",
              isSidechain=True),
        entry("a1", "u1", "assistant", [{"type": "text", "text": "main"}], msg_id="m1"),
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert [n.id for n in result.nodes] == ["u1", "a1"]
    assert result.skipped == {"sidechain": 2}
    assert result.leaf_id == "a1"


def test_tool_result_error_images_and_text_stay_in_one_tool_message(tmp_path):  # R4 R5
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "aGVsbG8="}}
    entries = [
        entry("u1", None, content=[{"type": "text", "text": "look"}, image]),
        entry("a1", "u1", "assistant", [use("c1", "Screenshot")], msg_id="m1"),
        entry("r1", "a1", content=[res("c1", [{"type": "text", "text": "denied"}, image],
                                       is_error=True),
                                   {"type": "text", "text": "note from hook"}]),
    ]
    result = import_claude_code(write(tmp_path, entries))
    user, _, tool = (n.message for n in result.nodes)
    assert user.role == "user"
    assert [type(p).__name__ for p in user.parts] == ["TextPart", "FilePart"]
    assert user.parts[1] == FilePart(name="image-2.png", media_type="image/png", size=5)
    assert tool.role == "tool"
    result_part = tool.parts[0]
    assert isinstance(result_part, ToolResultPart)
    assert result_part.is_error and result_part.output == "denied"
    assert result_part.name == "Screenshot"
    assert [type(p).__name__ for p in tool.parts[1:]] == ["TextPart", "FilePart"]
    assert "aGVsbG8=" not in json.dumps([n.model_dump(mode="json") for n in result.nodes])


def test_api_error_message_is_an_errored_reply(tmp_path):  # E1
    entries = [
        entry("u1", None),
        entry("a1", "u1", "assistant", [{"type": "text", "text": "API Error: 529"}],
              msg_id="m1", isApiErrorMessage=True,
              usage={"input_tokens": 0, "output_tokens": 0}),
    ]
    entries[1]["message"]["model"] = "<synthetic>"
    result = import_claude_code(write(tmp_path, entries))
    reply = result.nodes[1].message
    assert reply.status == "error" and reply.model is None
    assert result.metadata["models"] == []


def test_truncated_last_line_and_bad_lines_are_warned_not_fatal(tmp_path):  # D1 D2
    entries = [entry("u1", None),
               entry("a1", "u1", "assistant", [{"type": "text", "text": "x"}], msg_id="m1")]
    path = write(tmp_path, entries, tail='{"uuid": "u2", "parentUuid": "a1", "type": "us')
    result = import_claude_code(path)
    assert [n.id for n in result.nodes] == ["u1", "a1"]
    assert result.skipped["unreadable_line"] == 1
    assert len(result.warnings) == 1 and result.warnings[0].startswith("session.jsonl:3: ")


def test_invalid_entry_is_skipped_with_its_line_and_children_relinked(tmp_path):  # D1
    entries = [
        entry("u1", None),
        {"uuid": "bad", "parentUuid": "u1", "type": "assistant", "message": "not an object"},
        entry("u2", "bad", content="again"),
    ]
    result = import_claude_code(write(tmp_path, entries))
    assert [(n.id, n.parent_id) for n in result.nodes] == [("u1", None), ("u2", "u1")]
    assert result.skipped == {"invalid_entry": 1}
    assert result.warnings[0].startswith("session.jsonl:2: unreadable 'assistant' entry")


def test_missing_parent_and_cycle_never_leave_a_dangling_node(tmp_path):  # D1
    entries = [
        entry("u1", "ghost"),
        entry("c1", "c2"),
        entry("c2", "c1", content="loop"),
    ]
    result = import_claude_code(write(tmp_path, entries))
    ids = {n.id for n in result.nodes}
    assert all(n.parent_id is None or n.parent_id in ids for n in result.nodes)
    assert any("ghost is not in the file" in w for w in result.warnings)
    assert any("cycle" in w for w in result.warnings)
    assert isinstance(build_branch(result.nodes, result.leaf_id), Branch)


def test_duplicate_uuid_keeps_the_first(tmp_path):  # D1
    entries = [entry("u1", None, content="one"), entry("u1", None, content="two")]
    result = import_claude_code(write(tmp_path, entries))
    assert [n.message.text for n in result.nodes] == ["one"]
    assert result.skipped == {"duplicate_uuid": 1}


def test_file_without_messages_is_fatal(tmp_path):  # D2
    path = write(tmp_path, [{"type": "file-history-snapshot", "messageId": "x"}])
    with pytest.raises(ImportFormatError, match=r"session\.jsonl: no Claude Code entries"):
        import_claude_code(path)
    only_progress = write(tmp_path, [entry("p1", None, "progress")])
    with pytest.raises(ImportFormatError, match="no conversation messages"):
        import_claude_code(only_progress)
