"""Converting between core nodes and table rows, and the content hash that proves rows unchanged.

The payload is stored as canonical JSON text (sorted keys, no spaces) rather than a JSON
column so that the bytes written are the bytes read back: the hash written at insert time
can be re-verified forever (see `invariants.py`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from contextfold.core.values.messages import Checkpoint, Message, Node, parse_payload
from contextfold.core.values.tree import InvalidRecord

from ..values import DEFAULT_TENANT, SessionInfo

HASH_MISMATCH = "content hash mismatch: the row was modified after it was written"
CHAIN_MISMATCH = ("chain digest mismatch: this row or its parent was rewritten after it was "
                  "written")


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


def chain_digest(parent_chain: str | None, node_hash: str) -> str:
    """The tamper-evidence chain (git's object model): a node's digest covers its own content
    hash and its parent's chain digest, so changing any node changes the digest of every
    descendant. A root's parent digest is the empty string."""
    return hashlib.sha256(f"contextfold-chain-v1\0{parent_chain or ''}\0{node_hash}"
                          .encode("ascii")).hexdigest()


def node_row(
    node: Node,
    *,
    tree_id: str,
    depth: int,
    latest_checkpoint_id: str | None,
    session_id: str | None,
    parent_chain: str | None,
) -> dict[str, Any]:
    """The `nodes` row for a node (its insert-time columns computed by the caller).

    `parent_chain` is the parent row's `chain_hash` (None for a root)."""
    payload = payload_json(node.payload)
    digest = content_hash(node.id, node.parent_id, node.created_at, payload)
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
        "content_hash": digest,
        "chain_hash": chain_digest(parent_chain, digest),
    }


def session_info(row: Mapping[str, Any], *, read_only: bool) -> SessionInfo:
    """The `SessionInfo` of a `sessions` row (`created_at` already an aware datetime);
    `read_only` adds damage found on load to the stored flag (SPEC D2)."""
    return SessionInfo(
        id=row["id"], tree_id=row["tree_id"], leaf_id=row["leaf_id"],
        branch_revision=row["branch_revision"], read_only=bool(row["read_only"]) or read_only,
        title=row["title"], created_at=utc(row["created_at"]),
        metadata=json.loads(row["metadata"] or "{}"),
        tenant_id=row.get("tenant_id") or DEFAULT_TENANT,
        updated_at=utc(row["updated_at"]) if row.get("updated_at") is not None else None,
    )


def record_from_row(row: Mapping[str, Any]) -> Node | InvalidRecord:
    """Parse a stored row; anything wrong with it becomes an `InvalidRecord` (SPEC D1).

    A hash mismatch means the row was changed after it was written: it is reported as
    damage rather than trusted.
    """
    node_id, parent_id = row["id"], row["parent_id"]
    expected = content_hash(node_id, parent_id, row["created_at"], row["payload"])
    if expected != row["content_hash"]:
        return InvalidRecord(node_id, parent_id, HASH_MISMATCH)
    try:
        payload = parse_payload(json.loads(row["payload"]))
        node = Node(id=node_id, parent_id=parent_id, created_at=row["created_at"],
                    payload=payload)
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        return InvalidRecord(node_id, parent_id, f"payload does not parse: {_short(exc)}")
    mismatch = column_mismatch(row, node)
    return node if mismatch is None else InvalidRecord(node_id, parent_id, mismatch)


def column_mismatch(row: Mapping[str, Any], node: Node) -> str | None:
    """Which of the row's `kind` / `role` columns (when read) disagrees with its payload.

    They are copies of the payload kept for queries, outside the content hash (adding them
    to it would mean rewriting every stored digest); so a load compares them with the
    payload the hash covers, and a hand-edited role is damage like any modified row."""
    msg = node.message
    expected = {"kind": node.kind, "role": msg.role if msg is not None else None}
    for column, value in expected.items():
        if column in row and row[column] != value:
            return (f"{column} column {row[column]!r} disagrees with the payload's {value!r}: "
                    "the row was modified after it was written")
    return None


def chained_records(rows: Iterable[Mapping[str, Any]]) -> dict[str, Node | InvalidRecord]:
    """`record_from_row` for rows read together, plus the chain link of every row whose
    parent was read too (a root links to the empty digest). A row whose stored chain digest
    does not follow from its parent's is damage, even if its own content hash is right:
    it (or an ancestor) was rewritten with recomputed hashes."""
    by_id = {row["id"]: row for row in rows}
    out: dict[str, Node | InvalidRecord] = {}
    for node_id, row in by_id.items():
        record = record_from_row(row)
        parent_id = row["parent_id"]
        if isinstance(record, Node) and (parent_id is None or parent_id in by_id):
            parent_chain = None if parent_id is None else by_id[parent_id]["chain_hash"]
            if row["chain_hash"] != chain_digest(parent_chain, row["content_hash"]) and not (
                _in_cycle(node_id, by_id)  # no chain can close a cycle: report the cycle
            ):
                record = InvalidRecord(node_id, parent_id, CHAIN_MISMATCH)
        out[node_id] = record
    return out


def _in_cycle(node_id: str, by_id: Mapping[str, Mapping[str, Any]]) -> bool:
    seen: set[str] = set()
    current = by_id[node_id]["parent_id"]
    while current is not None and current in by_id and current not in seen:
        if current == node_id:
            return True
        seen.add(current)
        current = by_id[current]["parent_id"]
    return False


def _short(exc: Exception, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
