"""Projection (SPEC T2-T4) and provider-valid export."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import (
    Checkpoint,
    FilePart,
    Ledger,
    LedgerEntry,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from contextfold.core.view.projection import SUMMARY_HEADER, checkpoint_text, project

from ...builders import assistant, branch_of, chain, extend, tool_call, tool_result, user


def ids(projection):
    return [n.id for n in projection.messages]


def test_spec_example_projection():  # T3
    cp = Checkpoint(summary="S1", first_kept_id="n4", tokens_before=100)
    nodes = chain([user("U1"), assistant("A1"), user("U2"), assistant("A2"),
                   user("U3"), assistant("A3"), cp])
    p = project(branch_of(nodes))
    assert p.summary is not None and p.summary.summary == "S1"
    assert ids(p) == ["n4", "n5"]
    nodes = extend(nodes, [user("U4")], "x")
    p = project(branch_of(nodes))
    assert ids(p) == ["n4", "n5", "x0"]
    assert p.after_checkpoint == 2


def test_tail_is_read_in_place_not_copied():  # T2
    cp = Checkpoint(summary="S1", first_kept_id="n2", tokens_before=100)
    nodes = chain([user("U1"), assistant("A1"), user("U2"), assistant("A2"), cp])
    branch = branch_of(nodes)
    p = project(branch)
    # The projected tail nodes are the stored nodes themselves, and nothing follows C.
    assert [id(n) for n in p.messages] == [id(nodes[2]), id(nodes[3])]
    assert branch.nodes[-1].checkpoint is cp


def test_only_latest_checkpoint_is_projected():  # T4
    c1 = Checkpoint(summary="OLD", first_kept_id="n2", tokens_before=100)
    nodes = chain([user("U1"), assistant("A1"), user("U2"), assistant("A2"), c1,
                   user("U3"), assistant("A3")])
    c2 = Checkpoint(summary="NEW", first_kept_id="n5", tokens_before=100)
    nodes = extend(nodes, [c2], "c")
    p = project(branch_of(nodes))
    assert p.summary.summary == "NEW"
    assert ids(p) == ["n5", "n6"]
    text = str(to_openai(p).messages)
    assert "OLD" not in text and "NEW" in text


def test_checkpoint_with_nothing_kept_raw():  # K3 T3
    cp = Checkpoint(summary="S", first_kept_id=None, tokens_before=100)
    nodes = chain([user("U1"), assistant("A1"), cp, user("U2")])
    p = project(branch_of(nodes))
    assert ids(p) == ["n3"]


def test_summary_goes_in_as_marked_user_message():  # S5 T3
    cp = Checkpoint(summary="## Goal\nfind papers", first_kept_id="n2", tokens_before=9,
                    ledger=Ledger(entries=(LedgerEntry(kind="zotero_item", value="NM66T6EF"),)))
    nodes = chain([user("U1"), assistant("A1"), user("U2"), assistant("A2"), cp])
    p = project(branch_of(nodes))
    oa = to_openai(p, system="sys").messages
    assert oa[0] == {"role": "system", "content": "sys"}
    assert oa[1]["role"] == "user" and oa[1]["content"].startswith(SUMMARY_HEADER)
    assert "NM66T6EF" in oa[1]["content"]
    an = to_anthropic(p, system="sys")
    # The summary and the first kept user message share one user turn (roles alternate).
    assert an.messages[0]["role"] == "user"
    assert an.messages[0]["content"][0]["text"] == checkpoint_text(cp)
    assert an.messages[0]["content"][1]["text"] == "U2"
    assert an.system == "sys"
    assert not anthropic_problems(an.messages)


def test_orphan_tool_result_is_dropped_and_reported():
    nodes = chain([user("q"), tool_result("ghost"), assistant("a")])
    res = to_openai(project(branch_of(nodes)))
    assert not openai_problems(res.messages)
    assert any("ghost" in r for r in res.repairs)


def test_aborted_call_without_result_is_dropped():
    nodes = chain([user("q"), tool_call("c1", text="let me look", status="aborted"),
                   user("again"), assistant("ok")])
    for export, check in ((to_openai, openai_problems), (to_anthropic, anthropic_problems)):
        res = export(project(branch_of(nodes)))
        assert not check(res.messages), res.messages
        assert "c1" not in str(res.messages)


def test_split_assistant_entries_are_grouped():
    # Claude Code writes one entry per content block: text, call A, call B, then results.
    nodes = chain([user("q"), assistant("thinking aloud"), tool_call("a"), tool_call("b"),
                   tool_result("a"), tool_result("b"), assistant("done")])
    oa = to_openai(project(branch_of(nodes))).messages
    assert not openai_problems(oa)
    assert [c["id"] for c in oa[1]["tool_calls"]] == ["a", "b"]
    an = to_anthropic(project(branch_of(nodes))).messages
    assert not anthropic_problems(an)


def test_history_starting_with_assistant_gets_user_first():
    nodes = chain([assistant("hello"), user("hi")])
    for export, check in ((to_openai, openai_problems), (to_anthropic, anthropic_problems)):
        res = export(project(branch_of(nodes)))
        assert not check(res.messages)
        assert res.repairs


def test_errors_denials_files_and_resources_are_exported_as_text():  # R4 R5 R6
    msgs = [
        user("find it"),
        Message(role="assistant", parts=(ToolCallPart(id="c1", name="zotero_search", input={}),
                                         ToolCallPart(id="c2", name="rm", input={}))),
        Message(role="tool", parts=(
            ToolResultPart(call_id="c1", output="1 hit"),
            ZoteroItemPart(item_key="NM66T6EF", title="Paper", citation="Doe 2020"),
        )),
        Message(role="tool", parts=(ToolResultPart(call_id="c2", output="", denied=True),)),
        Message(role="user", parts=(TextPart(text="see"),
                                    FilePart(name="fig.png", media_type="image/png"))),
        Message(role="assistant", parts=(ReasoningPart(text="SECRET-THOUGHT"),
                                         TextPart(text="ok"))),
    ]
    p = project(branch_of(chain(msgs)))
    text = str(to_openai(p).messages)
    assert "NM66T6EF" in text and "Doe 2020" in text
    assert "denied" in text
    assert "fig.png" in text and "image/png" in text
    assert "SECRET-THOUGHT" not in text
    an = to_anthropic(p).messages
    assert not anthropic_problems(an)
    denied = [b for m in an for b in m["content"]
              if b.get("type") == "tool_result" and b["tool_use_id"] == "c2"]
    assert denied[0]["is_error"] is True


# --- property: whatever the history holds, exports are provider-valid -----------------

_roles = st.sampled_from(["user", "assistant", "call", "result", "aborted_call", "empty"])


def _message(kind: str, i: int, call_ids: list[str]) -> Message:
    if kind == "user":
        return user(f"u{i}")
    if kind == "assistant":
        return assistant(f"a{i}")
    if kind == "empty":
        return Message(role="assistant", parts=(), status="error")
    if kind in ("call", "aborted_call"):
        cid = f"c{i}"
        call_ids.append(cid)
        return tool_call(cid, status="aborted" if kind == "aborted_call" else "complete")
    cid = call_ids[i % len(call_ids)] if call_ids else f"orphan{i}"
    return tool_result(cid)


@settings(max_examples=300, deadline=None)
@given(st.lists(_roles, min_size=1, max_size=30), st.booleans())
def test_any_history_exports_provider_valid(kinds, with_checkpoint):
    call_ids: list[str] = []
    msgs = [_message(k, i, call_ids) for i, k in enumerate(kinds)]
    nodes = chain(msgs)
    if with_checkpoint:
        users = [n for n in nodes if n.is_user_message]
        first = users[-1].id if users else None
        nodes = extend(nodes, [Checkpoint(summary="S", first_kept_id=first, tokens_before=1)], "c")
    p = project(branch_of(nodes))
    oa = to_openai(p, system="s").messages
    an = to_anthropic(p).messages
    if len(oa) > 1:
        assert openai_problems(oa) == []
        assert anthropic_problems(an) == []
