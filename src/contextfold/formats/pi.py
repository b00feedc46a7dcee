"""Pi coding-agent sessions (`~/.pi/agent/sessions/<dir>/<time>_<id>.jsonl`).

Pi's session format, as read from badlogic/pi-mono `session-manager.ts` (versions 1-3):

* The first line is a `session` header (`id`, `cwd`, `timestamp`, `version`; v1 has none).
* v1 entries have no ids: Pi's own v1->v2 migration gives each entry an id and chains
  parents in file order; the importer does the same, with deterministic ids
  ``f"{session_id}-{line}"`` so a re-import gives the same nodes. v2/v3 entries carry
  `id`/`parentId` (a tree; branches are kept) and keep those ids. v1 compactions name the
  first kept entry by `firstKeptEntryIndex` (an index into the file's entries).
* The leaf is the last entry of the file (Pi appends every entry at its current leaf).
* `message` entries: `user`, `assistant`, `toolResult` (-> role `tool`); `bashExecution`
  and `custom` (v2 `hookMessage`) messages become user messages, as Pi sends them.
* `compaction` -> `Checkpoint` (summary, first_kept_id, tokens_before, summarizer "pi").
  Pi's `firstKeptEntryId` may name a settings entry just before the first kept message;
  the importer moves it forward to the first node kept on the checkpoint's chain.
* Decision: `branch_summary` -> a user message whose text is exactly what Pi sends the
  model (``The following is a summary of a branch ...<summary>...</summary>``); that
  prefix marks it, and `metadata["branch_summaries"]` lists those node ids.
* `model_change`, `thinking_level_change`, `label`, `custom`, `session_info` and the header
  -> metadata and `skipped` counts; unknown entry types are skipped and counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextfold.core.values.messages import (
    Checkpoint,
    MessageStatus,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from contextfold.wire.parts import file_part, nonempty, text_of, tool_arguments
from contextfold.wire.usage import usage_from

from .builder import Draft, Linked, TreeBuilder, note_model, walk
from .reader import BadLine, JsonLine, parse_jsonl, read_lines, require_readable, source_name
from .result import ImportResult

# Our usage field -> Pi's.
PI_USAGE = {"input": "input", "output": "output", "cache_read": "cacheRead",
            "cache_write": "cacheWrite"}


def _block_kind(block: Any) -> str | None:
    """A content block's type; "text" only when it really carries a string."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and not isinstance(block.get("text"), str):
        return None  # reported as an unknown block by the callers
    return kind


# Exactly Pi's wording (coding-agent `messages.ts`), so the model sees what it saw in Pi.
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n"
    "<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"
COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following "
    "summary:\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"

ENTRY_TYPES = ("session", "message", "thinking_level_change", "model_change", "compaction",
               "branch_summary", "custom", "custom_message", "label", "session_info")
MESSAGE_ROLES = ("user", "assistant", "toolResult", "bashExecution", "custom", "hookMessage",
                 "branchSummary", "compactionSummary")
SETTINGS_TYPES = ("thinking_level_change", "model_change", "label", "custom", "session_info")


def import_pi(path: str | Path) -> ImportResult:
    """Import a Pi session JSONL file (v1, v2 or v3); see the module docstring."""
    source = source_name(path)
    doc = parse_jsonl(read_lines(path), source)
    require_readable(doc)
    return _Importer(source, Path(path).stem).run(doc.lines, doc.bad, doc.repaired)


def pi_score(obj: dict[str, Any]) -> int:
    """How strongly one JSON line looks like a Pi session entry (used by detection)."""
    kind = obj.get("type")
    if kind == "session" and "cwd" in obj:
        return 3
    if kind == "message" and isinstance(obj.get("message"), dict):
        return 3 if obj["message"].get("role") in MESSAGE_ROLES else 1
    if kind in ENTRY_TYPES and "uuid" not in obj:
        return 2
    return 0


def bash_execution_text(msg: dict[str, Any]) -> str:
    """Pi's `bashExecutionToText`: how a `!command` run reaches the model."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = msg.get("exitCode")
    if msg.get("cancelled") is True:
        text += "\n\n(command cancelled)"
    elif isinstance(exit_code, int) and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if msg.get("truncated") is True and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


class _Importer:
    def __init__(self, source: str, stem: str) -> None:
        self.b = TreeBuilder(source)
        self.stem = stem
        self.metadata: dict[str, Any] = {}
        self.models: dict[str, None] = {}
        self.compactions: list[tuple[str, Any, int]] = []  # checkpoint id, first kept, line
        self.call_names: dict[str, str] = {}

    # ------------------------------------------------------------------ driver

    def run(self, lines: tuple[JsonLine, ...], bad: tuple[BadLine, ...],
            repaired: tuple[BadLine, ...] = ()) -> ImportResult:
        b = self.b
        b.unreadable(bad, repaired)
        header = next((jl.obj for jl in lines if jl.obj.get("type") == "session"), None)
        session_id = text_of(header.get("id")) if header else None
        prefix = session_id or self.stem
        if header is not None:
            self._header(header)
        # Ids in Pi's v1 -> v2 migration order; every readable object (header included)
        # keeps its index, because v1 `firstKeptEntryIndex` counts them all.
        index_ids: list[str | None] = []
        linked: list[Linked[dict[str, Any]]] = []
        seen: set[str] = set()
        previous: str | None = None
        header_seen = False
        for jl in lines:
            obj = jl.obj
            if obj.get("type") == "session" and not header_seen:
                header_seen = True
                b.skipped["session"] += 1
                index_ids.append(None)
                continue
            own = obj.get("id")
            entry_id = own if isinstance(own, str) and own else f"{prefix}-{jl.line}"
            if entry_id in seen:
                b.warn(jl.line, f"duplicate entry id {entry_id}; the later entry is skipped")
                b.skipped["duplicate_id"] += 1
                index_ids.append(None)
                continue
            seen.add(entry_id)
            index_ids.append(entry_id)
            parent = obj.get("parentId", previous)  # v1 has no parentId: file order
            linked.append(Linked(entry_id, parent if isinstance(parent, str) else None,
                                 jl.line, obj))
            previous = entry_id
        if not linked:
            raise b.fatal("no Pi session entries after the header")
        walk(b, linked, lambda item, parent: self._entry(item, parent, index_ids))
        self._resolve_first_kept()
        self.metadata["models"] = list(self.models)
        return b.finish("pi", linked[-1].id, self.metadata)

    def _header(self, header: dict[str, Any]) -> None:
        version = header.get("version")
        self.metadata.update({
            "session_id": text_of(header.get("id")),
            "cwd": text_of(header.get("cwd")),
            "version": version if isinstance(version, int) else 1,
            "started_at": text_of(header.get("timestamp")),
        })
        for key, name in (("provider", "provider"), ("modelId", "model"),
                          ("thinkingLevel", "thinking_level"),
                          ("parentSession", "parent_session")):
            if text_of(header.get(key)):
                self.metadata[name] = header[key]

    # ------------------------------------------------------------------ entries

    def _entry(self, item: Linked[dict[str, Any]], parent: str | None,
               index_ids: list[str | None]) -> None:
        b, obj = self.b, item.entry
        kind = obj.get("type")
        created = b.time(obj.get("timestamp"))

        def user_node(parts: list[Part]) -> None:
            b.add(Draft(id=item.id, parent_id=parent, line=item.line, role="user",
                        created_at=created, parts=parts))

        if kind == "message":
            self._message(item, parent, obj["message"])
        elif kind == "compaction":
            first = obj.get("firstKeptEntryId")
            index = obj.get("firstKeptEntryIndex")
            if first is None and isinstance(index, int) and 0 <= index < len(index_ids):
                first = index_ids[index]
            cp = Checkpoint(
                summary=obj["summary"], first_kept_id=None, tokens_before=obj["tokensBefore"],
                profile="coding", summarizer="pi",
                details={"source": "pi", "from_hook": obj.get("fromHook") is True,
                         "pi_details": obj.get("details")},
            )
            b.add(Draft(id=item.id, parent_id=parent, line=item.line, created_at=created,
                        checkpoint=cp))
            self.compactions.append((item.id, first, item.line))
        elif kind == "branch_summary":
            summary = obj.get("summary")
            if not isinstance(summary, str) or not summary:
                b.skip("branch_summary:empty", item.id, parent)
                return
            user_node([TextPart(text=BRANCH_SUMMARY_PREFIX + summary + BRANCH_SUMMARY_SUFFIX)])
            self.metadata.setdefault("branch_summaries", []).append(
                {"id": item.id, "from_id": text_of(obj.get("fromId"))})
        elif kind == "custom_message":
            parts = self._content(obj.get("content"), item.line)
            if parts:
                user_node(parts)
            else:
                b.skip("custom_message:empty", item.id, parent)
        elif kind in SETTINGS_TYPES:
            self._setting(obj)
            b.skip(kind, item.id, parent)
        else:
            b.skip(f"unknown:{kind}" if isinstance(kind, str) else "unknown", item.id, parent)

    def _setting(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "model_change":
            self.metadata.setdefault("model_changes", []).append(
                {"provider": text_of(obj.get("provider")), "model": text_of(obj.get("modelId")),
                 "at": text_of(obj.get("timestamp"))})
        elif kind == "session_info" and text_of(obj.get("name")):
            self.metadata["name"] = obj["name"]
        elif kind == "thinking_level_change" and text_of(obj.get("thinkingLevel")):
            self.metadata["thinking_level"] = obj["thinkingLevel"]

    def _unknown(self, line: int, what: str) -> None:
        self.b.skipped["unknown_block"] += 1
        self.b.warn(line, f"{what} left out")

    def _content(self, content: Any, line: int) -> list[Part]:
        """User / tool-result / custom content: a string or text and image blocks."""
        if isinstance(content, str):
            return [TextPart(text=content)] if content else []
        if not isinstance(content, list):
            raise TypeError("content is neither text nor a list of blocks")
        parts: list[Part] = []
        for block in content:
            kind = _block_kind(block)
            if kind == "text":
                if block["text"]:
                    parts.append(TextPart(text=block["text"]))
            elif kind == "image":
                parts.append(file_part(block.get("mimeType"), index=len(parts) + 1,
                                       data=block.get("data")))
            else:
                self._unknown(line, f"content block {kind!r}")
        return parts

    def _message(self, item: Linked[dict[str, Any]], parent: str | None,
                 msg: dict[str, Any]) -> None:
        b = self.b
        if not isinstance(msg, dict):
            raise TypeError("'message' is not an object")
        role = msg.get("role")
        created = b.time(item.entry.get("timestamp"))

        def add(role: Any, parts: list[Part], **kw: Any) -> None:
            b.add(Draft(id=item.id, parent_id=parent, line=item.line, role=role,
                        created_at=created, parts=parts, **kw))

        if role == "user":
            add("user", self._content(msg.get("content"), item.line))
        elif role == "assistant":
            self._assistant(msg, item, add)
        elif role == "toolResult":
            call_id = msg["toolCallId"]
            extras = self._content(msg.get("content"), item.line)
            output = "\n".join(p.text for p in extras if isinstance(p, TextPart))
            files = [p for p in extras if not isinstance(p, TextPart)]
            name = text_of(msg.get("toolName")) or self.call_names.get(call_id)
            result = ToolResultPart(call_id=call_id, name=name, output=output,
                                    is_error=msg.get("isError") is True)
            add("tool", [result, *files])
        elif role == "bashExecution":
            if msg.get("excludeFromContext") is True:
                b.skip("bashExecution:excluded", item.id, parent)
                return
            add("user", [TextPart(text=bash_execution_text(msg))])
        elif role in ("custom", "hookMessage"):
            parts = self._content(msg.get("content"), item.line)
            if not parts:
                b.skip("custom:empty", item.id, parent)
                return
            add("user", parts)
        elif role == "branchSummary" and text_of(msg.get("summary")):
            add("user", [TextPart(text=BRANCH_SUMMARY_PREFIX + msg["summary"]
                                  + BRANCH_SUMMARY_SUFFIX)])
        elif role == "compactionSummary" and text_of(msg.get("summary")):
            add("user", [TextPart(text=COMPACTION_SUMMARY_PREFIX + msg["summary"]
                                  + COMPACTION_SUMMARY_SUFFIX)])
        else:
            b.skip(f"message:{role}" if isinstance(role, str) else "message:unknown", item.id,
                   parent)

    def _assistant(self, msg: dict[str, Any], item: Linked[dict[str, Any]], add: Any) -> None:
        content = msg.get("content") or []
        if not isinstance(content, list):
            raise TypeError("assistant content is not a list of blocks")
        parts: list[Part] = []
        for block in content:
            kind = _block_kind(block)
            if kind == "text":
                if block["text"]:
                    parts.append(TextPart(text=block["text"]))
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                parts.append(ReasoningPart(text=block["thinking"],
                                           signature=nonempty(block.get("thinkingSignature"))))
            elif kind == "toolCall":
                self.call_names[block["id"]] = block["name"]
                parts.append(ToolCallPart(id=block["id"], name=block["name"],
                                          input=tool_arguments(block.get("arguments"))))
            else:
                self._unknown(item.line, f"assistant block {kind!r}")
        stop = msg.get("stopReason")
        status: MessageStatus = "aborted" if stop == "aborted" else (
            "error" if stop == "error" else "complete")
        model = note_model(self.models, msg.get("model"))
        usage = usage_from(msg.get("usage"), PI_USAGE, model)
        if status != "complete" and text_of(msg.get("errorMessage")):
            self.metadata.setdefault("assistant_errors", []).append(
                {"id": item.id, "status": status, "message": msg["errorMessage"]})
        add("assistant", parts, usage=usage, status=status, model=model)

    # ------------------------------------------------------------------ compactions

    def _resolve_first_kept(self) -> None:
        """Point each checkpoint at the first node it keeps on its own chain.

        Pi may name a settings entry (skipped here) or a node that precedes a skipped
        stretch; the kept tail then starts at the next node on the checkpoint's chain.
        """
        b = self.b
        for cp_id, first, line in self.compactions:
            draft = b.drafts[cp_id]
            assert draft.checkpoint is not None
            chain = b.chain_to(cp_id)[:-1]
            kept: str | None = None
            if isinstance(first, str) and first in b.drafts:
                if first in chain:
                    kept = first
                else:
                    b.warn(line, f"firstKeptEntryId {first} is not on this compaction's "
                                 "branch; nothing is kept raw")
            elif isinstance(first, str) and first in b.alias:
                anchor = b.alias[first]
                at = -1 if anchor is None else (chain.index(anchor) if anchor in chain else None)
                if at is not None and at + 1 < len(chain):
                    kept = chain[at + 1]
                elif at is None:
                    b.warn(line, f"firstKeptEntryId {first} is not on this compaction's branch;"
                                 " nothing is kept raw")
            else:
                b.warn(line, f"firstKeptEntryId {first!r} not found; nothing is kept raw")
            if kept is not None:
                draft.checkpoint = draft.checkpoint.model_copy(update={"first_kept_id": kept})
