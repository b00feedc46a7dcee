"""What a long-running process holds per conversation, bounded by bytes (SPEC Y14).

A proxy or a mirror serves conversations for months; each one it has seen leaves memos
behind (the branch it last synced, its sizer, its chain hashes and parsed body, the proxy's
figures, the items a response id stands for). `Held` is the one place they live: a map
bounded by the approximate bytes of its values, least recently used out. An evicted value
is only a memo: the store stays the truth, and the conversation's next request reads it
again.

A value still in use (its session's lock held, a reply or a compaction pending) says so
(a true `busy` attribute) and is passed over by eviction until it is done, so two
requests of one session never get two different locks. Sizes are estimates
(`text_bytes`): what matters is that they grow with what a value really holds, so the
bound holds within a small factor.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from functools import update_wrapper
from typing import Any, Protocol, TypeVar, cast

DEFAULT_BYTES = 256 << 20  # a process's per-conversation memos (`--memory-cache`)
# Each of the summariser's memos over message texts (`HeldMemo`). They are there so the
# offline summary and its retention check read each user message once (issue 26), and so a
# section compares a new bullet with the ones it holds without normalising them again.
# Measured on a non-repeating 20,000-message history (`bench/varied_data.py`): its user
# messages take 2-3 MB in each memo, and 4 MB of `norm_item` misses under 1% of 4.7 million
# calls; so 4 MB each (20 MB in all), whatever the process has summarised before.
TEXT_MEMO_BYTES = 4 << 20
_OVERHEAD = 240  # bytes of an entry's own bookkeeping (key tuple, node, object headers)


class Held:
    """A map of per-conversation values bounded by `max_bytes` (their estimated sizes),
    least recently used out. A value whose `busy` attribute is true is not evicted now; a
    value with an `evicted()` method is told when it is (to save what it would lose)."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.evicted = 0  # values evicted so far

    def get(self, key: Hashable) -> Any:
        """The value under `key` (None when absent), now the most recently used."""
        held = self._items.get(key)
        if held is None:
            return None
        self._items.move_to_end(key)
        return held[0]

    def peek(self, key: Hashable) -> Any:
        """The value under `key` (None when absent), its recency left as it is (a look over
        what is held, not a use)."""
        held = self._items.get(key)
        return None if held is None else held[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Hold `value` under `key` at an estimated `size` bytes; evict to the bound."""
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        size = max(0, int(size)) + _OVERHEAD
        self._items[key] = (value, size)
        self.bytes += size
        self._evict()

    def resize(self, key: Hashable, size: int) -> None:
        """The value under `key` grew or shrank in place: its new estimated size."""
        held = self._items.get(key)
        if held is not None:
            self.put(key, held[0], size)

    def pop(self, key: Hashable) -> Any:
        """Remove `key`'s value and return it (None when absent); not an eviction."""
        held = self._items.pop(key, None)
        if held is None:
            return None
        self.bytes -= held[1]
        return held[0]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Hashable]:
        """The keys held now (a snapshot: the map may change while they are read)."""
        return iter(list(self._items))

    def _evict(self) -> None:
        excess = self.bytes - self.max_bytes
        if excess <= 0:
            return
        # Oldest first, read in place: a full cache evicts on nearly every put, and a copy
        # of every key each time would cost O(entries) per put (a store's memos are many
        # small entries).
        gone: list[tuple[Hashable, Any, int]] = []
        for key, (value, size) in self._items.items():
            if excess <= 0:
                break
            if getattr(value, "busy", False):
                continue
            gone.append((key, value, size))
            excess -= size
        for key, _, size in gone:
            del self._items[key]
            self.bytes -= size
        self.evicted += len(gone)
        for _, value, _ in gone:  # told once all are out: a value told may use the cache
            told = getattr(value, "evicted", None)
            if callable(told):
                told()


def text_bytes(value: Any, limit: int = 4) -> int:
    """A cheap estimate of the bytes `value` holds: its strings and byte strings counted,
    containers and model objects walked `limit` levels deep (a count, not a measure: it
    grows with the text a message, a branch or a body really holds)."""
    if isinstance(value, str | bytes | bytearray):
        return 49 + len(value)
    if limit <= 0 or value is None or isinstance(value, int | float | bool):
        return 16
    if isinstance(value, dict):
        return 64 + sum(text_bytes(k, 1) + text_bytes(v, limit - 1) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 56 + sum(text_bytes(v, limit - 1) for v in value)
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):
        return 64 + sum(text_bytes(v, limit - 1) for v in fields.values())
    return 16


def nodes_bytes(nodes: Iterable[Any]) -> int:
    """The estimated bytes of a branch's nodes (their messages' text and bookkeeping)."""
    return sum(text_bytes(n, 7) for n in nodes)


_R = TypeVar("_R")


class HeldMemo(Protocol[_R]):
    """A pure function of one text with its results remembered in `held` (`held_memo`)."""

    held: Held
    __wrapped__: Callable[[str], _R]

    def __call__(self, text: str) -> _R: ...

    def cache_clear(self) -> None:
        """Forget every result (as `functools.lru_cache`'s `cache_clear`)."""


def held_memo(max_bytes: int) -> Callable[[Callable[[str], _R]], HeldMemo[_R]]:
    """Decorate a pure function of one text: its results remembered in a `Held` of its own
    bounded by `max_bytes`, least recently used out. A `functools.lru_cache` bounded by
    count keeps that many texts of any length, which grows with what a process has read
    (SPEC Y14).

    Each entry is sized by `text_bytes` of its argument and of its result, both of which
    the memo keeps alive. Thread-safe: summarisers also run in worker threads
    (`asyncio.to_thread`). The function runs outside the lock, so two threads may compute
    one text at once; being pure, either result is the same."""

    def wrap(fn: Callable[[str], _R]) -> HeldMemo[_R]:
        held = Held(max_bytes)
        lock = threading.Lock()
        # A hit is one look-up and one move in the map `Held` keeps, through bound methods
        # taken once: the summariser calls `norm_item` millions of times on a long history,
        # where a method call more per hit is measurable.
        get, move = held._items.get, held._items.move_to_end

        def memo(text: str) -> _R:
            with lock:
                found = get(text)
                if found is not None:
                    move(text)
                    return found[0]  # type: ignore[no-any-return]
            result = fn(text)
            size = text_bytes(text) + text_bytes(result)
            with lock:
                held.put(text, result, size)
            return result

        def cache_clear() -> None:
            with lock:
                for key in held:
                    held.pop(key)

        update_wrapper(memo, fn)
        memo.held = held  # type: ignore[attr-defined]
        memo.cache_clear = cache_clear  # type: ignore[attr-defined]
        return cast(HeldMemo[_R], memo)

    return wrap


__all__ = ["DEFAULT_BYTES", "TEXT_MEMO_BYTES", "Held", "HeldMemo", "held_memo", "nodes_bytes",
           "text_bytes"]
