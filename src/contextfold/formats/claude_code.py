"""Claude Code session transcripts (`~/.claude/projects/<dir>/<session>.jsonl`).

Shape of the file, as the importer reads it:

* Entries form a tree through `uuid` / `parentUuid`. Across a compact boundary `parentUuid`
  is null and `logicalParentUuid` names the previous part: the importer follows it, so the
  whole session is one connected tree.
* `progress`, `file-history-snapshot`, `queue-operation`, `summary` (session titles) and
  `system` entries other than `compact_boundary` are not messages: skipped and counted. Their
  uuids may be parents of messages; those children re-link to the nearest kept ancestor.
* One API response is written as one entry per content block, all sharing `message.id`:
  consecutive entries of one response become ONE assistant message (usage from the last).
* `user` entries holding `tool_result` blocks become `tool` messages. When one response
  made parallel calls, Claude Code hangs each result under the entry of its own call, so
  the results are siblings; the importer folds the results of one response into one `tool`
  message (one node per response's results) so that every call and its result share the
  branch. A result for a call already answered there stays a separate node (a real fork).
* `compact_boundary` + the summary message right after it (`isCompactSummary`) become one
  `Checkpoint` (summary text, `tokens_before = compactMetadata.preTokens`,
  `first_kept_id = None`: Claude Code keeps nothing raw after compacting).
* Decision: `isSidechain` entries (sub-agent transcripts in older versions) are skipped and
  counted; they were never part of the main conversation's context.
* Decision: `isMeta` user entries (local-command caveats, skill text) stay user messages:
  Claude Code sends them to the model, so they were part of what it saw.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from contextfold.core.values.messages import Checkpoint, MessageStatus, ToolResultPart
from contextfold.wire.anthropic_messages import read_content, usage_of
from contextfold.wire.parts import text_of

from .builder import Draft, Linked, TreeBuilder, note_model, walk
from .reader import BadLine, JsonLine, parse_jsonl, read_lines, require_readable, source_name
from .result import ImportResult

NON_MESSAGE_TYPES = ("progress", "file-history-snapshot", "queue-operation", "summary",
                     "custom-title", "tag")


def import_claude_code(path: str | Path) -> ImportResult:
    """Import a Claude Code JSONL transcript; see the module docstring for the mapping."""
    source = source_name(path)
    doc = parse_jsonl(read_lines(path), source)
    require_readable(doc)
    return _Importer(source).run(doc.lines, doc.bad, doc.repaired)


def claude_code_score(obj: dict[str, Any]) -> int:
    """How strongly one JSON line looks like a Claude Code entry (used by detection)."""
    score = 0
    if "uuid" in obj or "parentUuid" in obj or "sessionId" in obj:
        score += 2
    if obj.get("type") in ("user", "assistant", "system", *NON_MESSAGE_TYPES):
        score += 1
    return score


class _Importer:
    def __init__(self, source: str) -> None:
        self.b = TreeBuilder(source)
        self.call_names: dict[str, str] = {}
        self.tool_child: dict[str, str] = {}  # assistant node id -> its results' tool node
        self.metadata: dict[str, Any] = {}
        self.models: dict[str, None] = {}
        self.session_ids: dict[str, None] = {}
        self.compactions: list[dict[str, Any]] = []
        self.open_boundaries: set[str] = set()  # checkpoints still waiting for their summary
        self.folded: Counter[str] = Counter()  # entries merged into an earlier node, by kind

    # ------------------------------------------------------------------ driver

    def run(self, lines: tuple[JsonLine, ...], bad: tuple[BadLine, ...],
            repaired: tuple[BadLine, ...] = ()) -> ImportResult:
        b = self.b
        b.unreadable(bad, repaired)
        linked: list[Linked[dict[str, Any]]] = []
        seen: set[str] = set()
        leaf_source: str | None = None
        for jl in lines:
            obj = jl.obj
            uuid = obj.get("uuid")
            self._note_metadata(obj)
            if not isinstance(uuid, str) or not uuid:
                kind = obj.get("type")
                b.skipped[kind if isinstance(kind, str) and kind else "entry_without_type"] += 1
                continue
            if uuid in seen:
                b.warn(jl.line, f"duplicate uuid {uuid}; the later entry is skipped")
                b.skipped["duplicate_uuid"] += 1
                continue
            seen.add(uuid)
            parent = obj.get("parentUuid")
            if parent is None and isinstance(obj.get("logicalParentUuid"), str):
                parent = obj["logicalParentUuid"]  # across a compact boundary
            linked.append(Linked(uuid, parent if isinstance(parent, str) else None, jl.line,
                                 obj))
            if obj.get("isSidechain") is not True:
                leaf_source = uuid
        if not linked:
            raise b.fatal("no Claude Code entries with a uuid found")
        walk(b, linked, self._entry)
        for cp_id in self.open_boundaries:
            b.warn(b.drafts[cp_id].line, "compact boundary without its summary message")
        self.metadata.update(
            session_ids=list(self.session_ids), models=list(self.models),
            compactions=self.compactions, merged_entries=dict(self.folded),
        )
        if len(self.session_ids) == 1:
            self.metadata["session_id"] = next(iter(self.session_ids))
        return b.finish("claude-code", leaf_source, self.metadata)

    def _note_metadata(self, obj: dict[str, Any]) -> None:
        for key, name in (("cwd", "cwd"), ("gitBranch", "git_branch"), ("version", "version"),
                          ("slug", "slug")):
            value = text_of(obj.get(key))
            if value:
                self.metadata.setdefault(name, value)
        sid = text_of(obj.get("sessionId"))
        if sid:
            self.session_ids[sid] = None
        if obj.get("type") == "summary" and isinstance(obj.get("summary"), str):
            self.metadata.setdefault("titles", []).append(obj["summary"])

    # ------------------------------------------------------------------ entries

    def _entry(self, item: Linked[dict[str, Any]], parent: str | None) -> None:
        b, obj = self.b, item.entry
        kind = obj.get("type")
        if obj.get("isSidechain") is True:
            b.skip("sidechain", item.id, parent)
        elif kind == "system" and obj.get("subtype") == "compact_boundary":
            self._boundary(item, parent)
        elif kind == "system":
            subtype = obj.get("subtype")
            b.skip(f"system:{subtype}" if isinstance(subtype, str) else "system", item.id,
                   parent)
        elif kind == "assistant":
            self._assistant(item, parent)
        elif kind == "user":
            self._user(item, parent)
        else:
            b.skip(kind if isinstance(kind, str) and kind else "unknown", item.id, parent)

    def _unknown(self, line: int) -> Any:
        def report(what: str) -> None:
            self.b.skipped["unknown_block"] += 1
            self.b.warn(line, f"{what} left out")
        return report

    def _boundary(self, item: Linked[dict[str, Any]], parent: str | None) -> None:
        meta = item.entry.get("compactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        pre = meta.get("preTokens")
        tokens_before = pre if isinstance(pre, int) and not isinstance(pre, bool) and pre >= 0 \
            else 0
        trigger = text_of(meta.get("trigger"))
        cp = Checkpoint(summary="", first_kept_id=None, tokens_before=tokens_before,
                        profile="coding", summarizer="claude-code",
                        details={"source": "claude-code", "trigger": trigger})
        self.b.add(Draft(id=item.id, parent_id=parent, line=item.line,
                         created_at=self.b.time(item.entry.get("timestamp")), checkpoint=cp))
        self.open_boundaries.add(item.id)
        self.compactions.append({"id": item.id, "trigger": trigger, "pre_tokens": pre})

    def _compact_summary(self, item: Linked[dict[str, Any]], parent: str | None,
                         text: str) -> None:
        b = self.b
        draft = b.drafts.get(parent) if parent is not None else None
        if draft is not None and draft.id in self.open_boundaries:
            assert draft.checkpoint is not None
            draft.checkpoint = draft.checkpoint.model_copy(update={"summary": text})
            self.open_boundaries.discard(draft.id)
            b.merge_into(item.id, draft)
            return
        # Older transcripts: a summary message without a boundary entry before it.
        cp = Checkpoint(summary=text, first_kept_id=None, tokens_before=0, profile="coding",
                        summarizer="claude-code",
                        details={"source": "claude-code", "tokens_before_unknown": True})
        b.add(Draft(id=item.id, parent_id=parent, line=item.line,
                    created_at=b.time(item.entry.get("timestamp")), checkpoint=cp))
        self.compactions.append({"id": item.id, "trigger": None, "pre_tokens": None})

    def _assistant(self, item: Linked[dict[str, Any]], parent: str | None) -> None:
        b, obj = self.b, item.entry
        msg = obj["message"]
        if not isinstance(msg, dict):
            raise TypeError("'message' is not an object")
        converted = read_content(msg.get("content"), self._unknown(item.line), self.call_names)
        model = text_of(msg.get("model"))
        real = model if model and not model.startswith("<") else None  # not "<synthetic>"
        real_model = note_model(self.models, real)
        usage = usage_of(msg.get("usage"), real_model)
        status: MessageStatus = "error" if obj.get("isApiErrorMessage") is True else "complete"
        message_id = text_of(msg.get("id"))
        previous = self._same_response(parent, message_id)
        if previous is not None:
            previous.parts.extend(converted.parts)
            previous.usage = usage or previous.usage
            if status != "complete":
                previous.status = status
            b.merge_into(item.id, previous)
            self.folded["assistant_block"] += 1
            return
        b.add(Draft(id=item.id, parent_id=parent, line=item.line, role="assistant",
                    created_at=b.time(obj.get("timestamp")), parts=converted.parts,
                    usage=usage, status=status, model=real_model,
                    provider_message_id=message_id))

    def _same_response(self, parent: str | None, message_id: str | None) -> Draft | None:
        """The assistant node of the same API response this entry continues, if any.

        Usually the parent itself. But Claude Code runs a tool as soon as its block has
        streamed, so a response's next block can be written after the first call's result:
        A(call 1) -> R1 -> A(call 2). That is still one response (one request, one usage):
        the block joins A, and R2 later joins R1's tool message. Keeping A(call 2) after R1
        would claim its usage covered R1, which it did not (SPEC E1).
        """
        if parent is None or message_id is None:
            return None
        node = self.b.drafts[parent]
        if node.role == "tool" and node.parent_id is not None:
            owner = self.b.drafts[node.parent_id]
            if self.tool_child.get(owner.id) == node.id:
                node = owner
        if node.role == "assistant" and node.provider_message_id == message_id:
            return node
        return None

    def _user(self, item: Linked[dict[str, Any]], parent: str | None) -> None:
        b, obj = self.b, item.entry
        msg = obj["message"]
        if not isinstance(msg, dict):
            raise TypeError("'message' is not an object")
        content = msg.get("content")
        if obj.get("isCompactSummary") is True:
            text = content if isinstance(content, str) else "\n".join(
                blk.get("text", "") for blk in content or []
                if isinstance(blk, dict) and isinstance(blk.get("text"), str))
            self._compact_summary(item, parent, text)
            return
        converted = read_content(content, self._unknown(item.line), self.call_names)
        if not converted.parts:
            b.skip("empty_user_message", item.id, parent)
            return
        created = b.time(obj.get("timestamp"))
        if not converted.has_results:
            b.add(Draft(id=item.id, parent_id=parent, line=item.line, role="user",
                        created_at=created, parts=converted.parts))
            return
        parent_draft = b.drafts.get(parent) if parent is not None else None
        results = {p.call_id for p in converted.parts if isinstance(p, ToolResultPart)}
        if parent_draft is not None and parent_draft.role == "assistant":
            sibling = b.drafts.get(self.tool_child.get(parent_draft.id, ""))
            if sibling is not None and not (sibling.result_ids & results):
                # Parallel calls: fold this result into the response's tool message.
                sibling.parts.extend(converted.parts)
                b.merge_into(item.id, sibling)
                self.folded["parallel_tool_result"] += 1
                return
        draft = b.add(Draft(id=item.id, parent_id=parent, line=item.line, role="tool",
                            created_at=created, parts=converted.parts))
        if parent_draft is not None and parent_draft.role == "assistant":
            self.tool_child.setdefault(parent_draft.id, draft.id)

