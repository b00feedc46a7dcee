"""Provider message lists: OpenAI chat-completions and Anthropic Messages request shapes.

Input is a JSON file (a list of messages, or an object with a `messages` list; Anthropic's
may carry `system`), a JSONL file with one message per line, or an already-loaded list or
dict. The result is a linear chain.

Decisions:
* Node ids are ``f"{name}-{digest}-{index}"``: the file stem (or "openai"/"anthropic" for
  in-memory lists), 8 hex digits of the content's SHA-256, and the message's index. The
  same content re-imports to the same ids; two different files never collide.
* These formats carry no timestamps: nodes get the import time, one millisecond apart in
  message order, so `created_at` still sorts like the conversation.
* System/developer messages before the first conversation message are the request's system
  prompt: they go to `metadata["system"]` (counted in `skipped["system_prompt"]`), because a
  system prompt is passed next to the history, not as part of it. Later ones stay
  `system`-role messages. Anthropic's top-level `system` goes to `metadata["system"]` too.
* A user message holding `tool_result` blocks becomes one `tool` message (its text and
  images stay in the same message, after the results), as for Claude Code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from contextfold.core.values.messages import Message
from contextfold.wire import anthropic_messages, openai_chat
from contextfold.wire.parts import Unknown, system_text

from .builder import ENTRY_ERRORS, Draft, TreeBuilder, describe, note_model
from .errors import ImportFormatError
from .reader import (
    JsonArray,
    OversizedValue,
    first_byte,
    parse_json_document,
    parse_jsonl,
    read_bytes,
    require_readable,
    source_name,
    value_too_big,
)
from .result import ImportResult

Source = str | Path | list[Any] | dict[str, Any]
OPENAI_ONLY_ROLES = ("system", "developer", "tool", "function")
OPENAI_PART_TYPES = ("image_url", "input_audio", "file", "refusal", "input_text", "input_image")
ANTHROPIC_BLOCK_TYPES = ("tool_use", "tool_result", "thinking", "redacted_thinking", "image",
                         "document")


def import_openai_messages(source: Source, *, name: str | None = None) -> ImportResult:
    """Import an OpenAI chat-completions message list (file path, list or dict)."""
    return _import(source, "openai", name)


def import_anthropic_messages(source: Source, *, name: str | None = None) -> ImportResult:
    """Import an Anthropic Messages list (`{"system":..., "messages": [...]}` or a list)."""
    return _import(source, "anthropic", name)


# ----------------------------------------------------------------------------- loading


def load_messages(source: Source, fmt: str, name: str | None = None
                  ) -> tuple[str, str, Iterable[tuple[int | None, Any]], Any, list[str],
                             list[str]]:
    """(display name, id prefix, [(line or None, message)], system, unreadable-line
    warnings, repair notes). A file that is one JSON array is read as a stream: its
    messages come one by one as they are iterated (and its repair notes when it is read)."""
    warnings: list[str] = []
    notes: list[str] = []
    if not isinstance(source, list | dict) and first_byte(source) == b"[":
        array = JsonArray.open(source)
        prefix = f"{name or Path(source).stem}-{array.digest[:8]}"
        return (array.source, prefix, ((None, m) for m in array.items(notes)), None,
                warnings, notes)
    if isinstance(source, list | dict):
        display = name or fmt
        data: Any = source
        raw = json.dumps(source, sort_keys=True, ensure_ascii=False, default=str).encode()
        numbered = None
    else:
        display = source_name(source)
        raw = read_bytes(source)
        data, numbered = _parse_file(raw, display, warnings, notes)
        name = name or Path(source).stem
    prefix = f"{name or fmt}-{hashlib.sha256(raw).hexdigest()[:8]}"
    if numbered is not None:
        return display, prefix, numbered, None, warnings, notes
    system = None
    if isinstance(data, dict) and "messages" not in data and isinstance(data.get("role"), str):
        data = [data]  # a file holding one message
    if isinstance(data, dict):
        if not isinstance(data.get("messages"), list):
            raise ImportFormatError(display, "expected a list of messages or an object with a "
                                    "'messages' list")
        system = data.get("system")
        data = data["messages"]
    if not isinstance(data, list):
        raise ImportFormatError(display, "expected a list of messages or an object with a "
                                "'messages' list")
    return display, prefix, [(None, m) for m in data], system, warnings, notes


def _parse_file(raw: bytes, display: str, warnings: list[str], notes: list[str]
                ) -> tuple[Any, list[tuple[int | None, Any]] | None]:
    """A whole JSON document, or JSONL with one message object per line. `warnings` get
    the unreadable lines, `notes` the repairs (lone surrogates replaced)."""
    stripped = raw.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] == b"[":
        return parse_json_document(raw, display, notes), None
    try:
        return parse_json_document(raw, display, notes), None
    except ImportFormatError:
        if stripped[:1] != b"{":
            raise
    doc = parse_jsonl(raw, display)  # several objects: one message per line
    require_readable(doc)
    warnings.extend(f"{display}:{bad.line}: {bad.reason}" for bad in doc.bad)
    notes.extend(f"{display}:{item.line}: {item.reason}" for item in doc.repaired)
    return None, [(jl.line, jl.obj) for jl in doc.lines]


def chat_list_format(data: Any) -> str | None:
    """'openai' or 'anthropic' for a parsed message list (detection), None if it is neither."""
    system = None
    if isinstance(data, dict):
        system = data.get("system")
        data = data.get("messages")
    if not isinstance(data, list) or not data:
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in data[:50]):
        return None
    if isinstance(system, list):
        return "anthropic"
    return messages_format(data, default="anthropic" if system is not None else "openai")


def array_format(items: Iterator[Any]) -> str | None:
    """`chat_list_format` of a JSON array read as a stream: the same answer, reading the
    array only as far as that needs (the first 50 elements must be messages; then up to the
    first message that says which provider wrote it)."""
    head = [m for _, m in zip(range(50), items, strict=False)]
    if not head or not all(isinstance(m, OversizedValue) or
                           (isinstance(m, dict) and isinstance(m.get("role"), str))
                           for m in head):
        return None
    return messages_format(_chain(head, items))


def _chain(head: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    yield from head
    yield from rest


def messages_format(messages: Iterable[Any], default: str = "openai") -> str:
    """Which provider shape a list of role-carrying message objects is written in."""
    for m in messages:
        if not isinstance(m, dict):
            continue
        if m.get("role") in OPENAI_ONLY_ROLES or "tool_calls" in m or "tool_call_id" in m:
            return "openai"
        content = m.get("content")
        for block in content if isinstance(content, list) else []:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in OPENAI_PART_TYPES:
                return "openai"
            if kind in ANTHROPIC_BLOCK_TYPES:
                return "anthropic"
    return default


# ----------------------------------------------------------------------------- importing


def _import(source: Source, fmt: str, name: str | None) -> ImportResult:
    display, prefix, items, system, warnings, notes = load_messages(source, fmt, name)
    b = TreeBuilder(display)
    b.warnings.extend(warnings + notes)
    # A streamed array adds its repair notes once it is read: they go where a file read
    # whole has them, before the messages' own warnings.
    noted, noted_at = len(notes), len(b.warnings)
    if warnings:
        b.skipped["unreadable_line"] += len(warnings)
    start = datetime.now(UTC)
    importer = _OpenAI(b) if fmt == "openai" else _Anthropic(b)
    systems: list[str] = []
    if system is not None:
        text = system_text(system)
        if text:
            systems.append(text)
    parent: str | None = None
    for index, (line, message) in enumerate(items):
        where = line if line is not None else f"messages[{index}]"
        node_id = f"{prefix}-{index}"
        created = start + timedelta(milliseconds=index)
        if isinstance(message, OversizedValue):  # a streamed array's element, dropped
            b.warnings.append(f"{display}:{where}: message skipped "
                              f"({value_too_big('the message', message.size)})")
            b.skipped["oversized_message"] += 1
            continue
        try:
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
            role = message.get("role")
            if fmt == "openai" and role in ("system", "developer") and parent is None:
                text = system_text(message.get("content"))
                if text:
                    systems.append(text)
                b.skipped["system_prompt"] += 1
                continue
            draft = importer.convert(message, node_id, parent, created)
        except ENTRY_ERRORS as exc:
            b.warnings.append(f"{display}:{where}: message skipped ({describe(exc)})")
            b.skipped["invalid_message"] += 1
            continue
        if draft is None:
            b.skipped["empty_message"] += 1
            continue
        parent = b.add(draft).id
    b.warnings[noted_at:noted_at] = notes[noted:]
    metadata: dict[str, Any] = {"models": list(importer.models)}
    if systems:
        metadata["system"] = "\n\n".join(systems)
    return b.finish(fmt, parent, metadata)


class _Converter:
    """Reads one message at a time with the protocol's own reader (`contextfold.wire`)."""

    def __init__(self, b: TreeBuilder) -> None:
        self.b = b
        self.models: dict[str, None] = {}
        self.call_names: dict[str, str] = {}

    def unknown(self, node_id: str) -> Unknown:
        def report(what: str) -> None:
            self.b.skipped["unknown_block"] += 1
            self.b.warn(None, f"{node_id}: {what} left out")
        return report

    def draft(self, node_id: str, parent: str | None, created: datetime,
              msg: Message) -> Draft | None:
        note_model(self.models, msg.model)
        if not msg.parts:
            return None  # nothing a model could see: counted as an empty message
        return Draft(id=node_id, parent_id=parent, created_at=created, role=msg.role,
                     parts=list(msg.parts), usage=msg.usage, model=msg.model)


class _OpenAI(_Converter):
    def convert(self, m: dict[str, Any], node_id: str, parent: str | None,
                created: datetime) -> Draft | None:
        msg = openai_chat.read_message(m, call_names=self.call_names,
                                       on_unknown=self.unknown(node_id),
                                       legacy_call_id=f"{node_id}-call")
        return self.draft(node_id, parent, created, msg)


class _Anthropic(_Converter):
    def convert(self, m: dict[str, Any], node_id: str, parent: str | None,
                created: datetime) -> Draft | None:
        if m.get("role") == "system":  # the wire's system entries are not in a recorded list
            raise ValueError("role 'system' is not 'user' or 'assistant'")
        msg = anthropic_messages.read_message(m, call_names=self.call_names,
                                              on_unknown=self.unknown(node_id))
        return self.draft(node_id, parent, created, msg)
