"""`NodeIndex`: what the SQL store's writes need of the index kept with every node they insert.

The recall index (SPEC L1: a node is searchable in the transaction that stores it) lives in
`store/recall/`, which reads this folder's tables; this folder never imports that one. The
store (`contextfold.store.sql_store`) hands `store.recall.keeping.RecallIndex` to `SqlAccess`
as a value, so the arrow between the two folders points one way: recall → sql.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Node

from .memo import MemoMap


class Placed(Protocol):
    """Where new nodes go in the index: one row per node (inserted with the node), each
    node's place by id (remembered once committed), and how to forget the remembered places
    the write trusted when another writer took one first."""

    @property
    def rows(self) -> list[dict[str, Any]]: ...

    @property
    def places(self) -> Mapping[str, Any]: ...

    def forget(self, places: MemoMap[tuple[str, str], Any] | None, tree_id: str) -> None: ...


class NodeIndex(Protocol):
    """The index the SQL writes keep in the transaction that inserts the nodes."""

    async def place(self, conn: AsyncConnection, tree_id: str,
                    nodes: Sequence[tuple[Node, int]],
                    remembered: MemoMap[tuple[str, str], Any] | None) -> Placed:
        """Place `nodes` (parents first, each with its depth) on a stored tree; `remembered`:
        the places this store already knows (a steady append reads none)."""
        ...

    async def index_tree(self, conn: AsyncConnection, tree_id: str,
                         nodes: Sequence[tuple[Node, int]]) -> None:
        """Place and write the rows of a whole new tree (an import)."""
        ...
