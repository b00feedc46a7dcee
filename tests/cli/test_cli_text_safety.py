"""Whatever a user, a model or a tool wrote is shown exactly as written, by every human
renderer of the command line and by the chat: markup brackets are text, not Rich markup;
right-to-left and combining characters and 100 kB lines pass unchanged. The only visible
transformation is the documented one: terminal control characters (other than newline and
tab) appear as `\\xNN`, and tabs are expanded, so a tool result cannot drive the terminal.
"""

from __future__ import annotations

import importlib
import io
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from contextfold.core.values.messages import Checkpoint, Message, Node, TextPart, text_message

# The module, not the Typer app that `contextfold.cli` re-exports under the same name.
cli_app = importlib.import_module("contextfold.cli.app")

PIECES = ["[/]", "[bold]", "[/bold]", "- [x] done", "[red]x[/red]", "[link=http://x]y[/link]",
          "\x1b[31m", "\x1b]0;title\x07", "\x1b[2J", "\r", "\x00", "\x7f", "\x9b", "\t",
          "\u202e", "\u200f", "שלום", "مرحبا", "e\u0301", "a\u0308\u0323", "\\", ":smile:",
          "\n", "日本語のテキスト", "[", "]", "%s", "{x}"]
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), min_size=1,
                max_size=8).map("".join)
BIG = st.builds(lambda t: t + "y" * 100_000 + "[/]", TEXT)  # a 100 kB line
ANY_TEXT = st.one_of(TEXT, TEXT, TEXT, BIG)
SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def shown(text: str) -> str:
    """How the text must appear: control characters as \\xNN, tabs expanded (stated in the
    module docstring); everything else unchanged."""
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)
    return "\n".join(line.expandtabs(8) for line in text.split("\n"))


def one_line(text: str, width: int = 70) -> str:
    """A node's one-line preview (`show`, `/history`): newlines as spaces, first 70 chars."""
    flat = " ".join(text.split("\n")).strip()
    return shown(flat[:width])


@pytest.fixture
def screen(monkeypatch):
    """Capture everything the command line prints (stdout and stderr consoles)."""
    out = io.StringIO()
    for console in (cli_app.console, cli_app.err_console):
        # The private fields: undoing them restores "the current sys.stdout" (None), never
        # the stream pytest had captured when the fixture ran.
        monkeypatch.setattr(console, "_file", out)
        monkeypatch.setattr(console, "_width", 250)
    return out


def take(screen: io.StringIO) -> str:
    text = screen.getvalue()
    screen.seek(0)
    screen.truncate()
    return text


def node(id_: str, parent: str | None, message: Message) -> Node:
    return Node(id=id_, parent_id=parent, payload=message)


def tool_call(text: str) -> Message:
    from contextfold.core.values.messages import ToolCallPart

    return Message(role="assistant", parts=(ToolCallPart(id="c1", name="search",
                                                         input={"q": text}),))


def tool_result(text: str) -> Message:
    from contextfold.core.values.messages import ToolResultPart

    return Message(role="tool", parts=(ToolResultPart(call_id="c1", name="search",
                                                      output=text),))


@given(text=ANY_TEXT)
@SETTINGS
def test_projection_and_tree_show_any_text_exactly(screen, text):
    from contextfold.cli.render import render_projection, render_tree
    from contextfold.core.render.export import to_openai
    from contextfold.core.values.tree import Branch
    from contextfold.core.view.projection import project

    assume(text.strip())
    nodes = [node("u1", None, text_message("user", text)),
             node("a1", "u1", tool_call(text)),
             node("t1", "a1", tool_result(text)),
             node("a2", "t1", text_message("assistant", text))]
    branch = Branch(nodes=tuple(nodes))
    render_projection({"model": "m", "estimated_tokens": 1, "safe_input_limit": 2,
                       "system": text,
                       "messages": to_openai(project(branch), system=None).messages})
    out = take(screen)
    assert out.count(shown(text)) >= 4  # system, user, tool result, reply: each whole
    info = type("Info", (), {"leaf_id": "a2"})()
    render_tree(info, nodes, branch)
    out = take(screen)
    assert one_line(text) in out


@given(text=ANY_TEXT)
@SETTINGS
def test_checkpoint_summary_and_reports_show_any_text_exactly(screen, text):
    from contextfold.cli.render import (
        render_compaction,
        render_import,
        render_projection,
        render_sessions,
    )
    from contextfold.cli.replay_cmds import _abbreviated, _render_replay
    from contextfold.core.render.export import to_openai
    from contextfold.core.values.tree import Branch
    from contextfold.core.view.projection import project

    assume(text.strip())
    summary = f"## Goal\n- {text}\n## Critical Context\n- [x] {text}"
    cp = Checkpoint(summary=summary, first_kept_id=None, tokens_before=10, summarizer="x",
                    model="m")
    branch = Branch(nodes=(node("c", None, cp), node("u", "c", text_message("user", "hi"))))
    messages = to_openai(project(branch), system=None).messages
    assert summary.strip() in messages[0]["content"]
    render_projection({"model": "m", "estimated_tokens": 1, "safe_input_limit": 2,
                       "messages": messages})
    assert shown(messages[0]["content"]) in take(screen)  # the whole checkpoint, "[x]" too

    render_compaction({"status": "noop", "reason": text, "model": "m", "context_window": 9})
    render_compaction({"status": "stale", "reason": text})
    render_import({"format": "pi", "session_id": "s", "messages": 1, "checkpoints": 0,
                   "skipped": {}}, [text])
    before_sessions = take(screen)
    render_sessions([{"session_id": "s", "first_message_at": "2026-01-01T00:00",
                      "last_message_at": "2026-01-01T00:00", "messages": 1,
                      "checkpoints": 0, "model": "m", "title": text, "read_only": False}])
    # A table cell: the title's start as written (never markup), line breaks as spaces, cut
    # with "…" to its column (issue 25: one line per session).
    row = take(screen).splitlines()[2]
    title = shown(text.replace("\n", " ")).strip()
    assert row.startswith("s ") and title[:8].rstrip() in row
    screen.write(before_sessions)
    _render_replay({"model": "m", "safe_input_limit": 1, "requests": 1, "compactions": 0,
                    "max_projected_tokens": 1, "invalid_tool_sequences": 1,
                    "dropped_messages": 0, "over_limit_requests": 0,
                    "started_from_checkpoint": False, "overhead_tokens": 0,
                    "overhead_source": "--overhead", "estimate": None,
                    "invalid_requests": [{"request": 0, "reply_node_id": "n",
                                          "problems": [text]}]})
    out = take(screen)
    assert out.count(shown(text)) >= 4
    cli_app.console.print(_abbreviated(summary), soft_wrap=True)
    first = shown(f"- [x] {text}".split("\n")[0])
    assert first[:139] in take(screen)


def test_error_messages_quote_input_exactly(screen):
    import typer

    with pytest.raises(typer.Exit):
        cli_app.Output(False).fail(cli_app.BadInput("bad value '[/]' and [bold]x"), 2)
    assert "error: bad value '[/]' and [bold]x" in take(screen)


# ------------------------------------------------------------------ the chat


class EchoModel:
    """A chat model that answers with the text it is told to (no network)."""

    def __init__(self) -> None:
        self.answer = ""

    @property
    def model(self) -> str:
        return "echo"

    async def complete(self, request: Any) -> Any:
        from contextfold.providers.base import ChatResponse

        return ChatResponse(message=Message(role="assistant", parts=(TextPart(text=self.answer),),
                                            model="echo"), stop_reason="end")

    async def stream(self, request: Any) -> Any:
        from contextfold.providers.base import StreamDone

        yield StreamDone(await self.complete(request))


@pytest.fixture(scope="module")
def chat():
    from contextfold.cli.chat_session import ChatSession, _Loop
    from contextfold.core.models.budget import ModelCapacity
    from contextfold.runtime import Conversation
    from contextfold.store import open_store

    folder = tempfile.TemporaryDirectory()
    loop = _Loop()
    model = EchoModel()
    store = loop.run(open_store(f"sqlite:///{Path(folder.name) / 'chat.db'}"))
    capacity = ModelCapacity(model="echo", context_window=2_000_000, max_output=8_000)
    conv = loop.run(Conversation.open(store, model=model, capacity=capacity))
    session = ChatSession(loop, conv, lambda name, window=None: (model, capacity))
    yield session, model
    loop.run(conv.close())
    loop.run(store.close())
    loop.stop()
    folder.cleanup()


@given(text=ANY_TEXT, answer=ANY_TEXT)
@SETTINGS
def test_chat_shows_what_was_sent_and_answered_exactly(screen, chat, text, answer):
    session, model = chat
    assume(text.strip() and answer.strip())
    model.answer = answer
    session.send(text)
    out = take(screen)
    assert f"assistant> {shown(answer)}" in out
    session.command("/request")  # the request in full (/context shows it by category)
    out = take(screen)
    assert shown(text) in out and shown(answer) in out
    session.command("/history")
    out = take(screen)
    assert one_line(answer) in out


def test_chat_unknown_command_is_one_clear_line(screen, chat):
    session, _ = chat
    with pytest.raises(cli_app.BadInput) as err:
        session.command("/bogus")
    assert "unknown command /bogus" in str(err.value) and "/compact" in str(err.value)


def test_chat_reports_errors_without_class_names(screen, chat, monkeypatch):
    session, _ = chat
    lines = iter(["/bogus", "/quit"])
    monkeypatch.setattr("contextfold.cli.chat_session.read_message", lambda prefill: next(lines))
    session.repl()
    out = take(screen)
    assert "unknown command /bogus" in out and "BadInput" not in out


def test_chat_manual_compaction_is_reported_once(screen, chat):
    session, model = chat
    for i in range(3):
        model.answer = f"answer {i}"
        session.send(f"question {i}")
    take(screen)
    session.command("/compact")
    session.show_events()
    out = take(screen)
    assert len(re.findall(r"^(compacted|nothing to compact)", out, re.M)) == 1, out


def test_chat_shows_a_tool_call_only_reply_by_its_calls():
    from contextfold.cli.chat_session import reply_text

    assert reply_text(tool_call("x")) == "(tool calls: search())"
    assert "None" not in reply_text(Message(role="assistant", parts=()))

