"""How a tool call reads in one line: its name and the argument that says what it did.

The offline summariser and the split-turn context of a checkpoint (SPEC K6) both describe
tool calls ("bash `npm test`", "edit `src/app.py`") and sort file tools into files read and
files modified; this module is the one place that knows how, and the one rule for reading
a call's arguments (`tool_arguments`: JSON text parsed, anything else kept).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .messages import ToolCallPart

ITEM_CHARS = 300

# Tools whose key argument is a file that was read, or written.
READ_TOOLS = frozenset({"read", "view", "cat", "open", "read_file", "readfile"})
WRITE_TOOLS = frozenset({
    "edit", "write", "multiedit", "notebookedit", "str_replace_editor", "apply_patch",
    "create", "write_file", "edit_file", "create_file",
})
SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "run_command", "exec"})
# The argument that names what a call acted on, in order of preference.
KEY_ARGS = (
    "path", "file_path", "filePath", "notebook_path", "command", "cmd", "query", "q", "url",
    "pattern", "item_key", "itemKey", "attachment_key", "attachmentKey", "collection_key",
    "collectionKey", "key", "doi", "collection", "title", "name", "id",
)
_SHELL_TAIL = re.compile(r"\s*(?:2>&1|\|\s).*$")


def tool_arguments(value: Any) -> Any:
    """A tool call's input: JSON text parsed when it is valid JSON, kept verbatim when not (a
    model's broken arguments are not lost); nothing at all (None, "" or only whitespace) is
    no arguments, {}.

    One rule for every reader, so a call read from a reply, from a stream and from the client
    that sends it back is the same call (the proxy's content chain compares them, SPEC Y1);
    the core's own readers (the ledger, the export) read a call's arguments the same way.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def one_line(text: str, limit: int = ITEM_CHARS) -> str:
    """`text` on one line, whitespace collapsed, cut to `limit` characters with "…"."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def key_argument(call: ToolCallPart) -> str:
    """The call's most telling argument (a path, a command, a query), on one line."""
    data = call.input
    if isinstance(data, dict):
        for key in KEY_ARGS:
            value = data.get(key)
            if isinstance(value, (str, int)) and str(value).strip():
                return one_line(str(value), 160)
        text = json.dumps(data, ensure_ascii=False, default=str)
    else:
        text = str(data)
    return one_line(text, 120) if text not in ("{}", "") else ""


def call_text(call: ToolCallPart) -> str:
    """"name `key argument`": how a summary names one tool call."""
    arg = key_argument(call)
    if call.name.lower() in SHELL_TOOLS:
        # `npm run check 2>&1 | grep error` and `... | tail -5` are one check run twice.
        arg = _SHELL_TAIL.sub("", arg) or arg
    return f"{call.name} `{arg}`" if arg else call.name


def file_touched(call: ToolCallPart) -> tuple[str, str] | None:
    """("read" | "modified", path) for a file tool's call; None for any other tool."""
    name = call.name.lower()
    if name in WRITE_TOOLS:
        return "modified", key_argument(call) or call.name
    if name in READ_TOOLS:
        return "read", key_argument(call) or call.name
    return None
