"""Serialising history for the summariser (SPEC R1-R6) and chunking under a hard bound."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.render.serialize import (
    ChunkBudgetTooSmall,
    SerializeLimits,
    serialize_chunk,
    serialize_message,
    serialize_nodes,
    split_into_chunks,
)
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.values.messages import (
    AnnotationPart,
    ApprovalPart,
    Checkpoint,
    CollectionPart,
    EpubLocationPart,
    FilePart,
    Message,
    Node,
    PdfPagePart,
    ReasoningPart,
    TagPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from tests.builders import assistant, chain, tool_call, tool_result, user

FIXTURES = Path(__file__).parents[2] / "fixtures"


def load_pi_messages(limit: int | None = None) -> list[Message]:
    """A tiny reader of the real Pi session (v1 format) into core messages."""
    out: list[Message] = []
    with open(FIXTURES / "pi-mono" / "large-session.jsonl", encoding="utf-8") as fh:
        for line in fh:
            entry = json.loads(line)
            if entry.get("type") != "message":
                continue
            m = entry["message"]
            blocks = m["content"] if isinstance(m["content"], list) else [
                {"type": "text", "text": m["content"]}
            ]
            if m["role"] == "user":
                parts = tuple(TextPart(text=b["text"]) for b in blocks if b["type"] == "text")
                out.append(Message(role="user", parts=parts))
            elif m["role"] == "assistant":
                parts_a: list = []
                for b in blocks:
                    if b["type"] == "text":
                        parts_a.append(TextPart(text=b["text"]))
                    elif b["type"] == "thinking":
                        parts_a.append(ReasoningPart(text=b.get("thinking", "")))
                    elif b["type"] == "toolCall":
                        parts_a.append(ToolCallPart(id=b["id"], name=b["name"],
                                                    input=b.get("arguments") or {}))
                status = {"aborted": "aborted", "error": "error"}.get(m.get("stopReason"),
                                                                      "complete")
                out.append(Message(role="assistant", parts=tuple(parts_a), status=status))
            elif m["role"] == "toolResult":
                text = "\n".join(b.get("text", "") for b in blocks if b["type"] == "text")
                out.append(Message(role="tool", parts=(ToolResultPart(
                    call_id=m["toolCallId"], name=m.get("toolName"), output=text,
                    is_error=bool(m.get("isError"))),)))
            if limit is not None and len(out) >= limit:
                break
    return out


# --------------------------------------------------------------------------- messages


def test_text_keeps_content_under_role_label():  # R1
    assert serialize_message(user("find papers on RLHF")) == "[User]\nfind papers on RLHF"
    assert serialize_message(assistant("Here they are.")) == "[Assistant]\nHere they are."
    system = Message(role="system", parts=(TextPart(text="be brief"),))
    assert serialize_message(system) == "[System]\nbe brief"


def test_reasoning_is_left_out():  # R2
    msg = Message(role="assistant", parts=(ReasoningPart(text="SECRET-THOUGHT"),
                                          TextPart(text="visible")))
    text = serialize_message(msg)
    assert "SECRET-THOUGHT" not in text
    assert "visible" in text
    only_reasoning = Message(role="assistant", parts=(ReasoningPart(text="hmm"),))
    assert serialize_message(only_reasoning) == ""


def test_tool_call_kept_as_name_and_json_args():  # R3
    msg = tool_call("c1", "zotero_search", {"q": "attention is all you need", "limit": 5})
    text = serialize_message(msg)
    assert '[Tool call] zotero_search({"q": "attention is all you need", "limit": 5})' in text


def test_long_args_and_results_clipped_head_and_tail_with_marker():  # R3
    limits = SerializeLimits(tool_result_chars=200, tool_args_chars=100)
    args = {"content": "HEAD" + "a" * 5000 + "TAIL"}
    call_text = serialize_message(tool_call("c1", "write", args), limits)
    assert "HEAD" in call_text and 'TAIL"}' in call_text
    assert "characters omitted" in call_text and len(call_text) < 300
    result_text = serialize_message(tool_result("c1", "START" + "x" * 9000 + "END"), limits,
                                    tool_names={"c1": "write"})
    assert result_text.startswith("[Tool result: write]\nSTART")
    assert result_text.endswith("END")
    assert re.search(r"\[… \d+ characters omitted …\]", result_text)
    assert len(result_text) < 400


def test_errors_denials_and_rejected_approvals_are_explicit():  # R4
    error = Message(role="tool", parts=(ToolResultPart(call_id="c1", name="bash",
                                                       output="exit 1", is_error=True),))
    denied = Message(role="tool", parts=(ToolResultPart(call_id="c2", name="rm", denied=True),))
    rejected = Message(role="user", parts=(ApprovalPart(call_id="c3", state="rejected"),))
    assert serialize_message(error).startswith("[Tool result: bash] [Tool error]\nexit 1")
    assert serialize_message(denied).startswith("[Tool result: rm] [Denied by user]")
    text = serialize_message(rejected, tool_names={"c3": "delete_item"})
    assert "[Approval rejected]" in text and "delete_item" in text and "c3" in text


def test_failed_and_aborted_replies_are_stated():  # R4
    failed = Message(role="assistant", parts=(TextPart(text="partial"),), status="error")
    aborted = Message(role="assistant", parts=(), status="aborted")
    assert "[Reply failed" in serialize_message(failed)
    assert serialize_message(aborted) == "[Assistant]\n[Reply aborted before it completed]"


def test_files_become_name_and_mime_never_bytes():  # R5
    msg = Message(role="user", parts=(TextPart(text="see this"),
                                      FilePart(name="plot.png", media_type="image/png",
                                               size=123456)))
    assert serialize_message(msg) == "[User]\nsee this\n[file: plot.png (image/png)]"


def test_resources_keep_exactly_the_r6_fields():  # R6
    parts = (
        ToolResultPart(call_id="c1", name="zotero", output="ok"),
        ZoteroItemPart(item_key="NM66T6EF", title="How Earthquakes Work",
                       citation="HowStuffWorks (2011)"),
        PdfPagePart(attachment_name="paper.pdf", attachment_key="TM8QRS36", page=4,
                    total_pages=12, text="P" * 3000),
        EpubLocationPart(attachment_name="book.epub", section_index=3, href="ch3.xhtml",
                         cfi="/6/8!/4/2"),
        AnnotationPart(annotation_key="ANN12345", parent_item_key="NM66T6EF",
                       text="quoted sentence", comment="important", page="7"),
        CollectionPart(key="9KH9TNSJ", name="Earthquakes"),
        TagPart(tag="seismology"),
    )
    text = serialize_message(Message(role="tool", parts=parts),
                             SerializeLimits(resource_text_chars=100))
    for needed in ("NM66T6EF", "How Earthquakes Work", "HowStuffWorks (2011)",
                   "paper.pdf", "TM8QRS36", "page 4 of 12", "section 3", "ch3.xhtml",
                   "/6/8!/4/2", "ANN12345", "quoted sentence", "important", "page 7",
                   "9KH9TNSJ", "Earthquakes", "seismology"):
        assert needed in text, needed
    assert "P" * 200 not in text  # page content clipped to the resource limit


def test_tool_result_named_after_its_call_and_checkpoints_skipped():  # R1, R3
    nodes = chain([
        user("q"),
        tool_call("c1", "read", {"path": "src/a.py"}),
        tool_result("c1", "contents"),
        Checkpoint(summary="OLD SUMMARY", first_kept_id=None, tokens_before=1),
        assistant("done"),
    ])
    text = serialize_nodes(nodes)
    assert "[Tool result: read]\ncontents" in text
    assert "OLD SUMMARY" not in text
    assert text.index("[User]") < text.index("[Tool call]") < text.index("done")


def test_limits_scale_down_for_small_summarisers():  # R3
    big, small = SerializeLimits.for_budget(200_000), SerializeLimits.for_budget(4_000)
    assert big == SerializeLimits()
    assert small.tool_result_chars < big.tool_result_chars / 5
    assert small.tool_result_chars > 0
    with pytest.raises(ValueError, match="summarizer_tokens"):
        SerializeLimits.for_budget(0)


# --------------------------------------------------------------------------- chunking

_SAFE_TEXT = st.text(alphabet="abcdefghij klmnop.,\n", min_size=0, max_size=400)


@st.composite
def message_lists(draw: st.DrawFn) -> list[Message]:
    msgs: list[Message] = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "result", "error", "resource",
                                     "reasoning"]))
        body = draw(_SAFE_TEXT) * draw(st.integers(1, 20))
        if kind == "user":
            msgs.append(user(body or "q"))
        elif kind == "assistant":
            msgs.append(assistant(body or "a"))
        elif kind == "call":
            msgs.append(tool_call(f"c{i}", "grep", {"pattern": body}))
        elif kind == "result":
            msgs.append(tool_result(f"c{i}", body))
        elif kind == "error":
            msgs.append(tool_result(f"c{i}", body, is_error=True))
        elif kind == "resource":
            msgs.append(Message(role="tool", parts=(
                ToolResultPart(call_id=f"c{i}", output=body),
                PdfPagePart(attachment_name="a.pdf", page=1, text=body))))
        else:
            msgs.append(Message(role="assistant", parts=(ReasoningPart(text=body),)))
    return msgs


def _labels(text: str) -> list[str]:
    return re.findall(r"^\[(?:User|Assistant|System|Tool result[^\]]*)\]", text, re.MULTILINE)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(), st.integers(30, 3000), st.sampled_from([estimate_text, len]))
def test_chunks_hold_every_message_exactly_once_in_order(msgs, max_tokens, count):  # R3
    nodes = chain(msgs)
    limits = SerializeLimits(tool_result_chars=500, tool_args_chars=300, resource_text_chars=200)
    chunks = split_into_chunks(nodes, max_tokens, limits, count)
    flat = [n.id for chunk in chunks for n in chunk]
    assert flat == [n.id for n in nodes]
    assert all(chunks)
    for chunk in chunks:
        if len(chunk) > 1:  # a multi-message chunk fits without any extra clipping
            assert count(serialize_nodes(chunk, limits)) <= max_tokens
    if count is len:  # an additive counter: greedy means no chunk could take the next node
        for chunk, nxt in itertools.pairwise(chunks):
            grown = serialize_nodes((*chunk, nxt[0]), limits)
            if serialize_nodes((nxt[0],), limits):
                assert len(grown) > max_tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists(), st.integers(60, 2000), st.sampled_from([estimate_text, len]))
def test_serialized_chunk_never_exceeds_bound_and_keeps_every_message(msgs, max_tokens, count):
    # R3: hard bound; no message silently left out (each visible message keeps its label).
    nodes = chain(msgs)
    for chunk in split_into_chunks(nodes, max_tokens, SerializeLimits(), count):
        try:
            text = serialize_chunk(chunk, max_tokens, SerializeLimits(), count)
        except ChunkBudgetTooSmall:
            # Only legitimate when even the bare labels do not fit.
            labels = "\n\n".join(f"{lab} […]" for lab in _labels(serialize_nodes(chunk)))
            assert count(labels) > max_tokens
            continue
        assert count(text) <= max_tokens
        expected = [
            _labels(b)[0] for n in chunk
            if (b := serialize_message(n.message, tool_names={})) and _labels(b)
        ]
        got = _labels(text)
        it = iter(got)
        assert all(label in it for label in expected), (expected, got)  # order kept


def test_oversized_single_message_is_clipped_harder_not_dropped():  # R3
    nodes = chain([user("start"), tool_result("c1", "Z" * 200_000), assistant("end")])
    text = serialize_chunk(nodes, 300)
    assert estimate_text(text) <= 300
    assert "[User]\nstart" in text and "[Tool result: c1]" in text and "end" in text
    assert "characters omitted" in text


def test_chunk_bound_too_small_for_labels_raises_clear_error():  # R3
    nodes = chain([user("a" * 50) for _ in range(40)])
    with pytest.raises(ChunkBudgetTooSmall, match="cannot hold even the labels of 40 messages"):
        serialize_chunk(nodes, 20)


def test_real_pi_session_chunks_fit_and_cover_everything():  # R1-R3 on real data
    nodes = chain(load_pi_messages(limit=400))
    bound = 6_000
    limits = SerializeLimits.for_budget(bound)
    chunks = split_into_chunks(nodes, bound, limits)
    assert [n.id for c in chunks for n in c] == [n.id for n in nodes]
    assert len(chunks) > 3
    for chunk in chunks:
        text = serialize_chunk(chunk, bound, limits)
        assert estimate_text(text) <= bound
    whole = serialize_nodes(nodes, limits)
    assert "[Tool call] read(" in whole and "[Tool error]" in whole


def test_checkpoint_nodes_are_not_chunked():  # R1
    nodes: list[Node] = chain([
        user("q"), Checkpoint(summary="s", first_kept_id=None, tokens_before=1), assistant("a"),
    ])
    chunks = split_into_chunks(nodes, 1000)
    assert [n.id for c in chunks for n in c] == ["n0", "n2"]
