"""OpenAI and Anthropic message lists -> linear chains, and projections -> request bodies."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import FilePart, ReasoningPart, ToolCallPart, ToolResultPart
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.projection import project
from contextfold.formats import (
    ImportFormatError,
    detect_format,
    export_session,
    import_anthropic_messages,
    import_file,
    import_openai_messages,
)
from tests.builders import chain, turn

OPENAI = [
    {"role": "system", "content": "You are helpful."},
    {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGVsbG8="}}]},
    {"role": "assistant", "content": None, "reasoning_content": "look it up",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "search", "arguments": "{\"q\": \"cat\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "fetch", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
    {"role": "tool", "tool_call_id": "call_2",
     "content": [{"type": "text", "text": "page"}]},
    {"role": "assistant", "content": "A cat.", "model": "gpt-4o",
     "usage": {"prompt_tokens": 120, "completion_tokens": 4}},
    {"role": "system", "content": "Mid-session note."},
    {"role": "user", "content": "thanks"},
]

ANTHROPIC = {
    "system": [{"type": "text", "text": "You are Claude."}],
    "messages": [
        {"role": "user", "content": "find DOIs"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "plan", "signature": "s1"},
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": "tu_1", "name": "zotero_search", "input": {"q": "x"}}],
         "usage": {"input_tokens": 50, "output_tokens": 10, "cache_read_input_tokens": 900,
                   "cache_creation_input_tokens": 20}, "model": "claude-sonnet-4-5"},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "is_error": True,
             "content": [{"type": "text", "text": "rate limited"}]},
            {"type": "text", "text": "try again"}]},
        {"role": "assistant", "content": "Done."},
    ],
}


def healthy(result) -> Branch:
    branch = build_branch(result.nodes, result.leaf_id)
    assert isinstance(branch, Branch), branch
    return branch


def test_openai_list_becomes_linear_chain_with_system_in_metadata():  # R1 R5 E1
    result = import_openai_messages(OPENAI)
    assert result.format == "openai"
    assert result.metadata["system"] == "You are helpful.\n\nBe brief."
    assert result.skipped == {"system_prompt": 2}
    nodes = result.nodes
    assert [n.message.role for n in nodes] == [
        "user", "assistant", "tool", "tool", "assistant", "system", "user"]
    assert all(n.parent_id == p.id for p, n in pairwise(nodes))
    assert nodes[0].parent_id is None and result.leaf_id == nodes[-1].id
    assert nodes[0].message.parts[1] == FilePart(name="image-2.jpg", media_type="image/jpeg",
                                                 size=5)
    reply = nodes[1].message
    assert isinstance(reply.parts[0], ReasoningPart)
    assert reply.tool_calls == (ToolCallPart(id="call_1", name="search", input={"q": "cat"}),
                                ToolCallPart(id="call_2", name="fetch", input="not json"))
    assert nodes[3].message.parts == (ToolResultPart(call_id="call_2", name="fetch",
                                                     output="page"),)
    usage = nodes[4].message.usage
    assert (usage.input, usage.output, usage.model) == (120, 4, "gpt-4o")
    assert result.metadata["models"] == ["gpt-4o"]


def test_openai_roundtrip_through_projection_and_export():  # T2
    result = import_openai_messages(OPENAI)
    body = export_session(project(healthy(result)), "openai", system=result.metadata["system"])
    messages = body["messages"]
    assert openai_problems(messages) == []
    assert messages[0] == {"role": "system", "content": "You are helpful.\n\nBe brief."}
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert messages[2]["tool_calls"][0]["function"] == {"name": "search",
                                                        "arguments": "{\"q\": \"cat\"}"}


def test_anthropic_list_tool_result_user_becomes_tool_message():  # R4 R2
    result = import_anthropic_messages(ANTHROPIC)
    assert result.metadata["system"] == "You are Claude."
    roles = [n.message.role for n in result.nodes]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool = result.nodes[2].message
    assert tool.tool_results == (ToolResultPart(call_id="tu_1", name="zotero_search",
                                                output="rate limited", is_error=True),)
    assert tool.text == "try again"
    usage = result.nodes[1].message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (50, 10, 900, 20)
    body = export_session(project(healthy(result)), "anthropic", system="You are Claude.")
    assert body["system"] == "You are Claude."
    assert anthropic_problems(body["messages"]) == []
    assert body["messages"][2]["content"][0]["is_error"] is True


def test_ids_are_deterministic_and_content_addressed(tmp_path):  # C1
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": OPENAI}))
    first, again = import_file(path), import_file(path)
    assert [n.id for n in first.nodes] == [n.id for n in again.nodes]
    assert first.nodes[0].id.startswith("chat-") and first.nodes[0].id.endswith("-2")
    other = tmp_path / "other" / "chat.json"
    other.parent.mkdir()
    other.write_text(json.dumps({"messages": [*OPENAI, {"role": "user", "content": "more"}]}))
    assert not {n.id for n in first.nodes} & {n.id for n in import_file(other).nodes}
    times = [n.created_at for n in first.nodes]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_detects_list_shapes(tmp_path):  # D1
    cases = {
        "openai.json": OPENAI,
        "anthropic.json": ANTHROPIC,
        "anthropic_list.json": ANTHROPIC["messages"],
        "plain.json": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    }
    expected = {"openai.json": "openai", "anthropic.json": "anthropic",
                "anthropic_list.json": "anthropic", "plain.json": "openai"}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(data, indent=2))
        assert detect_format(path) == expected[name], name
        assert import_file(path).format == expected[name]
    jsonl = tmp_path / "lines.jsonl"
    jsonl.write_text("\n".join(json.dumps(m) for m in OPENAI))
    assert detect_format(jsonl) == "openai"
    assert import_file(jsonl).messages == 7


def test_bad_messages_are_skipped_with_position(tmp_path):  # D1
    data = [{"role": "user", "content": "hi"}, "junk", {"role": "tool", "content": "x"},
            {"role": "wizard", "content": "?"}, {"role": "assistant", "content": ""},
            {"role": "assistant", "content": "ok"}]
    result = import_openai_messages(data, name="t")
    assert [n.message.text for n in result.nodes] == ["hi", "ok"]
    assert result.skipped == {"empty_message": 1, "invalid_message": 3}
    assert [w.split(":")[1] for w in result.warnings] == [
        "messages[1]", "messages[2]", "messages[3]"]
    assert "without a tool_call_id" in result.warnings[1]
    assert "unknown role 'wizard'" in result.warnings[2]


def test_anthropic_rejects_openai_roles_but_keeps_the_rest():  # D1
    result = import_anthropic_messages([{"role": "system", "content": "x"},
                                        {"role": "user", "content": "hi"}])
    assert result.messages == 1 and result.skipped == {"invalid_message": 1}


def test_not_a_message_list_is_fatal(tmp_path):  # D2
    for content, reason in [
        ({"items": []}, "'messages' list"),
        ([{"role": "system", "content": "only a system prompt"}], "no conversation messages"),
        ([], "no conversation messages"),
        (42, "expected a list of messages"),
    ]:
        path = tmp_path / "x.json"
        path.write_text(json.dumps(content))
        with pytest.raises(ImportFormatError, match=reason) as err:
            import_openai_messages(path)
        assert str(err.value).startswith("x.json")


def test_export_session_shapes_and_validity():  # T3
    nodes = chain([m for i in range(3) for m in turn(i, tools=2)])
    projection = project(build_branch(nodes, nodes[-1].id))
    openai = export_session(projection, "openai", system="S")
    assert set(openai) == {"messages"}
    assert openai["messages"] == to_openai(projection, system="S").messages
    anthropic = export_session(projection, "anthropic")
    assert set(anthropic) == {"messages"}  # no null system
    assert anthropic["messages"] == to_anthropic(projection).messages
    assert export_session(projection, "anthropic", system="S")["system"] == "S"
    with pytest.raises(ValueError, match="unknown export format 'gemini'"):
        export_session(projection, "gemini")  # type: ignore[arg-type]


def test_a_call_only_assistant_turn_is_exported_with_empty_text_not_null() -> None:
    """`"content": null` beside tool calls is valid OpenAI, but llama.cpp's server answers it
    with a 500; `""` is valid for both, so the summariser's Q3 request (the session's own
    messages) and every request built from the projection work there too."""
    from contextfold.core.render.export import render_openai
    from contextfold.core.values.messages import Message

    call = Message(role="assistant", parts=[ToolCallPart(id="c1", name="read", input={})])
    [rendered] = render_openai(call)
    assert rendered["content"] == "" and rendered["tool_calls"][0]["id"] == "c1"
    assert openai_problems([{"role": "user", "content": "q"}, rendered,
                            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]) == []
