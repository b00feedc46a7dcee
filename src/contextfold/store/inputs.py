"""What the ordinary write path accepts: messages only .

Kept apart from the SQL machinery so the in-memory store (`store.memory`) applies the same
rule without importing SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextfold.core.values.messages import Checkpoint, Message, Node, parse_payload

from .errors import InvalidOperationError, InvalidPayloadError


def checked_title(title: str | None) -> str | None:
    """A session title as every backend can keep it: no NUL character (PostgreSQL's text
    cannot hold one) and no lone surrogate (not text); `InvalidOperationError` naming the
    field otherwise, on SQLite and PostgreSQL alike."""
    if title is None:
        return None
    if "\x00" in title:
        raise InvalidOperationError("title: must not contain a NUL (\\x00) character")
    try:
        title.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOperationError("title: contains a lone surrogate, which is not "
                                    "text") from None
    return title


def as_message(value: Any) -> Message:
    """The ordinary write path takes messages only; checkpoints are refused (SPEC C6)."""
    if isinstance(value, Checkpoint):
        raise InvalidOperationError(
            "append/edit cannot write a checkpoint; checkpoints are written only by "
            "commit_checkpoint(plan, checkpoint)")
    if isinstance(value, Message):
        return value
    if isinstance(value, Node):
        raise InvalidOperationError("pass the message (node.payload), not a Node: the store "
                                    "assigns the id and parent")
    if isinstance(value, Mapping):
        try:
            payload = parse_payload(dict(value))
        except ValueError as exc:
            raise InvalidPayloadError(f"invalid message payload: {exc}") from exc
        return as_message(payload)
    raise InvalidOperationError(f"expected a Message, got {type(value).__name__}")
