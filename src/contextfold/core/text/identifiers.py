"""Identifier extraction: what in a history a resumed agent must be able to quote verbatim.

A summary paraphrases; an identifier must not be paraphrased. This module finds, in a run
of history nodes, the identifiers the ledger (`core.planning.ledger`) carries forward: Zotero keys,
DOIs, URLs, file paths, commit hashes, the line of each tool error that says what went
wrong, and what people type in prose (`core.text.prose_identifiers`: Zotero keys, arXiv ids,
ISBNs, PMIDs, issue references, error codes). Extraction is deterministic and
precision-minded (a word with a slash is not a path). What one message yields depends on
that message alone (and, for a tool result, on its call), so it can be memoised per message.

Identifiers the user wrote are kept longer than those only seen in tool traffic, and those
named in a constraint the user stated ("never overwrite X", `core.text.constraints`) longest.

Size: one idea, identifier extraction, written as some thirty small extractors (per kind, per
message part) that share the per-message memo and the dedupe rule; split by kind they would
scatter the precision rules a reader checks together.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from ..values.messages import (
    USER_CONSTRAINT,
    USER_WRITTEN,
    AnnotationPart,
    CollectionPart,
    LedgerEntry,
    Message,
    Node,
    PdfPagePart,
    TagPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from ..values.tool_calls import tool_arguments
from ..values.tree import message_nodes
from .constraints import constraint_sentences
from .prose_identifiers import ZOTERO_KEY_ALPHABET, prose_scans
from .scanning import Sighting, entry, in_order

# Kinds that a later, more specific sighting of the same value may replace.
_GENERIC_KINDS = frozenset({"zotero_key"})
__all__ = ["USER_CONSTRAINT", "USER_WRITTEN", "ZOTERO_KEY_ALPHABET", "dedupe_identifiers",
           "error_line", "extract_identifiers", "looks_like_path"]

# A tool result listing more Zotero objects than this is a listing (a search, a collection):
# its items are recorded by key, without titles, until the session reads one of them.
_LISTING_ITEMS = 3


# --------------------------------------------------------------------------- patterns

_DOI = re.compile(r"\b10\.\d{4,9}/[^\s\"'<>\]\[(){}]+", re.IGNORECASE)
_URL = re.compile(r"\bhttps?://[^\s\"'<>`\]\[(){}|\\^]+", re.IGNORECASE)
# Recognition accepts any upper-case alphanumeric 8-character key, a superset of
# ZOTERO_KEY_ALPHABET: hand-built histories and other tools write keys such as "ANNOT001".
_ZOTERO_KEY = re.compile(r"^[A-Z0-9]{8}$")
_ZOTERO_JSON_KEY = re.compile(
    r"\"(key|parentItem|itemKey|item_key|parent_item_key|attachmentKey|attachment_key|"
    r"collectionKey|collection_key|annotationKey|annotation_key)\"\s*:\s*\"([A-Z0-9]{8})\""
)
_GIT_COMMAND = re.compile(r"\s*(?:cd\s+\S+\s*&&\s*)?git\b")
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
_GIT_OUTPUT_HASH = re.compile(
    r"^(?:commit\s+([0-9a-f]{7,40})\b|\[[\w./-]+(?:\s+\(root-commit\))?\s+([0-9a-f]{7,40})\]|"
    r"\*?\s*([0-9a-f]{7,40})\s+\S)",
    re.MULTILINE,
)
_COMMIT_MENTION = re.compile(r"\bcommit(?:ted)?\s+(?:as\s+|hash\s+)?`?([0-9a-f]{7,40})\b",
                             re.IGNORECASE)
_PATH_TOKEN = re.compile(r"^(?:~|\.{1,2})?/?[\w.@+-]+(?:/[\w.@+-]+)+/?$")
_FILE_NAME = re.compile(r"^[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]{0,7}$")
_LINE_SUFFIX = re.compile(r":\d+(?::\d+)?$")
_ERROR_WORDS = re.compile(
    r"error|failed|failure|exception|traceback|not found|no such|denied|cannot|can't|"
    r"exited with code|invalid|refused|timed? ?out",
    re.IGNORECASE,
)
_TOKEN_SPLIT = re.compile(r"[\s\"'`()<>\[\]{},;|=]+")

# Keys of tool-call inputs that hold a file path (Pi, Claude Code and common MCP tools).
_PATH_FIELDS = frozenset(
    {"path", "file_path", "filepath", "filePath", "notebook_path", "filename", "file", "target"}
)
_URL_FIELDS = frozenset({"url", "uri", "href", "link"})
_COMMAND_FIELDS = frozenset({"command", "cmd", "script"})
_IGNORED_PATH_PREFIXES = ("/dev/", "/proc/", "/sys/")


# --------------------------------------------------------------------------- scanners


def _dois(text: str) -> Iterator[Sighting]:
    if "10." not in text:  # every DOI has it: most texts are not scanned (issue 26)
        return
    for m in _DOI.finditer(text):
        yield m.start(), entry("doi", m.group(0).rstrip(".,;:"))


def _urls(text: str) -> Iterator[Sighting]:
    if "://" not in text:  # every URL has it
        return
    for m in _URL.finditer(text):
        url = m.group(0).rstrip(".,;:!?*")
        # "$" and a trailing "=" mark a template being built in a command, not a resource.
        if "." in url.split("/")[2] and "$" not in url and not url.endswith("="):
            yield m.start(), entry("url", url)


def looks_like_path(token: str) -> bool:
    """True for tokens that are very probably file paths, not prose with a slash.

    Accepted: `/abs/path` and `~/x`, `./x`, `../x` with at least two segments, or a
    relative path whose last segment has a file extension (`src/app/main.py`). Rejected:
    `and/or`, `TCP/IP`, `km/h`, dates, URLs, slash commands (`/compact`).
    """
    if "://" in token or not _PATH_TOKEN.match(token):
        return False
    if token.startswith(_IGNORED_PATH_PREFIXES):
        return False
    segments = [s for s in token.split("/") if s not in ("", ".", "..", "~")]
    if not segments or all(s.isdigit() for s in segments):
        return False
    anchored = token.startswith(("/", "~/", "./", "../"))
    if anchored and len(segments) >= 2:
        return True
    last = segments[-1]
    return bool(_FILE_NAME.match(last)) and len(last.split(".")[0]) >= 2


def _path_tokens(text: str) -> Iterator[Sighting]:
    # Every path has a slash (`_PATH_TOKEN`): a text or a token without one is skipped
    # unread (issue 26: most prose has few). A token holds no separator, so it is found
    # from the end of the last token with a slash as from the end of the one before it.
    if "/" not in text:
        return
    masked = _URL.sub(lambda m: " " * len(m.group(0)), text)
    masked = _DOI.sub(lambda m: " " * len(m.group(0)), masked)
    pos = 0
    for token in _TOKEN_SPLIT.split(masked):
        if "/" not in token:
            continue
        start = masked.find(token, pos)
        pos = start + len(token)
        if start > 0 and masked[start - 1] in ")}$":
            continue  # glued to shell syntax, e.g. $(npm root -g)/pkg: not a real path
        cleaned = _LINE_SUFFIX.sub("", token.lstrip("*:").rstrip(".,:;!?*"))
        if cleaned and looks_like_path(cleaned):
            yield start, entry("path", cleaned)


def _commit_mentions(text: str) -> Iterator[Sighting]:
    for m in _COMMIT_MENTION.finditer(text):
        if _is_hash(m.group(1)):
            yield m.start(1), entry("commit", m.group(1))


def _git_output_hashes(text: str) -> Iterator[Sighting]:
    for m in _GIT_OUTPUT_HASH.finditer(text):
        value = next(g for g in m.groups() if g)
        if _is_hash(value):
            yield m.start(), entry("commit", value)


def _is_hash(value: str) -> bool:
    # A run of hex digits is a hash only if it mixes letters and digits (7-char numbers
    # and words like "defaced" are not commits).
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _prose_identifiers(text: str) -> list[LedgerEntry]:
    """Identifiers in what the user or the assistant wrote."""
    return in_order(_dois(text), _urls(text), _path_tokens(text), _commit_mentions(text),
                    *prose_scans(text))


def _user_identifiers(text: str) -> list[LedgerEntry]:
    """Identifiers the user wrote, with the priority that keeps them in the ledger longer."""
    found = _prose_identifiers(text)
    if not found:
        return found
    # An identifier named in a rule carries the rule as its note: the ledger then keeps
    # "never overwrite refs/library.bib" itself, whatever the summariser does.
    rules = {e.value: s for s in constraint_sentences(text) for e in _prose_identifiers(s)}
    out = []
    for e in found:
        rule = rules.get(e.value)
        if rule is None:
            out.append(e.model_copy(update={"priority": USER_WRITTEN}))
        else:
            ruled = entry(e.kind, e.value, rule)
            if ruled is not None:
                out.append(ruled.model_copy(update={"priority": USER_CONSTRAINT}))
    return out


# --------------------------------------------------------------------------- tool calls


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """(key, value) pairs of a nested JSON value, depth first, in document order."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key), item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def _call_identifiers(call: ToolCallPart) -> list[LedgerEntry]:
    out: list[LedgerEntry | None] = []
    data = tool_arguments(call.input)
    if isinstance(data, str):  # not JSON: a model's own words, read as prose
        return _prose_identifiers(data)
    for key, value in _walk(data):
        if not isinstance(value, str):
            continue
        if key in _PATH_FIELDS and "://" not in value:
            out.append(entry("path", value))
        elif key in _URL_FIELDS and _URL.match(value):
            out.append(entry("url", value))
        elif key in _COMMAND_FIELDS:
            out.extend(_command_identifiers(value))
        elif key.lower().endswith("key") and _ZOTERO_KEY.match(value):
            out.append(entry("zotero_key", value))
        else:
            out.extend(in_order(_dois(value), _urls(value)))
    return [e for e in out if e is not None]


def _command_identifiers(command: str) -> list[LedgerEntry]:
    scans: list[Iterable[Sighting]] = [
        _dois(command),
        _urls(command),
        _path_tokens(command),
    ]
    if re.search(r"\bgit\b", command):
        scans.append(
            (m.start(), entry("commit", m.group(0)))
            for m in _HEX.finditer(command)
            if _is_hash(m.group(0))
        )
    return in_order(*scans)


def _is_git_call(call: ToolCallPart | None) -> bool:
    if call is None:
        return False
    data = call.input if isinstance(call.input, dict) else {}
    command = next((v for k, v in data.items() if k in _COMMAND_FIELDS), "")
    return isinstance(command, str) and _GIT_COMMAND.match(command) is not None


# --------------------------------------------------------------------------- tool results


def _zotero_json(data: Any) -> list[LedgerEntry]:
    """Zotero keys (typed by what the object is), DOIs and item URLs in API-shaped JSON."""
    out: list[LedgerEntry | None] = []
    listing = isinstance(data, list) and len(data) > _LISTING_ITEMS

    def visit(obj: Any) -> None:
        if isinstance(obj, list):
            for item in obj:
                visit(item)
            return
        if not isinstance(obj, dict):
            return
        key = obj.get("key")
        inner = obj.get("data") if isinstance(obj.get("data"), dict) else obj
        if isinstance(key, str) and _ZOTERO_KEY.match(key):
            item = _zotero_object(key, inner)
            # Titles of listed items the session may never discuss are noise in the ledger.
            out.append(item.model_copy(update={"note": ""}) if listing and item else item)
        parent = inner.get("parentItem")
        if isinstance(parent, str) and _ZOTERO_KEY.match(parent):
            out.append(entry("zotero_item", parent))
        doi = inner.get("DOI")
        if isinstance(doi, str) and _DOI.fullmatch(doi.strip()):
            out.append(entry("doi", doi))
        url = inner.get("url")
        if isinstance(url, str) and _URL.fullmatch(url.strip()):
            out.append(entry("url", url))
        for field, value in obj.items():
            # Links to the API itself ("links", "library") are not resources to resume.
            if field not in ("links", "library", "data", "meta") and isinstance(
                value, (dict, list)
            ):
                visit(value)
        if inner is not obj:
            for field, value in inner.items():
                if isinstance(value, (dict, list)) and field not in ("creators", "tags"):
                    visit(value)

    visit(data)
    return [e for e in out if e is not None]


def _zotero_object(key: str, data: dict[str, Any]) -> LedgerEntry | None:
    item_type = data.get("itemType")
    title = str(data.get("title") or data.get("filename") or data.get("name") or "")
    if item_type == "attachment":
        return entry("zotero_attachment", key, title)
    if item_type == "annotation" or "annotationType" in data:
        return entry("zotero_annotation", key, str(data.get("annotationText") or ""))
    if item_type is not None:
        return entry("zotero_item", key, title)
    if "name" in data:
        return entry("zotero_collection", key, title)
    return entry("zotero_key", key, title)


def _result_identifiers(result: ToolResultPart, call: ToolCallPart | None) -> list[LedgerEntry]:
    out: list[LedgerEntry] = []
    text = result.output
    if result.is_error and not result.denied:
        error = entry("tool_error", error_line(text), call.name if call else (result.name or ""))
        if error is not None:
            out.append(error)
    parsed: Any = None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
    if parsed is not None:
        out.extend(_zotero_json(parsed))
    else:
        scans: list[Iterable[Sighting]] = [
            _dois(text),
            (
                (m.start(), entry("zotero_key", m.group(2)))
                for m in _ZOTERO_JSON_KEY.finditer(text)
            ),
        ]
        if _is_git_call(call):
            scans.append(_git_output_hashes(text))
        out.extend(in_order(*scans))
    return out


def error_line(output: str, limit: int = 200) -> str:
    """The line of a tool error worth keeping: the first that says what went wrong.

    Tool errors often open with banners (`> pkg@1.0 check`, `Debugger attached.`); the
    first line naming an error is what a resumed agent needs. Falls back to the first line.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    chosen = next((line for line in lines if _ERROR_WORDS.search(line)), lines[0] if lines else "")
    return chosen if len(chosen) <= limit else chosen[: limit - 1] + "…"


# --------------------------------------------------------------------------- typed parts


def _part_identifiers(part: Any) -> list[LedgerEntry | None]:
    if isinstance(part, ZoteroItemPart):
        return [entry("zotero_item", part.item_key, part.title)]
    if isinstance(part, PdfPagePart):
        if not part.attachment_key:
            return []
        return [entry("zotero_attachment", part.attachment_key, part.attachment_name)]
    if isinstance(part, AnnotationPart):
        out = [entry("zotero_annotation", part.annotation_key, part.text)]
        if part.parent_item_key:
            out.append(entry("zotero_item", part.parent_item_key))
        return out
    if isinstance(part, CollectionPart):
        return [entry("zotero_collection", part.key, part.name)]
    if isinstance(part, TagPart):
        return [entry("zotero_tag", part.tag, part.name)]
    return []


def _message_identifiers(msg: Message, calls: dict[str, ToolCallPart]) -> list[LedgerEntry]:
    out: list[LedgerEntry | None] = []
    for part in msg.parts:
        if isinstance(part, TextPart):
            if msg.role == "user":
                out.extend(_user_identifiers(part.text))
            elif msg.role == "assistant":
                out.extend(_prose_identifiers(part.text))
            else:
                # Tool-message text: DOIs only (paths and URLs there are mostly listings).
                out.extend(e for _, e in _dois(part.text))
        elif isinstance(part, ToolCallPart):
            out.extend(_call_identifiers(part))
        elif isinstance(part, ToolResultPart):
            out.extend(_result_identifiers(part, calls.get(part.call_id)))
        else:
            out.extend(_part_identifiers(part))
    return [e for e in out if e is not None]


def _better(new: LedgerEntry, old: LedgerEntry) -> bool:
    """Whether a later sighting of the same value says more than the first one."""
    if old.kind in _GENERIC_KINDS and new.kind.startswith("zotero_") and new.kind != old.kind:
        return True
    return new.kind == old.kind and bool(new.note) and not old.note


def _combine(new: LedgerEntry, old: LedgerEntry) -> LedgerEntry:
    """The entry for two sightings of one value: the more telling, at the higher priority."""
    best = new if _better(new, old) else old
    priority = max(new.priority, old.priority)
    return best if best.priority == priority else best.model_copy(update={"priority": priority})


def dedupe_identifiers(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """`entries` with one entry per value, in first-seen order.

    A later sighting replaces the first only when it says more (a typed Zotero kind for a
    bare key, or a note where there was none) and keeps the first sighting's position;
    the entry keeps the highest priority any sighting had (a constraint stays one).
    """
    out: list[LedgerEntry] = []
    index: dict[str, int] = {}
    for e in entries:
        i = index.get(e.value)
        if i is None:
            index[e.value] = len(out)
            out.append(e)
        else:
            out[i] = _combine(e, out[i])
    return out


def identifiers_by_message(nodes: Iterable[Node]) -> dict[str, tuple[LedgerEntry, ...]]:
    """Each message node's identifiers (node id -> entries, in order, not deduplicated).

    One pass over `nodes`: a tool result is read with the call it answers, when that call
    is among `nodes`. A node never changes, so a caller may keep this map and combine any
    run of it (`combine_identifiers`) instead of extracting the same message twice.
    """
    calls: dict[str, ToolCallPart] = {}
    found: dict[str, tuple[LedgerEntry, ...]] = {}
    for node, msg in message_nodes(nodes):
        for call in msg.tool_calls:
            calls[call.id] = call
        found[node.id] = tuple(_message_identifiers(msg, calls))
    return found


def combine_identifiers(per_message: Iterable[Iterable[LedgerEntry]]) -> list[LedgerEntry]:
    """Per-message identifiers, in order, deduplicated by value (first-seen order)."""
    return dedupe_identifiers(e for entries in per_message for e in entries)


def extract_identifiers(nodes: Iterable[Node]) -> list[LedgerEntry]:
    """Identifiers in `nodes`, deduplicated by value, in first-seen order.

    Sources: typed Zotero parts; Zotero API JSON in tool results; DOIs anywhere; URLs and
    path-looking tokens in user/assistant text and tool-call inputs (not in tool output,
    where they are mostly listings); path fields of tool inputs; commit hashes in git
    commands, git output and "commit <hash>" mentions; the first line of each tool error.
    """
    return combine_identifiers(identifiers_by_message(nodes).values())

