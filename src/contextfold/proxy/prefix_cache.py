"""Known-prefix reuse: a resent message list costs what its new messages cost (Y10).

An agent behind the proxy resends its whole history on every call. Decoding the body,
checking its depth and reading one validated `Message` per wire message again made every
request linear in the history. `PrefixCache` keeps, per conversation, the last raw body
with where each of its messages ends (`body_prefix`), the wire messages decoded from it, the
`Message` read from each and each one's canonical bytes. A new body is compared with it byte
for byte (C-speed `startswith`, no decoding): the elements that end inside the bytes both
share are the same values, so `loads` reuses those objects and decodes only what follows,
and `read` reuses their `Message` objects (the same objects, so the mirror's chain memo and
the estimator's cost memo recognise them at once) and reads only the rest.

Correctness does not depend on the cache: equal leading bytes parse to equal values (`1`,
`1.0` and `true` are different bytes, unlike `==` on decoded values), and a message's read
depends only on it and the tool-call names of the messages before it, which are rebuilt from
the reused messages. A miss (a new process, another worker, an evicted or edited list, a
body `body_prefix` does not read) decodes and reads in full, which gives the same values;
the store stays the truth for what is stored. The canonical bytes, one message at a time,
are the forwarded body's pieces (`stats.encode`), so a kept message is serialised once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.values.held import Held
from ..core.values.messages import Message, ToolCallPart
from ..core.values.surrogates import without_surrogates
from ..guard.body import MAX_JSON_DEPTH, loads_bounded, text_depth
from .body_prefix import Split, Unsplit, resume, shared_elements, split

try:  # the `proxy` extra; the stdlib fallback gives the same values, slower
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    _orjson = None

# A protocol's `read_message(m, call_names=names)`: the same function for a whole cache entry.
Reader = Callable[..., Message]


def _stdlib(value: Any) -> bytes:
    return json.dumps(without_surrogates(value), ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


def _encoder(value: Any) -> tuple[Callable[[Any], bytes], bytes]:
    """The encoder for `value` and its bytes: orjson when it can, else the stdlib's (a lone
    surrogate, which is not UTF-8, or an integer beyond 64 bits)."""
    if _orjson is not None:
        try:
            return _orjson.dumps, _orjson.dumps(value)
        except TypeError:
            pass
    return _stdlib, _stdlib(value)


def dumps(value: Any) -> bytes:
    """Canonical compact JSON bytes of a decoded JSON value (a lone surrogate becomes U+FFFD,
    as everywhere text enters, docs/store.md)."""
    return _encoder(value)[1]


@dataclass
class CachedRead:
    """A list read through the cache: its messages, each wire message's bytes, and how
    many leading messages came from the cache (a part of the request's `wire.Parsed`)."""

    messages: list[Message]
    raw: list[bytes]
    reused: int


@dataclass
class _Parse:
    """The messages read from a body's `messages[offset:]`, with their canonical bytes."""

    offset: int
    reader: Any
    messages: list[Message]
    canon: list[bytes]
    names: dict[str, str]  # tool call id -> name after all of `messages`


@dataclass
class _Entry:
    split: Split  # the conversation's last body, with where its messages end
    inherited: int  # leading elements of `split` that the body `parse` read had too
    parse: _Parse | None = None


def _names_of(messages: Sequence[Message]) -> dict[str, str]:
    """The tool-call names a reader would have collected reading `messages` in order."""
    names: dict[str, str] = {}
    for msg in messages:
        for part in msg.parts:
            if isinstance(part, ToolCallPart):
                names[part.id] = part.name
    return names


# What one entry holds, in bytes of its raw body: the body itself, the values decoded from
# it, the messages read from them and their canonical bytes (each about the body's size).
_PER_BODY_BYTE = 4


def _entry_bytes(entries: dict[int, _Entry]) -> int:
    return sum(_PER_BODY_BYTE * len(e.split.raw) for e in entries.values())


class PrefixCache:
    """The last body of each conversation, with what was read from it, in `held`: the
    process's per-conversation cache bounded by bytes (SPEC Y14; its own when not given),
    least recently used out. The conversations of one key (several sharing a scope) are
    one value there, up to `per_key` of them. `Held(0)` keeps nothing (every body decoded
    and read in full: the same values)."""

    def __init__(self, held: Held | None = None, per_key: int = 8) -> None:
        self.held = held if held is not None else Held()
        self.per_key = per_key
        self._next = 0
        self.parsed = 0  # messages parsed so far (the rest were reused)
        self.decoded = 0  # `messages` elements decoded so far (the rest were reused)

    def _entries(self, key: Any) -> dict[int, _Entry] | None:
        return self.held.get(("prefix", key))

    def loads(self, raw: bytes, key: Any) -> Any:
        """`loads_bounded(raw)` (the same value, the same errors), decoding only the bytes
        after those `raw` shares with the last body of one of `key`'s conversations."""
        entries = self._entries(key) or {}
        best, shared = None, 0
        for n, entry in entries.items():
            got_shared = shared_elements(entry.split, raw)
            if got_shared > shared:
                best, shared = n, got_shared
        got = None
        if best is not None:
            with contextlib.suppress(Unsplit):
                got = resume(entries[best].split, raw, shared)
        if got is None:
            best, shared = None, 0
            try:  # the same scanner as json.loads, noting where each message ends
                got = split(raw)
            except Unsplit:
                return loads_bounded(raw)  # its value, or its error
            if text_depth(raw, stop_after=MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
                return loads_bounded(raw)  # refused as it refuses
        self.decoded += len(got.ends) - shared
        self._keep(key, entries, best, got, shared)
        return got.body

    def read(self, key: Any, wire: list[Any], offset: int, reader: Reader) -> CachedRead:
        """`[reader(m, call_names=names) for m in wire[offset:]]` (one shared `names`), reusing the
        messages read from the leading elements `wire` shares with the conversation's last
        body (when `wire` came from `loads` of the same `key`)."""
        entries = self._entries(key) or {}
        entry = next((e for e in entries.values() if e.split.body.get("messages") is wire),
                     None)
        known, previous = 0, entry.parse if entry is not None else None
        if entry is not None and previous is not None and previous.offset == offset and \
                previous.reader is reader:
            known = max(0, min(entry.inherited - offset, len(previous.messages)))
        if previous is None or known == 0:
            messages: list[Message] = []
            canon: list[bytes] = []
            names: dict[str, str] = {}
        else:
            messages, canon = previous.messages[:known], previous.canon[:known]
            names = dict(previous.names) if known == len(previous.messages) else \
                _names_of(messages)
        for m in wire[offset + known:]:
            messages.append(reader(m, call_names=names))
            canon.append(dumps(m))
        self.parsed += len(wire) - offset - known
        if entry is not None:
            entry.parse = _Parse(offset, reader, messages, canon, dict(names))
            entry.inherited = len(wire)
        return CachedRead(list(messages), list(canon), known)

    def _keep(self, key: Any, entries: dict[int, _Entry], best: int | None, got: Split,
              shared: int) -> None:
        source = entries.get(best) if best is not None else None
        if source is None or shared < len(source.split.ends):
            # A new entry: a new conversation, or a body that leaves the entry's list before
            # its end (another conversation that opens the same way, the same system prompt;
            # or an edit or retry of this one), which starts from what the two share. The
            # old one stays, so conversations of one scope do not overwrite each other's
            # list (issue 26: with 2 clients, every request parsed its whole history again).
            slot = self._next
            self._next += 1
            entries[slot] = _Entry(got, 0) if source is None else \
                _Entry(got, min(shared, source.inherited), source.parse)
        else:
            # What the entry's parse read is shared by both bodies: a body decoded twice
            # before it is read (a retry, two requests at once) keeps the smaller count.
            entry = entries.pop(best)  # type: ignore[arg-type]
            entry.split, entry.inherited = got, min(shared, entry.inherited)
            entries[best] = entry  # type: ignore[index]  # the most recent last
        for n in list(entries)[:-self.per_key]:
            del entries[n]
        self.held.put(("prefix", key), entries, _entry_bytes(entries))
