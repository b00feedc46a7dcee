"""`RecallIndex`: the recall index as the SQL store's writes keep it (SPEC L1), the
`store.sql.node_index.NodeIndex` that `contextfold.store.sql_store` hands to the SQL parts.

The placement rule and the rows are `recall_index`'s; it is imported on the first write, so
read-only commands (`project`, `show`, `sessions`) never load the search-text machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Node

if TYPE_CHECKING:
    from ..sql.memo import MemoMap
    from .recall_index import Placement


class RecallIndex:
    """Places each inserted node on its line and writes its recall row (`recall_index`)."""

    async def place(self, conn: AsyncConnection, tree_id: str,
                    nodes: Sequence[tuple[Node, int]],
                    remembered: MemoMap[tuple[str, str], Any] | None) -> Placement:
        """`recall_index.place_nodes`: the rows the insert writes with the nodes."""
        from .recall_index import place_nodes

        return await place_nodes(conn, tree_id, nodes, remembered)

    async def index_tree(self, conn: AsyncConnection, tree_id: str,
                         nodes: Sequence[tuple[Node, int]]) -> None:
        """A whole imported tree, placed in memory and written."""
        from .recall_index import index_nodes

        await index_nodes(conn, tree_id, nodes, new_tree=True)
