"""Pin and unpin events (SPEC N2): appended at the leaf like a message, never edited.

A pin event is its own node kind: the ordinary message path (`append`) still takes only
messages, and the checkpoint path only checkpoints (SPEC C6); this is the one way a pin
event enters the tree. `Pins` is a part of `contextfold.store.sql_store.SqlSessionStore`,
over its `SqlAccess`.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Node, PinEvent, utc_now
from contextfold.ids import new_id

from ..errors import InvalidOperationError, StaleBranchError
from .access import SqlAccess


class Pins:
    """Appending pin and unpin events."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def append_pin_event(self, session_id: str, event: PinEvent, *,
                               expected_leaf_id: str | None = None,
                               node_id: str | None = None) -> Node:
        """Append `event` at the leaf and move the leaf to it (one revision bump).

        `expected_leaf_id` makes it conditional (`StaleBranchError` if the leaf moved).
        `node_id` lets the caller use the pin's id as the node id (a pin's id is the id of
        the event that created it).
        """
        if not isinstance(event, PinEvent):
            raise InvalidOperationError(
                f"append_pin_event takes a PinEvent, got {type(event).__name__}")

        async def op(conn: AsyncConnection) -> Node:
            row = await self.access.lock_session(conn, session_id)
            if expected_leaf_id is not None and row["leaf_id"] != expected_leaf_id:
                raise StaleBranchError(session_id, expected_leaf_id, row["leaf_id"])
            await self.access.check_writable(conn, row)
            node = Node(id=node_id or new_id(), parent_id=row["leaf_id"], created_at=utc_now(),
                        payload=event)
            await self.access.insert_chain(conn, row, [node])
            await self.access.move_leaf(conn, row, node.id, op="append", node_id=node.id)
            return node

        return await self.access.write(op)
