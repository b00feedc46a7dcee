"""The tables derived from the nodes, checked against the nodes (issue 24 item 12, SPEC D1).

`mirror_index` (SPEC Y1) and the recall index (`recall_nodes` with its full-text entries,
SPEC L1, L4) are written in the transaction that writes their nodes and never change
(triggers refuse UPDATE, DELETE and REPLACE). Everything in them follows from the nodes, so
`contextfold verify` recomputes what it can and reports every disagreement:

* a mirror row names a node of its tree, at the node's depth; a message's row names the
  message itself and its chain hash follows from the previous message's row and its own
  content (`core.values.content_chain.next_hash`, the one definition of the chain); a
  checkpoint's row carries the hash of the message it follows (a conversation's first
  hash depends on the client's scope, which is not stored: it cannot be recomputed, nor
  can the hash of a message opening with a provider's compaction, which starts its chain
  anew from that root, SPEC Y7);
* every node has one recall row at its own depth, continuing its parent's line or starting
  its own where the parent's line was taken, with the turn counted from its parent's; a
  message's full-text entry holds the words of the document rebuilt from its payload
  (PostgreSQL: the same lexemes; SQLite, whose contentless FTS5 keeps no text: the same
  number of tokens, among them the document's first eight distinct words), and nothing
  else is indexed. Word order is not compared: a tool call's arguments are indexed in the
  order the caller gave them and read back in the stored canonical (sorted) order.

Where these tables are used they are not trusted either: a search hit and an expanded range
are re-checked against their nodes (`recall.py`), and the mirror continues a conversation
only from a node whose own content is the client's message (`mirroring.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.content_chain import (  # the chain's one definition
    next_hash,
    opens_with_provider_compaction,
)
from contextfold.core.values.messages import Node
from contextfold.core.values.tree import InvalidRecord

from ..sql.schema import mirror_index, recall_nodes

Record = Node | InvalidRecord
_SAMPLE = 8  # SQLite: how many of an entry's first distinct tokens are matched back


def message_before(node_id: str, rows: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The nearest ancestor of `node_id` that is a message (checkpoints and pin events
    skipped), among `rows` (id -> node row)."""
    seen = {node_id}
    parent = rows[node_id]["parent_id"]
    while parent is not None and parent in rows and parent not in seen:
        if rows[parent]["kind"] == "message":
            return parent
        seen.add(parent)
        parent = rows[parent]["parent_id"]
    return None


def mirror_problems(records: Mapping[str, Record], rows: Mapping[str, Mapping[str, Any]],
                    mirror_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Disagreements between one tree's `mirror_index` rows and its nodes."""
    by_node = {r["node_id"]: r for r in mirror_rows}
    problems: list[str] = []
    for row in mirror_rows:
        nid = row["node_id"]
        where = f"mirror_index row of node {nid}"
        if nid not in rows:
            problems.append(f"{where}: no such node in the tree")
            continue
        if row["depth"] != rows[nid]["depth"]:
            problems.append(f"{where}: depth {row['depth']}, the node's is {rows[nid]['depth']}")
        node = records.get(nid)
        if not isinstance(node, Node):
            continue  # the node's own damage is reported with the nodes
        before = message_before(nid, rows)
        if node.message is not None:
            if row["message_id"] != nid:
                problems.append(f"{where}: names message {row['message_id']}, not itself")
            prev = by_node.get(before) if before is not None else None
            if opens_with_provider_compaction(node.message):
                prev = None  # its chain starts from the client's scope root (Y7)
            if prev is not None and isinstance(records.get(before or ""), Node) and \
                    next_hash(prev["prefix_hash"], node.message) != row["prefix_hash"]:
                problems.append(f"{where}: its chain hash does not follow from the previous "
                                "message's and its own content")
        elif row["message_id"] != before:
            problems.append(f"{where}: names message {row['message_id']}, but it follows "
                            f"{before}")
        elif before in by_node and by_node[before]["prefix_hash"] != row["prefix_hash"]:
            problems.append(f"{where}: its chain hash is not the one of the message it follows")
    return problems


def place_problems(tree_id: str, records: Mapping[str, Record],
                   rows: Mapping[str, Mapping[str, Any]],
                   places: Sequence[Mapping[str, Any]]) -> list[str]:
    """Disagreements between one tree's `recall_nodes` rows and its nodes (the placement
    rule of `recall_index`)."""
    by_node = {p["node_id"]: p for p in places}
    taken = {(p["line_id"], p["depth"]) for p in places}
    problems = [f"recall row of node {p['node_id']}: no such node in the tree"
                for p in places if p["node_id"] not in rows]
    for nid, row in rows.items():
        place = by_node.get(nid)
        where = f"recall row of node {nid}"
        if place is None:
            problems.append(f"node {nid} has no recall row (search cannot find it)")
            continue
        if place["depth"] != row["depth"]:
            problems.append(f"{where}: depth {place['depth']}, the node's is {row['depth']}")
        parent = row["parent_id"]
        above = by_node.get(parent) if parent is not None else None
        if parent is None:
            line, turn = tree_id, 0
        elif above is None:  # a parent written outside the store starts a line here
            line, turn = nid, 0
        else:
            line, turn = above["line_id"], above["turn"]
        record = records.get(nid)
        if isinstance(record, Node) and place["turn"] != turn + int(record.is_user_message):
            problems.append(f"{where}: turn {place['turn']}, its parent's place says "
                            f"{turn + int(record.is_user_message)}")
        if place["line_id"] not in (line, nid):
            problems.append(f"{where}: on line {place['line_id']}, which is neither its "
                            "parent's nor its own")
        elif place["line_id"] == nid != line and (line, place["depth"]) not in taken:
            problems.append(f"{where}: starts a line of its own, but its parent's line has "
                            "no node at its depth")
    return problems


def expected_document(record: Record | None) -> str | None:
    """The full-text document a node's recall entry must hold (None: no entry)."""
    from contextfold.core.recall.recall_text import index_document, indexed_text

    if not isinstance(record, Node) or record.message is None:
        return None
    return index_document(indexed_text(record.message)) or None


async def document_problems(conn: AsyncConnection, tree_id: str,
                            records: Mapping[str, Record]) -> list[str]:
    """Full-text entries of one tree's nodes that are not the document rebuilt from them."""
    expected = {nid: expected_document(r) for nid, r in records.items()
                if not isinstance(r, InvalidRecord)}
    if conn.dialect.name == "postgresql":
        wrong = await _pg_wrong_documents(conn, tree_id, expected)
    else:
        wrong = await _sqlite_wrong_documents(conn, tree_id, expected)
    return [f"recall entry of node {nid}: not the text of the node (the full-text index was "
            "changed)" for nid in sorted(wrong)]


async def _pg_wrong_documents(conn: AsyncConnection, tree_id: str,
                              expected: Mapping[str, str | None]) -> set[str]:
    wrong: set[str] = set()
    items = list(expected.items())
    for start in range(0, len(items), 200):
        chunk = items[start:start + 200]
        params: dict[str, Any] = {"t": tree_id}
        values = []
        for i, (nid, doc) in enumerate(chunk):
            params[f"n{i}"], params[f"d{i}"] = nid, doc
            values.append(f"(CAST(:n{i} AS text), CAST(:d{i} AS text))")
        sql = ("SELECT r.node_id FROM recall_nodes r JOIN (VALUES " + ", ".join(values) +
               ") AS v(node_id, doc) ON r.node_id = v.node_id WHERE r.tree_id = :t AND "
               "strip(r.document) IS DISTINCT FROM strip(to_tsvector('simple'::regconfig, "
               "v.doc))")
        wrong.update((await conn.execute(text(sql), params)).scalars())
    return wrong


async def _sqlite_wrong_documents(conn: AsyncConnection, tree_id: str,
                                  expected: Mapping[str, str | None]) -> set[str]:
    rowids = dict((await conn.execute(select(recall_nodes.c.node_id, text("rowid")).where(
        recall_nodes.c.tree_id == tree_id))).all())
    sizes: dict[int, int] = {}
    ids = list(rowids.values())
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        rows = await conn.execute(text("SELECT id, sz FROM recall_fts_docsize WHERE id IN (" +
                                       ", ".join(str(int(i)) for i in chunk) + ")"))
        sizes.update((int(r[0]), _varint(bytes(r[1]))) for r in rows)
    wrong: set[str] = set()
    for nid, doc in expected.items():
        rowid = rowids.get(nid)
        if rowid is None:
            continue  # the missing place is reported with the places
        words = doc.split() if doc else []
        if sizes.get(rowid, 0) != len(words):
            wrong.add(nid)
        elif words:
            query = " AND ".join(f'"{w}"' for w in list(dict.fromkeys(words))[:_SAMPLE])
            hit = (await conn.execute(text(
                "SELECT rowid FROM recall_fts WHERE recall_fts MATCH :q AND rowid = :r"),
                {"q": query, "r": rowid})).first()
            if hit is None:
                wrong.add(nid)
    return wrong


def _varint(data: bytes) -> int:
    """The first SQLite varint of `data` (FTS5's docsize: tokens of the first column)."""
    value = 0
    for i, byte in enumerate(data[:9]):
        if i == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return value


async def derived_problems(conn: AsyncConnection, tree_id: str, records: Mapping[str, Record],
                           rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Everything `mirror_index` and the recall index of one tree disagree on with its
    nodes (what `verify_tree` adds to its report)."""
    mirror_rows = (await conn.execute(select(mirror_index).where(
        mirror_index.c.tree_id == tree_id))).mappings().all()
    places = (await conn.execute(select(recall_nodes.c.node_id, recall_nodes.c.line_id,
                                        recall_nodes.c.depth, recall_nodes.c.turn).where(
        recall_nodes.c.tree_id == tree_id))).mappings().all()
    return [*mirror_problems(records, rows, mirror_rows),
            *place_problems(tree_id, records, rows, places),
            *await document_problems(conn, tree_id, records)]
