"""Recognising which format a file is in, and dispatching to its importer."""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import islice
from pathlib import Path

from .chat import (
    array_format,
    chat_list_format,
    import_anthropic_messages,
    import_openai_messages,
    messages_format,
)
from .claude_code import claude_code_score, import_claude_code
from .errors import ImportFormatError
from .pi import import_pi, pi_score
from .reader import (
    JsonArray,
    first_byte,
    import_limit,
    max_value_bytes,
    parse_json_document,
    parse_jsonl,
    read_bytes,
    read_lines,
    source_name,
)
from .result import FORMATS, ImportResult

_SAMPLE_LINES = 200  # enough to see past a file's leading snapshots and progress events

IMPORTERS: dict[str, Callable[[Path], ImportResult]] = {
    "pi": import_pi,
    "claude-code": import_claude_code,
    "openai": import_openai_messages,
    "anthropic": import_anthropic_messages,
}


def detect_format(path: str | Path) -> str:
    """Which of `FORMATS` the file is in; `ImportFormatError` if none fits.

    A whole-file JSON list (or object with `messages`) is a provider message list; JSON
    lines are scored entry by entry as Pi or Claude Code, and lines that are bare message
    objects (`role` + `content`) are a message list written as JSONL.
    """
    name = source_name(path)
    # Streamed: only the first lines are read unless the file is one JSON document.
    doc = parse_jsonl(islice(read_lines(path), _SAMPLE_LINES), name)
    if not doc.lines and not doc.bad:
        raise ImportFormatError(name, "the file is empty")
    first_line = min([jl.line for jl in doc.lines] + [b.line for b in doc.bad], default=None)
    head = first_byte(path)
    if head == b"[":  # one JSON array, read as a stream however large (its size is the
        # import limit's to judge, not the limit of one JSON value)
        fmt = array_format(JsonArray.unread(path).items())
        if fmt is None:
            raise ImportFormatError(name, "a JSON list, but not of chat messages "
                                    "(each needs a 'role')")
        return fmt
    one_document = head == b"{" and (
        not doc.lines or doc.lines[0].line != first_line or len(doc.lines) + len(doc.bad) == 1)
    if one_document and os.stat(path).st_size > max_value_bytes():
        one_document = False  # maybe JSON lines: each line is checked as it is read
    if one_document:  # a list, a pretty-printed object, or a file holding one object
        try:
            document = parse_json_document(read_bytes(path), name)
        except ImportFormatError:
            document = None  # several objects: JSON lines
        if document is not None:
            fmt = chat_list_format(document)
            if fmt is not None:
                return fmt
            if head == b"[":
                raise ImportFormatError(name, "a JSON list, but not of chat messages "
                                        "(each needs a 'role')")
            if isinstance(document, dict) and not (pi_score(document)
                                                   or claude_code_score(document)):
                raise ImportFormatError(name, "a JSON object, but neither a message list "
                                        "({\"messages\": [...]}) nor a session entry")
    sample = [jl.obj for jl in doc.lines]
    if not sample:
        first = doc.bad[0] if doc.bad else None
        raise ImportFormatError(name, f"not a session file: no readable JSON line"
                                f"{f' ({first.reason})' if first else ''}",
                                first.line if first else None)
    pi = sum(pi_score(obj) for obj in sample)
    claude = sum(claude_code_score(obj) for obj in sample)
    roles = [obj for obj in sample if isinstance(obj.get("role"), str) and "type" not in obj]
    if len(roles) * 2 > len(sample):
        return messages_format(roles)
    if pi == 0 and claude == 0:
        raise ImportFormatError(name, "not a known session format: the JSON lines are neither "
                                "Pi nor Claude Code entries nor chat messages",
                                doc.lines[0].line)
    return "pi" if pi > claude else "claude-code"


def import_file(path: str | Path, format: str = "auto", *,
                max_bytes: int | None = None) -> ImportResult:
    """Import a session file; `format` is "auto" or one of `FORMATS`.

    Only regular files are read, streamed, and at most `max_bytes` of them (default
    `reader.DEFAULT_MAX_BYTES`, or $CONTEXTFOLD_MAX_IMPORT_BYTES); a bigger file is refused
    with `ImportFormatError` naming the limit."""
    with import_limit(max_bytes):
        if format == "auto":
            format = detect_format(path)
        importer = IMPORTERS.get(format)
        if importer is None:
            raise ImportFormatError(source_name(path), f"unknown format {format!r}; "
                                    f"choose one of: auto, {', '.join(FORMATS)}")
        return importer(Path(path))
