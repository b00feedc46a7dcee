"""A model's reply as either protocol's reader returns it: the core `Message` and why it ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..core.values.messages import Message

# Why a reply ended, in words common to both protocols; the protocol's own word is kept too.
StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "other"
]
# "error" marks a reply that broke off (a partial stream): its usage is never a baseline (E1).
ReplyStatus = Literal["complete", "error"]


@dataclass(frozen=True)
class Reply:
    """One reply read from the wire (a whole response body or an assembled stream)."""

    message: Message  # role "assistant", usage normalised (SPEC E1)
    stop_reason: StopReason
    raw_stop_reason: str | None = None  # the protocol's own word
    request_id: str | None = None  # the provider's id of the response


class MalformedReply(ValueError):
    """An answer that is not a reply of its protocol; the text says what it "returned"."""
