"""Other people's text on a terminal, shown as written: what a user, a model or a tool wrote is
wrapped in `Text` (never parsed as Rich markup) and passed through `visible`, which only makes
terminal control characters readable and expands tabs; `say` prints a line of it, `preview`
one node in a line.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rich.text import Text

from .app import console

if TYPE_CHECKING:
    from ..core.values.messages import Node


PREVIEW_CHARS = 70

# C0 controls except newline and tab, DEL, C1 controls: shown as \xNN instead of executed.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` as the terminal will show it: control characters as `\\xNN`, tabs expanded."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if "\t" in text:
        text = "\n".join(line.expandtabs(8) for line in text.split("\n"))
    return text


def plain(text: str, style: str = "") -> Text:
    """User/model/tool text as a Rich `Text`: never markup, never highlighted."""
    return Text(visible(text), style=style)


def say(*parts: str | Text | tuple[str, str]) -> None:
    """Print one line assembled from our own words and other people's text.

    A `str` is our own wording (plain), a `(text, style)` tuple is styled, a `Text` is used
    as is. Nothing is parsed as markup.
    """
    line = Text()
    for part in parts:
        if isinstance(part, tuple):
            line.append(visible(part[0]), style=part[1])
        elif isinstance(part, Text):
            line.append_text(part)
        else:
            line.append(visible(part))
    console.print(line, soft_wrap=True, highlight=False)


def message_text(node: Node) -> str:
    """What a message says, in one string: text, else its tool calls or results."""
    msg = node.message
    assert msg is not None
    if msg.text.strip():  # agents often put blank lines before their tool calls
        return msg.text
    if msg.tool_calls:
        return ", ".join(f"{c.name}({_args(c.input)})" for c in msg.tool_calls)
    if msg.tool_results:
        return "\n".join(("[error] " if r.is_error else "") + r.output for r in msg.tool_results)
    return "(no text: " + ", ".join(sorted({p.type for p in msg.parts})) + ")" if msg.parts \
        else "(empty)"


def _args(arguments: Any) -> str:
    import json

    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def preview(node: Node, width: int = PREVIEW_CHARS) -> Text:
    """One line for a node: role (or CHECKPOINT) and the start of what it says."""
    msg = node.message
    event = node.pin_event
    if event is not None:  # SPEC N2
        what = event.text.replace("\n", " ")[:width] if event.action == "pin" else event.pin_id
        line = Text(event.action.upper(), style="bold cyan")
        line.append(" " + visible(what))
        return line
    if msg is None:
        cp = node.checkpoint
        assert cp is not None
        line = Text("CHECKPOINT", style="bold magenta")
        line.append(f" by {cp.summarizer}, {cp.tokens_before:,} tokens before")
        return line
    text = " ".join(message_text(node).split("\n")).strip()
    if len(text) > width:
        text = text[:width] + "…"
    line = Text(msg.role, style="cyan")
    line.append(" ")
    line.append(visible(text))
    return line
