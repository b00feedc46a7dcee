"""Converting between core nodes and table rows, and the content hash that proves rows unchanged.

The payload is stored as canonical JSON text (sorted keys, no spaces) rather than a JSON
column so that the bytes written are the bytes read back: the hash written at insert time
can be re-verified forever (see `invariants.py`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from contextfold.core.messages import Checkpoint, Message, Node, parse_payload
from contextfold.core.tree import InvalidRecord


def canonical_json(value: Any) -> str:
    """Deterministic JSON text for hashing and storage."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_json(payload: Message | Checkpoint) -> str:
    return canonical_json(payload.model_dump(mode="json"))


def utc(value: datetime) -> datetime:
    """An aware UTC datetime (naive values are taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def content_hash(node_id: str, parent_id: str | None, created_at: datetime, payload: str) -> str:
    """sha256 over everything a node is; written once at insert, re-checked on every load."""
    stamp = utc(created_at).isoformat(timespec="microseconds")
    body = canonical_json([node_id, parent_id, stamp, payload])
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def node_row(
    node: Node,
    *,
    tree_id: str,
    depth: int,
    latest_checkpoint_id: str | None,
    session_id: str | None,
) -> dict[str, Any]:
    """The `nodes` row for a node (its insert-time columns computed by the caller)."""
    payload = payload_json(node.payload)
    msg = node.message
    cp = node.checkpoint
    return {
        "tree_id": tree_id,
        "id": node.id,
        "parent_id": node.parent_id,
        "kind": node.kind,
        "role": msg.role if msg is not None else None,
        "depth": depth,
        "latest_checkpoint_id": node.id if cp is not None else latest_checkpoint_id,
        "first_kept_id": cp.first_kept_id if cp is not None else None,
        "session_id": session_id,
        "created_at": utc(node.created_at),
        "payload": payload,
        "content_hash": content_hash(node.id, node.parent_id, node.created_at, payload),
    }


def record_from_row(row: Mapping[str, Any]) -> Node | InvalidRecord:
    """Parse a stored row; anything wrong with it becomes an `InvalidRecord` (SPEC D1).

    A hash mismatch means the row was changed after it was written: it is reported as
    damage rather than trusted.
    """
    node_id, parent_id = row["id"], row["parent_id"]
    expected = content_hash(node_id, parent_id, row["created_at"], row["payload"])
    if expected != row["content_hash"]:
        return InvalidRecord(node_id, parent_id, "content hash mismatch: the row was modified "
                             "after it was written")
    try:
        payload = parse_payload(json.loads(row["payload"]))
        return Node(id=node_id, parent_id=parent_id, created_at=row["created_at"],
                    payload=payload)
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        return InvalidRecord(node_id, parent_id, f"payload does not parse: {_short(exc)}")


def _short(exc: Exception, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
