"""A request body decoded from the bytes it shares with the previous one (issue 26, Y10).

An agent resends its whole history on every call: decoding the body again and checking its
depth cost ~40 ms at 5,000 messages, on every request. `split` decodes a body and notes where
each element of its top-level `"messages"` array ends in the raw bytes; `resume` decodes the
next body of the same conversation from the first byte it does not share with that one.

Why a shared byte prefix is enough: a JSON parser reads left to right, so two texts that are
the same up to byte `n` parse to the same values for everything that ends before `n` — here
every `messages` element that ends inside the shared prefix is the same value (the same
object is reused), and only what follows is decoded (with the standard library's scanner,
element by element, so the new elements' ends are known for the next request). `1`, `1.0`
and `true` are different bytes, so they are never confused. Anything unexpected (another
encoding than UTF-8, a second top-level `messages`, bad JSON, a new value nested too deep)
gives up, and the caller decodes in full (`loads_bounded`), which gives the same value or
the same error.
"""

from __future__ import annotations

import json
import json.decoder
from dataclasses import dataclass
from typing import Any

from ..guard.body import MAX_JSON_DEPTH, json_depth

_DECODER = json.JSONDecoder()  # json.loads' own settings
_scan = _DECODER.scan_once
_scanstring = json.decoder.scanstring
_ws = json.decoder.WHITESPACE.match


class Unsplit(Exception):
    """The body is not one `split` / `resume` reads; decode it in full instead."""


@dataclass
class Split:
    """A decoded body and where its `messages` elements end in its raw bytes."""

    body: dict[str, Any]
    raw: bytes
    open: int  # byte offset of the `messages` array's `[`
    ends: list[int]  # byte offset just after each element


def split(raw: bytes) -> Split:
    """Decode `raw` (a JSON object with a `messages` array) noting the element ends; raises
    `Unsplit` for anything else. The depth limit is the caller's (`loads_bounded`)."""
    text = _text(raw)
    i = _ws(text, 0).end()
    if text[i:i + 1] != "{":
        raise Unsplit
    pairs: list[tuple[str, Any]] = []
    found: tuple[int, list[Any], list[int]] | None = None
    i = _ws(text, i + 1).end()
    if text[i:i + 1] != "}":
        while True:
            if text[i:i + 1] != '"':
                raise Unsplit
            key, i = _key(text, i)
            i = _colon(text, i)
            if key == "messages":
                if found is not None or text[i:i + 1] != "[":
                    raise Unsplit  # a second `messages` (the last wins) or not a list
                values, ends, after = _elements(text, i + 1, first=True)
                found = (i, values, ends)
                pairs.append((key, values))
                i = after
            else:
                value, i = _value(text, i)
                pairs.append((key, value))
            i, more = _next_member(text, i)
            if not more:
                break
    else:
        i += 1
    if _ws(text, i).end() != len(text) or found is None:
        raise Unsplit
    open_, values, ends = found
    return Split(dict(pairs), raw, *_byte_offsets(text, raw, open_, ends))


def resume(old: Split, raw: bytes, shared: int) -> Split:
    """Decode `raw`, whose first `shared` messages end where `old`'s do with the same bytes
    before them: those elements are `old`'s objects, the rest is decoded. Raises `Unsplit`
    (decode in full) for anything unexpected, a new value too deep included."""
    start = old.ends[shared - 1]
    try:
        head = json.loads(raw[:old.open] + b"[]}")  # the keys before `messages`: small
        tail = raw[start:].decode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        raise Unsplit from None
    values, ends, i = _elements(tail, 0, first=False)
    pairs: list[tuple[str, Any]] = []
    while True:
        i, more = _next_member(tail, i)
        if not more:
            break
        if tail[i:i + 1] != '"':
            raise Unsplit
        key, i = _key(tail, i)
        if key == "messages":
            raise Unsplit  # a second `messages`: decoded in full, where the last wins
        value, i = _value(tail, _colon(tail, i))
        pairs.append((key, value))
    if _ws(tail, i).end() != len(tail) or not isinstance(head, dict):
        raise Unsplit
    # Only what was decoded here can be too deep: the rest passed the check before.
    if any(json_depth(v, stop_after=MAX_JSON_DEPTH) + 2 > MAX_JSON_DEPTH for v in values) or \
            any(json_depth(v, stop_after=MAX_JSON_DEPTH) + 1 > MAX_JSON_DEPTH for _, v in pairs):
        raise Unsplit
    body = head
    body["messages"] = [*old.body["messages"][:shared], *values]
    for key, value in pairs:  # dict semantics of a repeated key: the last value wins
        body[key] = value
    _, new_ends = _byte_offsets(tail, raw[start:], 0, ends)
    return Split(body, raw, old.open, [*old.ends[:shared], *(start + e for e in new_ends)])


def shared_elements(old: Split, raw: bytes) -> int:
    """How many leading `messages` elements of `old` end inside the bytes `raw` shares with
    `old.raw` from its first byte (C-speed compares, no decoding)."""
    view = memoryview(old.raw)
    ends = old.ends
    if not ends or not raw.startswith(view[:ends[0]]):
        return 0
    if raw.startswith(view[:ends[-1]]):
        return len(ends)
    lo, hi = 1, len(ends) - 1  # ends[lo - 1] is shared, ends[hi] is not
    while lo <= hi:
        mid = (lo + hi) // 2
        if raw.startswith(view[:ends[mid]]):
            lo = mid + 1
        else:
            hi = mid - 1
    return lo


def _text(raw: bytes) -> str:
    if json.detect_encoding(raw) != "utf-8":  # UTF-16/32 or a BOM: decoded in full
        raise Unsplit
    try:
        return raw.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes
    except UnicodeDecodeError:
        raise Unsplit from None


def _value(text: str, i: int) -> tuple[Any, int]:
    try:
        return _scan(text, i)
    except (StopIteration, ValueError, RecursionError):
        raise Unsplit from None


def _key(text: str, i: int) -> tuple[str, int]:
    try:
        return _scanstring(text, i + 1)
    except ValueError:
        raise Unsplit from None


def _colon(text: str, i: int) -> int:
    i = _ws(text, i).end()
    if text[i:i + 1] != ":":
        raise Unsplit
    return _ws(text, i + 1).end()


def _next_member(text: str, i: int) -> tuple[int, bool]:
    """After an object member's value: past the `,` (True) or the closing `}` (False)."""
    i = _ws(text, i).end()
    c = text[i:i + 1]
    if c == ",":
        return _ws(text, i + 1).end(), True
    if c == "}":
        return i + 1, False
    raise Unsplit


def _elements(text: str, i: int, *, first: bool) -> tuple[list[Any], list[int], int]:
    """Array elements from `i` (just after `[` when `first`, else just after an element):
    their values, where each ends, and the position after the closing `]`."""
    values: list[Any] = []
    ends: list[int] = []
    i = _ws(text, i).end()
    if first:
        if text[i:i + 1] == "]":
            return values, ends, i + 1
    else:
        c = text[i:i + 1]
        if c == "]":
            return values, ends, i + 1
        if c != ",":
            raise Unsplit
        i = _ws(text, i + 1).end()
    while True:
        value, i = _value(text, i)
        values.append(value)
        ends.append(i)
        i = _ws(text, i).end()
        c = text[i:i + 1]
        if c == ",":
            i = _ws(text, i + 1).end()
        elif c == "]":
            return values, ends, i + 1
        else:
            raise Unsplit


def _byte_offsets(text: str, raw: bytes, open_: int, ends: list[int]) -> tuple[int, list[int]]:
    """Character offsets in `text` (decoded from `raw`) as byte offsets in `raw`."""
    if len(text) == len(raw):  # ASCII: the same
        return open_, ends
    def size(a: int, b: int) -> int:
        return len(text[a:b].encode("utf-8", "surrogatepass"))
    out, pos, at = [], size(0, open_), open_
    start = pos
    for end in ends:
        pos += size(at, end)
        at = end
        out.append(pos)
    return start, out
