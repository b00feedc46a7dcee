"""What recall shows is re-derived from the nodes, not taken from its index (issue 24 item 12).

The recall index (`recall_nodes`, the full-text entries) only *finds* candidates. Before a
hit or an expanded range is shown (to a person, or to the model as a tool result):

* a search hit's node must itself hold every query term (its words, rebuilt from the
  payload the content hash covers): a forged index entry can hide a message from search,
  never show one that does not say what was searched for;
* a hit's place must agree with its node: the recall depth is the node's own depth, and it
  continues its parent's place on the line or starts a line of its own, so a row moved onto
  the branch's line from another branch (L4) is not shown;
* an expanded range must be a chain of parent links in the nodes table: it ends where a
  node's parent is not the node before it.

Anything dropped is logged; `contextfold verify` names the rows (`derived.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Message

from ..sql.schema import recall_nodes

if TYPE_CHECKING:
    from contextfold.core.recall.recall_text import SearchQuery

log = logging.getLogger("contextfold.store")


def holds_terms(message: Message, query: SearchQuery, *, any_term: bool = False) -> bool:
    """Whether the message's own words contain the query's terms (each term's tokens; the
    last as a prefix for `word*`). Word order is not compared (see `derived.py`)."""
    from contextfold.core.recall.recall_text import index_document, indexed_text

    words = set(index_document(indexed_text(message)).split())

    def holds(term: Any) -> bool:
        *whole, last = term.tokens
        if not all(t in words for t in whole):
            return False
        return last in words or (term.prefix and any(w.startswith(last) for w in words))

    found = [holds(t) for t in query.terms]
    return any(found) if any_term else all(found)


async def places_of(conn: AsyncConnection, tree_id: str, node_ids: Sequence[str]
                    ) -> dict[str, tuple[str, int]]:
    """node id -> (line, depth) of the given nodes' recall rows."""
    out: dict[str, tuple[str, int]] = {}
    ids = list(dict.fromkeys(node_ids))
    for start in range(0, len(ids), 500):
        rows = await conn.execute(select(recall_nodes.c.node_id, recall_nodes.c.line_id,
                                         recall_nodes.c.depth).where(
            recall_nodes.c.tree_id == tree_id, recall_nodes.c.node_id.in_(ids[start:start + 500])))
        out.update((r[0], (r[1], r[2])) for r in rows)
    return out


def place_agrees(tree_id: str, row: Mapping[str, Any],
                 parents: Mapping[str, tuple[str, int]]) -> bool:
    """A hit row (`node_id`/`id`, `parent_id`, recall `line_id` and `depth`, the node's
    `node_depth`) sits where its node is: at the node's depth, on its parent's line one
    deeper, or first on a line of its own."""
    node_id, parent, line, depth = row["id"], row["parent_id"], row["line_id"], row["depth"]
    if depth != row["node_depth"]:
        return False
    if line == node_id:
        return True
    if parent is None:
        return line == tree_id and depth == 0
    return parents.get(parent) == (line, depth - 1)


def chain_around(rows: Sequence[Mapping[str, Any]], anchor: str | None) -> list[int]:
    """Indexes of the rows (ordered by depth) that form one chain of parent links through
    `anchor` (None: from the first row)."""
    if not rows:
        return []
    at = next((i for i, r in enumerate(rows) if r["id"] == anchor), 0)
    start = end = at
    while start > 0 and rows[start]["parent_id"] == rows[start - 1]["id"]:
        start -= 1
    while end + 1 < len(rows) and rows[end + 1]["parent_id"] == rows[end]["id"]:
        end += 1
    return list(range(start, end + 1))


def dropped(what: str, tree_id: str, count: int) -> None:
    if count:
        log.warning("recall: %d %s of tree %s disagree with their nodes and were not shown "
                    "(run `contextfold verify`)", count, what, tree_id)
