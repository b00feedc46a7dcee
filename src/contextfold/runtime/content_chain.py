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
from collections.abc import Sequence
from typing import Any

from ..core.messages import Message, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

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


def chain_hashes(scope: str, messages: Sequence[Message],
                 known: tuple[Sequence[Message], Sequence[str]] | None = None) -> list[str]:
    """One hash per message: over the previous hash and the message's normalised content.

    `known`: an earlier list of the same scope and its hashes. The leading messages that are
    the very same objects keep their hashes (messages are frozen values): a client that
    resends its growing list costs the new messages only, not the whole list again.
    """
    same = 0
    if known is not None:
        old, old_hashes = known
        limit = min(len(old), len(old_hashes), len(messages))
        while same < limit and messages[same] is old[same]:
            same += 1
    out = list(known[1][:same]) if known is not None and same else []
    previous = out[-1] if out else scope_root(scope)
    for msg in messages[same:]:
        previous = next_hash(previous, msg)
        out.append(previous)
    return out
