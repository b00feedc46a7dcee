"""Recall queries (SPEC L1, L2, L4): full-text search and expansion on one session's branch.

A branch is resolved to its line prefixes (see `recall_index`): one point look-up per line,
so a 100,000-message branch costs the same as a short one, and every query below carries
`tree_id` and the branch's (line, depth) conditions: another branch, session or tree can
never match. Matches are ranked by the database (FTS5 bm25, PostgreSQL ts_rank), newest
first among equals, or newest first when a query matches more than `RANK_LIMIT` messages;
identifier terms are then checked verbatim against the message, and every hit and range is
checked against its nodes before it is shown (`recall_trust`).

This folder reads the SQL store's tables and helpers (`store/sql/`); that folder never imports
this one: `contextfold.store.sql_store` composes `Recall` into the store and hands
`keeping.RecallIndex` to its writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Node

from ..errors import NodeNotFoundError
from ..sql.engine import read_connection
from ..sql.rows import record_from_row
from ..sql.schema import UTCDateTime
from ..values import RecallHit
from .recall_args import check_expand, expand_range, search_query
from .recall_trust import chain_around, dropped, holds_terms, place_agrees, places_of

if TYPE_CHECKING:
    # The search-text machinery loads when a search runs: every other command opening the
    # store (project, show, ...) starts without it.
    from contextfold.core.recall.recall_text import SearchQuery

    from ..sql.access import SqlAccess

# Above this many matches, results come newest first instead of by relevance (see
# `_search_sql`): ranking 2,000 matches costs ~10 ms, 50,000 cost ~300 ms.
RANK_LIMIT = 2_000
_PAGE_MIN = 50
_MAX_PAGES = 20
_NODE_COLS = ("n.tree_id, n.id, n.parent_id, n.kind, n.role, n.created_at, n.payload, "
              "n.content_hash")


async def branch_lines(conn: AsyncConnection, tree_id: str,
                       leaf_id: str | None) -> list[tuple[str, int]]:
    """The (line, deepest depth) prefixes that make up the branch ending at `leaf_id`."""
    lines: list[tuple[str, int]] = []
    current = leaf_id
    seen: set[str] = set()
    while current is not None:
        row = (await conn.execute(text(
            "SELECT r.line_id, r.depth, n.parent_id FROM recall_nodes r LEFT JOIN nodes n "
            "ON n.tree_id = r.tree_id AND n.id = r.line_id "
            "WHERE r.tree_id = :t AND r.node_id = :n"), {"t": tree_id, "n": current})).first()
        if row is None or row[0] in seen:
            break  # an unindexed node (written outside the store) ends what recall can see
        lines.append((row[0], row[1]))
        seen.add(row[0])
        current = row[2]  # the parent of the line's first node (None: the tree line)
    return lines


def _on_branch(lines: list[tuple[str, int]], params: dict[str, Any]) -> str:
    conds = []
    for i, (line, depth) in enumerate(lines):
        params[f"l{i}"], params[f"d{i}"] = line, depth
        conds.append(f"(r.line_id = :l{i} AND r.depth <= :d{i})")
    return "(" + " OR ".join(conds) + ")"


def _typed(sql: str) -> Any:
    """Textual SQL whose timestamp column comes back as an aware datetime on every backend."""
    return text(sql).columns(created_at=UTCDateTime())


def _search_sql(dialect: str, where_branch: str, *, ranked: bool) -> str:
    """Rank and cut on the narrow index rows first, then read the few payloads (sorting
    whole payloads of every match made a common word ~4x slower on 100,000 messages).

    `ranked=False` orders by recency instead: computing bm25 / ts_rank for tens of
    thousands of matches is what made a word found in every message cost half a second,
    and such a word does not discriminate anyway; newest-first streams from the index.
    """
    if dialect == "postgresql":
        score = "ts_rank(r.document, q.query)" if ranked else "0.0"
        inner = (f"SELECT r.node_id, r.line_id, r.depth, r.turn, {score} AS score "
                 "FROM recall_nodes r, to_tsquery('simple', :q) AS q(query) "
                 f"WHERE r.tree_id = :t AND r.document @@ q.query AND {where_branch}")
        order = "score DESC, r.depth DESC" if ranked else "r.depth DESC"
    else:
        score = "-bm25(recall_fts)" if ranked else "0.0"
        inner = (f"SELECT r.node_id, r.line_id, r.depth, r.turn, {score} AS score "
                 "FROM recall_fts JOIN recall_nodes r ON r.rowid = recall_fts.rowid "
                 f"WHERE recall_fts MATCH :q AND r.tree_id = :t AND {where_branch}")
        order = "score DESC, r.depth DESC" if ranked else "recall_fts.rowid DESC"
    return (f"SELECT m.line_id, m.depth, m.turn, m.score, n.depth AS node_depth, {_NODE_COLS} "
            f"FROM ({inner} "
            f"ORDER BY {order} LIMIT :lim OFFSET :off) m "
            "JOIN nodes n ON n.tree_id = :t AND n.id = m.node_id "
            "ORDER BY m.score DESC, m.depth DESC")


async def _many_matches(conn: AsyncConnection, tree_id: str, q: str) -> bool:
    """More than RANK_LIMIT matches? (counting stops at the limit)."""
    if conn.dialect.name == "postgresql":
        sql = ("SELECT count(*) FROM (SELECT 1 FROM recall_nodes WHERE tree_id = :t AND "
               "document @@ to_tsquery('simple', :q) LIMIT :cap) x")
    else:
        sql = ("SELECT count(*) FROM (SELECT 1 FROM recall_fts WHERE recall_fts MATCH :q "
               "LIMIT :cap)")
    count = (await conn.execute(text(sql), {"t": tree_id, "q": q, "cap": RANK_LIMIT + 1})
             ).scalar()
    return int(count or 0) > RANK_LIMIT


async def search_branch(conn: AsyncConnection, tree_id: str, leaf_id: str | None,
                        query: SearchQuery, limit: int, *, any_term: bool = False,
                        lines: list[tuple[str, int]] | None = None) -> list[RecallHit]:
    """Messages of the branch matching `query`, best first, at most `limit` (`lines`: the
    branch's, when the caller has them)."""
    from contextfold.core.recall.recall_text import fold, fts5_match, message_text, snippet, tsquery

    if lines is None:
        lines = await branch_lines(conn, tree_id, leaf_id)
    if not lines:
        return []
    dialect = conn.dialect.name
    params: dict[str, Any] = {"t": tree_id}
    params["q"] = (tsquery(query, any_term=any_term) if dialect == "postgresql"
                   else fts5_match(query, any_term=any_term))
    ranked = not await _many_matches(conn, tree_id, params["q"])
    sql = _typed(_search_sql(dialect, _on_branch(lines, params), ranked=ranked))
    page = max(_PAGE_MIN, limit * 3)
    hits: list[RecallHit] = []
    untrusted = 0
    for n in range(_MAX_PAGES):
        rows = (await conn.execute(sql, {**params, "lim": page, "off": n * page})
                ).mappings().all()
        parents = await places_of(conn, tree_id, [r["parent_id"] for r in rows
                                                  if r["parent_id"] is not None])
        for row in rows:
            node = record_from_row(row)
            if not isinstance(node, Node) or node.message is None:
                continue  # a damaged row is never shown (SPEC D1)
            if not place_agrees(tree_id, row, parents) or \
                    not holds_terms(node.message, query, any_term=any_term):
                untrusted += 1  # the index says so, the node does not
                continue
            body = message_text(node.message)
            if not query.matches_verbatim(fold(body)):
                continue
            hits.append(RecallHit(node=node, position=row["depth"], turn=row["turn"],
                                  snippet=snippet(body, query), score=float(row["score"])))
            if len(hits) >= limit:
                dropped("search hits", tree_id, untrusted)
                return hits
        if len(rows) < page:
            break
    dropped("search hits", tree_id, untrusted)
    return hits


async def _branch_place(conn: AsyncConnection, tree_id: str, lines: list[tuple[str, int]],
                        node_id: str, session_id: str) -> int:
    from .recall_index import place_of

    place = await place_of(conn, tree_id, node_id)
    if place is None or not any(place.line_id == line and place.depth <= depth
                                for line, depth in lines):
        # Same answer for "no such node" and "another branch's node" (SPEC L4).
        raise NodeNotFoundError(f"node {node_id!r} is not on the branch of session "
                                f"{session_id!r}")
    return place.depth


async def branch_range(conn: AsyncConnection, tree_id: str, lines: list[tuple[str, int]],
                       first: int, last: int, anchor: str | None = None) -> list[RecallHit]:
    """The message nodes of the branch at positions first..last, in order: only the chain
    of parent links (in the nodes themselves) that runs through `anchor`."""
    params: dict[str, Any] = {"t": tree_id, "a": first, "b": last}
    sql = _typed(f"SELECT r.depth, r.turn, n.depth AS node_depth, {_NODE_COLS} "
                 "FROM recall_nodes r JOIN nodes n "
                 "ON n.tree_id = r.tree_id AND n.id = r.node_id WHERE r.tree_id = :t AND "
                 f"r.depth BETWEEN :a AND :b AND {_on_branch(lines, params)} ORDER BY r.depth")
    rows = [r for r in (await conn.execute(sql, params)).mappings()
            if r["depth"] == r["node_depth"]]
    chain = chain_around(rows, anchor)
    out = []
    for i in chain:
        node = record_from_row(rows[i])
        if isinstance(node, Node) and node.message is not None:
            out.append(RecallHit(node=node, position=rows[i]["depth"], turn=rows[i]["turn"]))
    dropped("expanded nodes", tree_id, len(rows) - len(chain))
    return out


class Recall:
    """The SQL store's recall methods: a part of `SqlSessionStore`, over its `SqlAccess`."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def search_history(self, session_id: str, query: str | SearchQuery, *,
                             limit: int = 10, any_term: bool = False) -> list[RecallHit]:
        """Full-text search over the session's own branch (SPEC L1, L4), best first.

        Every term must match (`any_term=True`: at least one). Words and identifiers
        (Zotero keys, DOIs, paths, error codes; identifiers are matched verbatim) and
        Japanese or other CJK text are all searchable; `word*` is a prefix.
        """
        parsed = search_query(query, limit)
        async with read_connection(self.access.engine) as conn:
            row = await self.access.session_row(conn, session_id)
            return await search_branch(conn, row["tree_id"], row["leaf_id"], parsed, limit,
                                       any_term=any_term)

    async def search_history_each(self, session_id: str,
                                  queries: Sequence[str | SearchQuery], *, limit: int = 10,
                                  any_term: bool = False) -> list[list[RecallHit]]:
        """`search_history` of each query, in one read transaction: the session row and
        the branch's lines are read once (automatic recall searches a request's parts,
        SPEC L5: one read instead of one per part, issue 26)."""
        parsed = [search_query(q, limit) for q in queries]
        async with read_connection(self.access.engine) as conn:
            row = await self.access.session_row(conn, session_id)
            tree_id, leaf_id = row["tree_id"], row["leaf_id"]
            lines = await branch_lines(conn, tree_id, leaf_id)
            return [await search_branch(conn, tree_id, leaf_id, query, limit,
                                        any_term=any_term, lines=lines) for query in parsed]

    async def expand_history(self, session_id: str, node_id: str, *, before: int = 0,
                             after: int = 0, to_node_id: str | None = None,
                             max_nodes: int = 50) -> list[RecallHit]:
        """The original messages around `node_id` (or from it to `to_node_id`) on the
        session's branch, in order, at most `max_nodes` of them (SPEC L2, L4)."""
        check_expand(before, after, max_nodes)
        async with read_connection(self.access.engine) as conn:
            row = await self.access.session_row(conn, session_id)
            tree_id = row["tree_id"]
            lines = await branch_lines(conn, tree_id, row["leaf_id"])
            at = await _branch_place(conn, tree_id, lines, node_id, session_id)
            other = None if to_node_id is None else \
                await _branch_place(conn, tree_id, lines, to_node_id, session_id)
            first, last = expand_range(at, before, after, other, max_nodes)
            return await branch_range(conn, tree_id, lines, first, last, node_id)
