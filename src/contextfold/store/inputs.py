"""What the ordinary write path accepts: messages only .

Kept apart from the SQL machinery so the in-memory store (`store.memory`) applies the same
rule without importing SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextfold.core.messages import Checkpoint, Message, Node, parse_payload

from .errors import InvalidOperationError, InvalidPayloadError


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
