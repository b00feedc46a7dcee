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
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..core.messages import Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart
from ..core.runs import leading_run

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


def chain_hashes(scope: str, messages: Sequence[Message]) -> list[str]:
    """One hash per message: over the previous hash and the message's normalised content."""
    out: list[str] = []
    previous = scope_root(scope)
    for msg in messages:
        previous = next_hash(previous, msg)
        out.append(previous)
    return out


class ChainMemo:
    """`chain_hashes` for clients that resend their whole list with a few messages added.

    Remembers the last list of each conversation (keyed by scope and the first message's
    hash) with its hashes; a list that shares a prefix with it reuses those hashes and
    hashes only what follows. The prefix is found by comparing the messages themselves
    (frozen values: equal messages have equal keys, and the same object compares at once),
    which costs a fraction of hashing them. `size`: how many conversations are remembered
    (least recently used first out; 0 remembers none).
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._lists: OrderedDict[tuple[str, str], tuple[tuple[Message, ...], list[str]]] = \
            OrderedDict()
        self.hashed = 0  # messages hashed so far (the rest came from the memo)

    def hashes(self, scope: str, messages: Sequence[Message]) -> list[str]:
        """The same as `chain_hashes(scope, messages)`."""
        msgs = tuple(messages)
        if not msgs:
            return []
        first = next_hash(scope_root(scope), msgs[0])
        key = (scope, first)
        out, known = [first], 1
        seen = self._lists.get(key)
        if seen is not None:
            old, old_hashes = seen
            known += leading_run(msgs[1:], old[1:])  # the same object, or equal
            out = old_hashes[:known]
        previous = out[-1]
        for msg in msgs[known:]:
            previous = next_hash(previous, msg)
            out.append(previous)
        self.hashed += 1 + len(msgs) - known
        if self.size > 0:
            self._lists[key] = (msgs, out)
            self._lists.move_to_end(key)
            while len(self._lists) > self.size:
                self._lists.popitem(last=False)
        return list(out)
