"""Known-prefix reuse: a resent message list costs what its new messages cost.

An agent behind the proxy resends its whole history on every call. Parsing it again (one
validated `Message` per wire message, ~40 µs each) made every request linear in the
history. `PrefixCache` keeps, per conversation, the last list's wire messages as canonical
bytes with the `Message` parsed from each; a new list whose leading messages encode to the
same bytes reuses those `Message` objects (the same objects, so the mirror's chain memo and
the estimator's cost memo recognise them at once) and parses only what follows.

Correctness does not depend on the cache: equal canonical bytes are equal JSON values
(`orjson` / `json` spell `1`, `1.0` and `true` apart, unlike `==` on the decoded values),
and a message's parse depends only on it and the tool-call names of the messages before it,
which are rebuilt from the reused messages. A miss (a new process, another worker, an
evicted or edited list) parses in full, which gives the same messages; the store stays the
truth for what is stored. The bytes double as the forwarded body's pieces (`stats.encode`),
so a kept message is serialised once per request, not twice.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.messages import Message, ToolCallPart
from ..core.surrogates import without_surrogates

try:  # the `proxy` extra; the stdlib fallback gives the same values, slower
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised when the extra is not installed
    _orjson = None

Reader = Callable[[Any, dict[str, str]], Message]


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


def _spans(blob: bytes, lens: Sequence[int]) -> list[bytes]:
    """The elements of the JSON array `blob` whose encoded lengths are `lens`."""
    out, pos = [], 1
    for n in lens:
        out.append(blob[pos:pos + n])
        pos += n + 1
    return out


def _common(blob: bytes, old: bytes, lens: Sequence[int], limit: int) -> int:
    """How many leading elements of the arrays `blob` and `old` are the same bytes: element
    by element at the same offsets (the earlier ones being equal), each followed by a
    delimiter, so an equal slice is a whole, equal element."""
    n, pos = 0, 1
    for size in lens[:limit]:
        end = pos + size
        if blob[pos:end] != old[pos:end] or blob[end:end + 1] not in (b",", b"]"):
            break
        n += 1
        pos = end + 1
    return n


@dataclass
class Parsed:
    """A list read through the cache: its messages, each wire message's bytes, and how
    many leading messages came from the cache."""

    messages: list[Message]
    raw: list[bytes]
    reused: int


@dataclass
class _Entry:
    blob: bytes  # the list as one JSON array
    lens: list[int]  # the encoded length of each element
    encoder: Callable[[Any], bytes]
    messages: list[Message]
    names: dict[str, str]  # tool call id -> name after the whole list


def _names_of(messages: Sequence[Message]) -> dict[str, str]:
    """The tool-call names a reader would have collected reading `messages` in order."""
    names: dict[str, str] = {}
    for msg in messages:
        for part in msg.parts:
            if isinstance(part, ToolCallPart):
                names[part.id] = part.name
    return names


class PrefixCache:
    """The last message list of up to `size` conversations (least recently used out);
    `per_key` lists are kept under one key (several conversations sharing a scope)."""

    def __init__(self, size: int = 64, per_key: int = 8) -> None:
        self.size = size
        self.per_key = per_key
        self._entries: OrderedDict[tuple[Any, int], _Entry] = OrderedDict()
        self._next = 0
        self.parsed = 0  # messages parsed so far (the rest were reused)

    def read(self, key: Any, wire: Sequence[Any], reader: Reader) -> Parsed:
        """`[reader(m, names) for m in wire]` (with one shared `names`), reusing the longest
        known prefix of the lists stored under `key`."""
        # One encoder call for the whole list (thousands of per-message calls cost ~50x
        # more), the known prefix found by comparing byte ranges at the old list's offsets.
        encoder, blob = _encoder(list(wire))
        best, entry_key, known = None, None, 0
        for k, entry in self._entries.items():
            if k[0] != key or entry.encoder is not encoder:
                continue
            n = _common(blob, entry.blob, entry.lens, min(len(entry.lens), len(wire)))
            if n > known:
                best, entry_key, known = entry, k, n
        lens = [*(best.lens[:known] if best else ()), *(len(encoder(m)) for m in wire[known:])]
        if len(wire) and 1 + sum(lens) + len(lens) != len(blob):  # never seen; be safe
            best, known = None, 0
            lens = [len(encoder(m)) for m in wire]
        raw = _spans(blob, lens) if 1 + sum(lens) + len(lens) == len(blob) else \
            [encoder(m) for m in wire]
        if best is None:
            messages: list[Message] = []
            names: dict[str, str] = {}
        else:
            messages = best.messages[:known]
            names = dict(best.names) if known == len(best.messages) else _names_of(messages)
        for m in wire[known:]:
            messages.append(reader(m, names))
        self.parsed += len(wire) - known
        if self.size > 0 and wire:
            if entry_key is None:
                entry_key = (key, self._next)
                self._next += 1
            self._entries[entry_key] = _Entry(blob, lens, encoder, messages, names)
            self._entries.move_to_end(entry_key)
            self._evict(key)
        return Parsed(list(messages), raw, known)

    def _evict(self, key: Any) -> None:
        same = [k for k in self._entries if k[0] == key]
        for k in same[:-self.per_key]:
            del self._entries[k]
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
