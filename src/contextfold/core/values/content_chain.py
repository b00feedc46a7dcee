"""Content-hash chains over messages (SPEC Y1): how a resent history is recognised.

A client that keeps its own history (an agent CLI behind the proxy, a framework that resends
its whole message list) sends the same messages again on every call. Each message gets a
hash over the previous message's hash and its *normalised* content, so equal prefixes have
equal hashes and the first difference changes every hash after it.

Normalisation keeps what the model sees and drops what a client legitimately changes when
it sends a message back: usage, model, status and reasoning (most clients drop it, some
replay it), surrounding whitespace of text (Anthropic refuses trailing whitespace in a final
assistant turn, so clients strip it), empty text parts and the tool name on a result (OpenAI
tool messages carry none). Tool-call arguments are compared as parsed JSON.

A message that opens with a provider's own compaction (SPEC Y7: Anthropic's `compaction`
block, OpenAI's `compaction` item) stands for the whole conversation before it: the provider
tells the client to drop those messages and send the block or item first. Its hash therefore
starts from the scope's root, as if it opened the conversation (`chain_link`), so a list that
begins with it (the client swapped it in) and a list that still holds what it compacted name
the same stored node, and the session goes on from the provider's checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from .held import Held, text_bytes
from .messages import (
    Message,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .runs import leading_run

CHAIN_VERSION = "contextfold-mirror-v1"


def _part_key(part: Any) -> Any:
    if isinstance(part, ReasoningPart):
        return None
    if isinstance(part, TextPart):
        text = part.text.strip()
        return ["text", text] if text else None
    if isinstance(part, ToolCallPart):
        return ["tool_call", part.id, part.name, part.input]
    if isinstance(part, ToolResultPart):
        return ["tool_result", part.call_id, part.output.strip(), part.is_error, part.denied]
    return part.model_dump(mode="json")


def message_key(msg: Message) -> str:
    """Canonical text of what of `msg` must match for two messages to be "the same"."""
    parts = [k for k in (_part_key(p) for p in msg.parts) if k is not None]
    return json.dumps([msg.role, parts], sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)


def scope_root(scope: str) -> str:
    """The hash a chain starts from: conversations of different scopes never share nodes."""
    return hashlib.sha256(f"{CHAIN_VERSION}\0scope\0{scope}".encode()).hexdigest()


def next_hash(previous: str, msg: Message) -> str:
    """The chain hash of `msg` following the hash `previous`."""
    return hashlib.sha256(
        f"{previous}\0{message_key(msg)}".encode("utf-8", "surrogatepass")).hexdigest()


def opens_with_provider_compaction(msg: Message) -> bool:
    """Does `msg` begin with a provider's own compaction (SPEC Y7)? Such a message stands for
    everything before it: its chain starts anew (`chain_link`)."""
    return bool(msg.parts) and isinstance(msg.parts[0], ProviderCompactionPart)


def chain_link(scope: str, previous: str, msg: Message) -> str:
    """The chain hash of `msg` after the hash `previous` in `scope`: `next_hash`, except that
    a message opening with a provider's compaction follows the scope's root (SPEC Y7)."""
    if opens_with_provider_compaction(msg):
        previous = scope_root(scope)
    return next_hash(previous, msg)


def chain_hashes(scope: str, messages: Sequence[Message]) -> list[str]:
    """One hash per message: over the previous hash and the message's normalised content."""
    out: list[str] = []
    previous = scope_root(scope)
    for msg in messages:
        previous = chain_link(scope, previous, msg)
        out.append(previous)
    return out


# Bytes a remembered message costs the memo beyond the message itself: its hash (a 64-char
# str), its slot in the tuple and the hash list, its running size.
_PER_MESSAGE = 200


class ChainMemo:
    """`chain_hashes` for clients that resend their whole list with a few messages added.

    Remembers the last list of each conversation (keyed by scope and the first message's
    hash; up to `per_key` lists under one key, for conversations that open alike) with its
    hashes; a list that shares a prefix with one of them reuses those hashes and hashes only
    what follows. The prefix is found by comparing the messages themselves (frozen values:
    equal messages have equal keys, and the same object compares at once), which costs a
    fraction of hashing them.

    The lists live in `held`, the process's per-conversation cache bounded by bytes (SPEC
    Y14; its own when not given), each key's lists one value sized by the messages they
    hold (each new message measured once): least recently used out. `Held(0)` remembers
    nothing.
    """

    def __init__(self, held: Held | None = None, per_key: int = 8) -> None:
        self.held = held if held is not None else Held()
        self.per_key = per_key
        self._next = 0
        self.hashed = 0  # messages hashed so far (the rest came from the memo)

    def hashes(self, scope: str, messages: Sequence[Message]) -> list[str]:
        """The same as `chain_hashes(scope, messages)`."""
        msgs = tuple(messages)
        if not msgs:
            return []
        first = next_hash(scope_root(scope), msgs[0])
        out, known, best = [first], 1, None
        lists: dict[int, _Remembered] | None = self.held.get(("chain", scope, first))
        for n, old in (lists or {}).items():
            run = 1 + leading_run(msgs[1:], old.messages[1:])  # the same object, or equal
            if run > known or best is None:
                best, known, out = n, run, old.hashes[:run]
        previous = out[-1]
        for msg in msgs[known:]:
            previous = chain_link(scope, previous, msg)
            out.append(previous)
        self.hashed += 1 + len(msgs) - known
        self._keep(("chain", scope, first), lists or {}, best, known, msgs, out)
        return list(out)

    def _keep(self, key: tuple[str, str, str], lists: dict[int, _Remembered],
              best: int | None, known: int, msgs: tuple[Message, ...],
              hashes: list[str]) -> None:
        # The list continues the one it matched (all of it): it takes that one's place.
        # Else it is a conversation of its own, or an edit or retry of one: kept beside it,
        # so conversations that open alike do not evict each other's lists (issue 26).
        old = lists.get(best) if best is not None else None
        sizes = old.sizes[:known + 1] if old is not None else [0]
        for msg in msgs[len(sizes) - 1:]:
            sizes.append(sizes[-1] + text_bytes(msg, 7))
        if old is not None and known == len(old.messages):
            del lists[best]  # type: ignore[arg-type]
            slot = best
        else:
            slot = self._next
            self._next += 1
        lists[slot] = _Remembered(msgs, hashes, sizes)  # the most recent last
        for n in list(lists)[:-self.per_key]:
            del lists[n]
        self.held.put(key, lists, sum(r.size for r in lists.values()))


class _Remembered(NamedTuple):
    """One remembered list: its messages, their hashes, and the running sizes of the
    messages (`sizes[i]`: the bytes of the first i)."""

    messages: tuple[Message, ...]
    hashes: list[str]
    sizes: list[int]

    @property
    def size(self) -> int:
        return self.sizes[-1] + _PER_MESSAGE * len(self.messages)
