"""Does a request ask its provider to compact? (SPEC Y7)

The providers compact on their side when the client asks them to, and the proxy passes every
such request through with its parameters as sent:

* Anthropic, on demand (beta `compact-2026-09-04`): a top-level `compaction` object
  (`{"type": "summarize"}`) makes the request a compaction request; the answer is one signed
  `compaction` block alone, `stop_reason: "compaction"`, which the client then sends first in
  place of the messages it summarises (at once, or later: background compaction).
* Anthropic, at a threshold (beta `compact-2026-01-12`): `context_management.edits` holding a
  `compact_*` edit; the block comes at the start of an ordinary answer.
* OpenAI Responses, in the call: `context_management: [{"type": "compaction",
  "compact_threshold": N}]`; the output (and the stream) carries an encrypted `compaction`
  item.

A session whose client asks for any of them leaves its automatic compaction to the provider
(`Mirror.sync(provider_compaction=True)`); contextfold still compacts what the window forces
(P1-P5). An on-demand compaction request's answer is not a turn the conversation waits for
(`Mirror.expect_reply(compaction=True)`), and it is recorded only when it holds the block.
"""

from __future__ import annotations

from typing import Any

from ..core.values.messages import Message, ProviderCompactionPart


def compacts_now(protocol: str, body: Any) -> bool:
    """Is this an Anthropic on-demand compaction request (a top-level `compaction`)?"""
    return protocol == "anthropic" and isinstance(body, dict) and \
        isinstance(body.get("compaction"), dict)


def asks_provider_compaction(protocol: str, body: Any) -> bool:
    """Does the request ask its provider to compact, by any of the mechanisms above?"""
    if not isinstance(body, dict):
        return False
    if compacts_now(protocol, body):
        return True
    managed = body.get("context_management")
    if protocol == "anthropic" and isinstance(managed, dict):
        edits = managed.get("edits")
        return isinstance(edits, list) and any(
            isinstance(e, dict) and str(e.get("type", "")).startswith("compact_")
            for e in edits)
    if protocol == "responses" and isinstance(managed, list):
        return any(isinstance(e, dict) and e.get("type") == "compaction" for e in managed)
    return False


def holds_provider_compaction(message: Message | None) -> bool:
    """Does the reply hold a provider's compaction (a compaction request's answer that
    produced its block)?"""
    return message is not None and any(isinstance(p, ProviderCompactionPart)
                                       for p in message.parts)


__all__ = ["asks_provider_compaction", "compacts_now", "holds_provider_compaction"]
