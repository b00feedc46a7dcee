"""The working directory an agent states in its request, kept on the proxied session so
`contextfold mcp` can find "this conversation" from the directory its client runs in.

Agents tell the model where they work: Claude Code and OpenCode in the system prompt
(`Working directory: /repo`, `Primary working directory: /repo`), Codex in an
`<environment_context>` user message (`<cwd>/repo</cwd>`). Only the first messages are
looked at (the statement comes at the start of a conversation) and only an absolute path is
taken, so a file's content quoting such a line later on changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..core.values.messages import Message

_STATED = (
    re.compile(r"(?im)^\s*(?:[-*]\s*)?(?:primary\s+)?working\s+directory\s*:\s*(\S[^\n]*?)\s*$"),
    re.compile(r"(?i)<cwd>\s*([^<\n]+?)\s*</cwd>"),
)
FIRST_MESSAGES = 3
MAX_PATH_CHARS = 1_000


def working_directory(system: str | None, messages: Sequence[Message]) -> str | None:
    """The absolute working directory stated in `system` or the first messages, else None."""
    texts = [system or ""] + [m.text for m in messages[:FIRST_MESSAGES]]
    for text in texts:
        for pattern in _STATED:
            for match in pattern.finditer(text):
                path = match.group(1).strip().strip("`'\"")
                if _absolute(path):
                    return path.rstrip("/\\") or "/"
    return None


def _absolute(path: str) -> bool:
    if not path or len(path) > MAX_PATH_CHARS:
        return False
    return path.startswith("/") or bool(re.match(r"^[A-Za-z]:[\\/]", path))
