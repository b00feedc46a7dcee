"""The parts of `contextfold mcp` that need no server: the working directory an agent states
(kept by the proxy), the client's recall tool names, and the recall note naming them (L6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.recall.recall_text import client_recall_tools
from contextfold.core.text.text_estimate import estimate_text
from contextfold.core.view.projection import RECALL_NOTE, recall_note
from contextfold.mcp.which import root_directories
from contextfold.proxy.workdir import working_directory
from tests.builders import user


def test_the_working_directory_each_agent_states():
    # Claude Code / OpenCode: in the system prompt; Codex: an environment_context message.
    assert working_directory("<env>\nWorking directory: /home/ada/repo\n</env>", []) == \
        "/home/ada/repo"
    assert working_directory("Primary working directory: /srv/app/", []) == "/srv/app"
    codex = user("<environment_context>\n  <cwd>/work/proj</cwd>\n</environment_context>")
    assert working_directory(None, [codex]) == "/work/proj"
    assert working_directory("Working directory: C:\\Users\\ada\\repo", []) == \
        "C:\\Users\\ada\\repo"


def test_a_relative_or_late_statement_is_not_taken():
    assert working_directory("Working directory: repo", []) is None
    late = [user("hi"), user("ok"), user("go"), user("Working directory: /etc")]
    assert working_directory(None, late) is None


def test_client_recall_tools_need_both_under_one_prefix():
    assert client_recall_tools(["read", "mcp__contextfold__history_search",
                                "mcp__contextfold__history_expand"]) == (
        "mcp__contextfold__history_search", "mcp__contextfold__history_expand")
    assert client_recall_tools(["contextfold_history_search", "contextfold_history_expand"])
    # The runtime's own tools are named by the default note already.
    assert client_recall_tools(["history_search", "history_expand"]) is None
    assert client_recall_tools(["a_history_search", "b_history_expand"]) is None


def test_the_note_names_the_tools():
    note = recall_note(("mcp__contextfold__history_search", "mcp__contextfold__history_expand"))
    assert "mcp__contextfold__history_search" in note and note != RECALL_NOTE
    assert recall_note(None) == RECALL_NOTE


@given(st.text(min_size=0, max_size=120))
def test_the_named_note_never_costs_more_than_the_default_l6(prefix):
    # The checkpoint was sized with the default note: naming the tools never grows it.
    note = recall_note((prefix + "history_search", prefix + "history_expand"))
    for family in (None, "claude", "gpt"):
        assert estimate_text(note, family) <= estimate_text(RECALL_NOTE, family)


def test_roots_are_local_directories():
    assert root_directories(["file:///home/ada/my%20repo", "https://example.com/x"]) == (
        "/home/ada/my repo",)


def test_results_of_the_mcp_recall_tools_are_not_indexed_l1():
    # A recall result quotes other messages: indexed, every later search would find it.
    from contextfold.core.recall.recall_text import indexed_text, is_recall_tool
    from contextfold.core.values.messages import Message, ToolCallPart, ToolResultPart

    for name in ("history_search", "mcp__contextfold__history_search",
                 "contextfold_history_expand"):
        assert is_recall_tool(name)
        quoted = Message(role="user", parts=(ToolResultPart(
            call_id="c1", name=name, output="the password is KESTREL-7731"),))
        assert "KESTREL" not in indexed_text(quoted)
        call = Message(role="assistant", parts=(ToolCallPart(
            id="c1", name=name, input={"query": "KESTREL-7731"}),))
        assert "KESTREL" not in indexed_text(call)
    for name in ("read", "my_history_searcher", "xhistory_search", None):
        assert not is_recall_tool(name)
    kept = Message(role="user", parts=(ToolResultPart(call_id="c2", name="read",
                                                      output="KESTREL-7731 in a file"),))
    assert "KESTREL" in indexed_text(kept)
