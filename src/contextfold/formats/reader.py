"""Reading input files robustly: bytes, JSON lines and whole JSON documents.

A session file written by an agent that crashed may end in a truncated line, and a file picked
by mistake may be binary. Reading never raises anything but `ImportFormatError`; lines that
cannot be read are returned as `BadLine`s so the importer can report and count them.
How much may be read, and opening a file under that limit, are in `limits`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from contextfold.core.values.surrogates import replace_surrogates, surrogate_note

from .errors import ImportFormatError
from .limits import (  # noqa: F401  (re-exported; moved out in issue 39)
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_VALUE_BYTES,
    MAX_BYTES_ENV,
    MAX_VALUE_BYTES_ENV,
    OversizedLine,
    _max_bytes,
    _mb,
    _oversized,
    _too_big,
    import_limit,
    max_import_bytes,
    max_value_bytes,
    open_input,
    source_name,
    value_too_big,
)


@dataclass(frozen=True)
class JsonLine:
    """One readable line: its 1-based line number and the JSON object on it."""

    line: int
    obj: dict[str, Any]


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str


@dataclass(frozen=True)
class JsonlDocument:
    source: str
    lines: tuple[JsonLine, ...]
    bad: tuple[BadLine, ...]
    # Lines that were read after a repair (lone surrogates replaced): warnings, not damage.
    repaired: tuple[BadLine, ...] = ()


# A JSON escape of half a surrogate pair; only then can decoded text hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _without_surrogates(obj: Any, text: str) -> tuple[Any, int]:
    if _SURROGATE_ESCAPE.search(text) is None:
        return obj, 0
    return replace_surrogates(obj)


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes; a missing, unreadable, oversized or empty file is a fatal
    `ImportFormatError`."""
    name = source_name(path)
    limit = max_import_bytes()
    with open_input(path) as handle:
        # Sized by the file, not by the limit: `read(limit + 1)` allocates the whole limit
        # (256 MiB) up front for any file.
        expected = os.fstat(handle.fileno()).st_size
        data = handle.read(min(expected, limit) + 1)
        while len(data) <= limit:  # the file grew while it was read
            more = handle.read(1 << 20)
            if not more:
                break
            data += more
    if len(data) > limit:
        raise _too_big(name, limit)
    if not data.strip():
        raise ImportFormatError(name, "the file is empty")
    return data


def read_lines(path: str | Path) -> Iterator[bytes]:
    """The file's lines as bytes, streamed (never the whole file in memory); errors opening
    it are raised here, at the call, not at the first line."""
    handle = open_input(path)
    return _stream(handle, source_name(path), max_import_bytes())


def _stream(handle: BinaryIO, name: str, limit: int) -> Iterator[bytes]:
    read = 0
    cap = max_value_bytes()
    with handle:
        while line := handle.readline(cap + 1):
            read += len(line)
            if read > limit:
                raise _too_big(name, limit)
            if len(line) > cap and not line.endswith(b"\n"):  # over the cap: skip the rest
                size = len(line)
                while chunk := handle.readline(1 << 20):
                    size += len(chunk)
                    read += len(chunk)
                    if read > limit:
                        raise _too_big(name, limit)
                    if chunk.endswith(b"\n"):
                        break
                yield _oversized(size)
                continue
            yield line.rstrip(b"\n")


def _describe(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def parse_jsonl(data: bytes | Iterable[bytes], source: str) -> JsonlDocument:
    """Split into lines and parse each; undecodable or non-object lines become `BadLine`s.

    `data`: the file's bytes, or its lines (`read_lines`, streamed)."""
    good: list[JsonLine] = []
    bad: list[BadLine] = []
    repaired: list[BadLine] = []
    lines = data.split(b"\n") if isinstance(data, bytes) else data
    cap = max_value_bytes()
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, OversizedLine) or len(raw) > cap:
            size = raw.size if isinstance(raw, OversizedLine) else len(raw)
            bad.append(BadLine(number, value_too_big("the line", size)))
            continue
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8-sig")  # tolerate a BOM on the first line
        except UnicodeDecodeError:
            bad.append(BadLine(number, "not UTF-8 text (binary data?)"))
            continue
        try:
            obj = json.loads(text)
        except RecursionError:
            bad.append(BadLine(number, "JSON nested too deeply"))
            continue
        except ValueError as exc:
            reason = getattr(exc, "msg", str(exc))
            bad.append(BadLine(number, f"not valid JSON ({reason}; truncated line?)"))
            continue
        if not isinstance(obj, dict):
            bad.append(BadLine(number, f"JSON value is {_describe(obj)}, not an object"))
            continue
        obj, replaced = _without_surrogates(obj, text)
        if replaced:
            repaired.append(BadLine(number, surrogate_note(replaced)))
        good.append(JsonLine(number, obj))
    return JsonlDocument(source=source, lines=tuple(good), bad=tuple(bad),
                         repaired=tuple(repaired))


def require_readable(doc: JsonlDocument) -> None:
    """Fatal when nothing could be read, or when bad lines outnumber good ones.

    A few bad lines (a truncated last line) are normal for a crashed agent; a file where most
    lines are unreadable is almost certainly not a session file, and importing its few
    accidental JSON objects would mislead.
    """
    if not doc.lines:
        first = doc.bad[0] if doc.bad else None
        if first is None:
            raise ImportFormatError(doc.source, "the file is empty")
        raise ImportFormatError(
            doc.source, f"no readable JSON line; first problem: {first.reason}", first.line
        )
    if len(doc.bad) > len(doc.lines):
        first = doc.bad[0]
        raise ImportFormatError(
            doc.source,
            f"{len(doc.bad)} of {len(doc.bad) + len(doc.lines)} lines are unreadable "
            f"(first: {first.reason}); this does not look like a JSONL session file",
            first.line,
        )


def parse_json_document(data: bytes, source: str, notes: list[str] | None = None) -> Any:
    """Parse the whole file as one JSON value (chat message lists); fatal if it is not JSON.

    Lone surrogates are replaced with U+FFFD; `notes` (if given) is told how many. A
    document over `max_value_bytes()` is refused before it is parsed."""
    if len(data) > max_value_bytes():
        raise ImportFormatError(source, value_too_big("the file, one JSON document,",
                                                       len(data)))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(source, f"not UTF-8 text (binary data?) at byte {exc.start}") \
            from None
    try:
        value, replaced = _without_surrogates(json.loads(text), text)
    except RecursionError:
        raise ImportFormatError(source, "JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ImportFormatError(source, f"not valid JSON ({exc.msg})", exc.lineno) from None
    except ValueError as exc:
        raise ImportFormatError(source, f"not valid JSON ({exc})") from None
    if replaced and notes is not None:
        notes.append(f"{source}: {surrogate_note(replaced)}")
    return value


# ----------------------------------------------------------------------------- JSON arrays


def first_byte(path: str | Path) -> bytes:
    """The first byte of a file that is not a BOM or whitespace (b"" for a blank start)."""
    with open_input(path) as handle:
        return handle.read(65536).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]

_CHUNK = 1 << 20
_BOM = b"\xef\xbb\xbf"


@dataclass
class JsonArray:
    """A file that is one JSON array, read as a stream (issue 41): `items()` parses it one
    element at a time with `ijson` (yajl's C parser), so a 200 MB export never sits in
    memory as bytes, text and objects at once, and no limit on one JSON value applies to
    the file as a whole. `digest` is the SHA-256 of the file's bytes (what the importer's
    node ids are made from, as when the file was read whole)."""

    path: Path
    source: str
    digest: str
    # A JSON escape of half a surrogate pair appears in the file: yajl turns a lone one
    # into "?", so such a file is parsed by ijson's Python parser, which keeps it, and the
    # lone surrogates are then replaced with U+FFFD exactly as a whole-file read does.
    escapes_surrogates: bool

    @classmethod
    def open(cls, path: str | Path) -> JsonArray:
        """Read the file once for its digest (and whether it escapes a surrogate); errors
        opening it (missing, not a regular file, over the import limit) are raised here."""
        name = source_name(path)
        limit = max_import_bytes()
        digest, escapes, read, tail = hashlib.sha256(), False, 0, b""
        with open_input(path) as handle:
            while chunk := handle.read(_CHUNK):
                read += len(chunk)
                if read > limit:
                    raise _too_big(name, limit)
                digest.update(chunk)
                # The pattern is 4 bytes: the chunk's last 3 are searched again.
                escapes = escapes or _SURROGATE_ESCAPE_BYTES.search(tail + chunk) is not None
                tail = chunk[-3:]
        if read == 0:
            raise ImportFormatError(name, "the file is empty")
        return cls(Path(path), name, digest.hexdigest(), escapes)

    @classmethod
    def unread(cls, path: str | Path) -> JsonArray:
        """The array without the first pass (no digest): what detection reads, which looks
        at the messages' roles and shapes only."""
        return cls(Path(path), source_name(path), "", False)

    def items(self, notes: list[str] | None = None, *, limit: int | None = None
              ) -> Iterator[Any]:
        """The array's elements, parsed one by one (at most `limit` of them); a file that is
        not one JSON array, or not valid JSON, is a fatal `ImportFormatError` when reached.
        Lone surrogates become U+FFFD; `notes` is told how many once the array is read."""
        try:
            yield from self._items(self.escapes_surrogates, notes, limit)
        except _Overflow as stop:
            # An integer past 64 bits overflows yajl: the file is read again by ijson's
            # Python parser (unbounded integers), past the elements already handed out.
            yield from islice(self._items(True, notes, limit), stop.count, None)

    def _items(self, python: bool, notes: list[str] | None, limit: int | None
               ) -> Iterator[Any]:
        import ijson

        parser = ijson
        if python:
            from ijson.backends import python as parser  # type: ignore[no-redef]
        replaced = 0
        count = 0
        cap = max_value_bytes()
        with open_input(self.path) as handle:
            head = handle.read(len(_BOM))
            if head != _BOM:
                handle.seek(0)
            try:
                for item in parser.items(handle, "item", use_float=True):
                    # One element is still one JSON value: over the limit, it is skipped
                    # (its text would be indexed word by word), as an oversized line is.
                    size = value_size(item, cap)
                    if size > cap:
                        yield OversizedValue(size)
                        count += 1
                        continue
                    if python:
                        item, fixed = replace_surrogates(item)
                        replaced += fixed
                    yield item
                    count += 1
                    if limit is not None and count >= limit:
                        return
            except ijson.JSONError as exc:
                if not python and "integer overflow" in _json_error(exc):
                    raise _Overflow(count) from None
                raise ImportFormatError(self.source, _json_error(exc)) from None
            except UnicodeDecodeError as exc:
                raise ImportFormatError(self.source, "not UTF-8 text (binary data?) at byte "
                                        f"{exc.start}") from None
        if replaced and notes is not None:
            notes.append(f"{self.source}: {surrogate_note(replaced)}")


@dataclass(frozen=True)
class OversizedValue:
    """What `JsonArray.items` yields for an element over `max_value_bytes()` (dropped)."""

    size: int


def value_size(value: Any, cap: int) -> int:
    """About how many bytes `value` takes as JSON (its strings' lengths and a few bytes per
    other item), counted no further than past `cap`."""
    size, stack = 0, [value]
    while stack and size <= cap:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + sum(len(k) + 4 for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend(item)
        else:
            size += 8
    return size


class _Overflow(Exception):
    """yajl met an integer past 64 bits after handing out `count` elements."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count

_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _json_error(exc: Exception) -> str:
    """yajl's message in a sentence (its first line, without the byte dump)."""
    text = exc.args[0] if exc.args else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    first = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    if "invalid bytes in UTF8" in first:
        return "not UTF-8 text (binary data?)"
    return f"not valid JSON ({first})"
