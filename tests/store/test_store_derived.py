"""Issue 24 item 12 (SPEC D1, L4, Y1): the tables derived from the nodes (`mirror_index`,
the recall index) keep their first row, `contextfold verify` checks them against the nodes,
and where they are used they are re-checked rather than trusted; the `role` and `kind`
columns are checked against the payload the content hash covers. SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import text

from contextfold.core.recall.recall_text import parse_query
from contextfold.core.values.content_chain import chain_hashes
from contextfold.core.values.messages import Message
from contextfold.core.values.tree import Branch, DamagedBranch
from contextfold.store import open_store
from contextfold.store.audit.verify import verify_tree
from contextfold.store.sql.engine import write_connection
from tests.builders import assistant, user
from tests.store_fixtures import backend, db_url, seed_session, store  # noqa: F401


async def _lift_guard(conn, table: str) -> None:
    """What a hand edit needs first: the append-only trigger of `table` out of the way."""
    if conn.dialect.name == "sqlite":
        await conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_update"))
    else:
        await conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER {table}_append_only"))


async def _mirrored(into, texts: list[str], scope: str = "app"
                    ) -> tuple[str, list[Message], list[str]]:
    """A session holding `texts` (user/assistant alternating) through the mirror's store
    calls, as the proxy stores a conversation."""
    msgs = [user(t) if i % 2 == 0 else assistant(t) for i, t in enumerate(texts)]
    hashes = chain_hashes(scope, msgs)
    info = await into.create_session()
    await into.mirror_extend(info.id, hashes, msgs)
    return info.id, msgs, hashes


async def test_d1_replace_into_derived_tables_is_refused_and_the_first_row_stays(
        tmp_path) -> None:
    path = tmp_path / "r.db"
    opened = await open_store(str(path))
    await _mirrored(opened, ["first question", "first answer"])
    await opened.close()
    with sqlite3.connect(path) as raw:  # a plain client: no recursive_triggers
        before = raw.execute("SELECT * FROM mirror_index ORDER BY node_id").fetchall()
        places = raw.execute("SELECT * FROM recall_nodes ORDER BY node_id").fetchall()
        node, tree = raw.execute("SELECT node_id, tree_id FROM mirror_index").fetchone()
        for statement, args in (
            ("INSERT OR REPLACE INTO mirror_index VALUES (?, ?, 'forged', 0, ?)",
             (tree, node, node)),
            ("REPLACE INTO recall_nodes (tree_id, node_id, line_id, depth, turn) "
             "SELECT tree_id, node_id, 'forged-line', depth, turn FROM recall_nodes "
             "WHERE node_id = ?", (node,)),
            ("REPLACE INTO recall_nodes (tree_id, node_id, line_id, depth, turn) "
             "SELECT tree_id, 'intruder', line_id, depth, turn FROM recall_nodes "
             "WHERE node_id = ?", (node,)),  # another node, the same place on the line
        ):
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                raw.execute(statement, args)
        assert raw.execute("SELECT * FROM mirror_index ORDER BY node_id").fetchall() == before
        assert raw.execute("SELECT * FROM recall_nodes ORDER BY node_id").fetchall() == places


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_postgres_truncate_of_derived_tables_is_refused(store) -> None:  # noqa: F811
    await _mirrored(store, ["q", "a"])
    for table in ("mirror_index", "recall_nodes"):
        with pytest.raises(Exception, match="append-only"):
            async with write_connection(store.engine) as conn:
                await conn.execute(text(f"TRUNCATE {table}"))


async def test_d1_a_hand_edited_role_column_is_damage(store) -> None:  # noqa: F811
    """The role column is outside the content hash; a load compares it with the payload."""
    sid = await seed_session(store, turns=2, tools=0)
    branch = await store.load_branch(sid)
    victim = next(n for n in branch.nodes if n.message and n.message.role == "user")
    async with write_connection(store.engine) as conn:
        await _lift_guard(conn, "nodes")
        await conn.execute(text("UPDATE nodes SET role = 'system' WHERE id = :i"),
                           {"i": victim.id})
    fresh = await open_store(store.engine.url.render_as_string(hide_password=False))
    try:
        loaded = await fresh.load_full_branch(sid)
        assert isinstance(loaded, DamagedBranch)
        assert any("role column 'system'" in p.detail for p in loaded.problems)
        assert (await fresh.get_session(sid)).read_only
        report = await verify_tree(fresh, sid)
        assert not report.ok and any("role column" in p for p in report.problems)
    finally:
        await fresh.close()


async def test_d1_verify_checks_mirror_index_and_recall_against_the_nodes(
        store) -> None:  # noqa: F811
    sid, _msgs, _hashes = await _mirrored(store, ["plan the trip", "go by train",
                                                  "book the seats", "booked"])
    await store.append(sid, user("written outside the mirror"))
    assert (await verify_tree(store, sid)).ok, (await verify_tree(store, sid)).problems
    branch = await store.load_branch(sid)
    assert isinstance(branch, Branch)
    second, third = branch.nodes[1].id, branch.nodes[2].id
    async with write_connection(store.engine) as conn:
        await _lift_guard(conn, "mirror_index")
        await _lift_guard(conn, "recall_nodes")
        # The hash of the third message pointed at the second one's node, a turn miscounted.
        await conn.execute(text("UPDATE mirror_index SET message_id = :a WHERE node_id = :b"),
                           {"a": second, "b": third})
        await conn.execute(text("UPDATE recall_nodes SET turn = turn + 5 WHERE node_id = :b"),
                           {"b": second})
        if conn.dialect.name == "sqlite":  # another text indexed for the second message
            await conn.execute(text("INSERT INTO recall_fts(rowid, document) SELECT rowid, "
                                    "'injected words' FROM recall_nodes WHERE node_id = :b"),
                               {"b": second})
        else:
            await conn.execute(text("UPDATE recall_nodes SET document = to_tsvector('simple',"
                                    " 'injected words') WHERE node_id = :b"), {"b": second})
    report = await verify_tree(store, sid)
    problems = " | ".join(report.problems)
    assert f"mirror_index row of node {third}: names message {second}, not itself" in problems
    assert f"recall row of node {second}: turn" in problems
    assert f"recall entry of node {second}: not the text of the node" in problems


async def test_l4_search_and_expand_check_hits_against_their_nodes(store) -> None:  # noqa: F811
    """A recall row moved onto the branch from a sibling left by an edit, and a forged
    full-text entry, change what the index says; what is shown follows the nodes."""
    info = await store.create_session()
    await store.append(info.id, user("zebra crossing question"))
    await store.append(info.id, assistant("first reply"))
    await store.append(info.id, user("old draft about okapi"))
    await store.edit(info.id, user("new draft about llamas"))
    await store.append(info.id, assistant("llamas reply"))
    old = next(n for n in await store.load_tree(info.id)
               if n.message and "okapi" in n.message.parts[0].text)
    assert await store.search_history(info.id, "okapi") == []  # off the branch (L4)
    leaf_line = (await _place(store, (await store.get_session(info.id)).leaf_id))[0]
    async with write_connection(store.engine) as conn:
        await _lift_guard(conn, "recall_nodes")
        # Move the sibling onto the branch's line at a free depth.
        await conn.execute(text("UPDATE recall_nodes SET line_id = :l, depth = 9 "
                                "WHERE node_id = :n"), {"l": leaf_line, "n": old.id})
        first = (await store.load_branch(info.id)).nodes[0]
        if conn.dialect.name == "sqlite":
            await conn.execute(text("INSERT INTO recall_fts(rowid, document) SELECT rowid, "
                                    "'giraffe' FROM recall_nodes WHERE node_id = :n"),
                               {"n": first.id})
        else:
            await _lift_guard(conn, "recall_nodes")
            await conn.execute(text("UPDATE recall_nodes SET document = to_tsvector('simple',"
                                    " 'giraffe') WHERE node_id = :n"), {"n": first.id})
    assert await store.search_history(info.id, "okapi") == []
    assert await store.search_history(info.id, "giraffe") == []
    hits = await store.search_history(info.id, "llamas")
    assert sorted(h.node.message.parts[0].text for h in hits) == ["llamas reply",
                                                                  "new draft about llamas"]
    around = await store.expand_history(info.id, first.id, after=20)
    assert "old draft about okapi" not in [h.node.message.parts[0].text for h in around]
    assert parse_query("llamas")  # the query itself is fine


async def _place(store, node_id: str) -> tuple[str, int]:  # noqa: F811
    async with store.engine.connect() as conn:
        row = (await conn.execute(text("SELECT line_id, depth FROM recall_nodes "
                                       "WHERE node_id = :n"), {"n": node_id})).first()
    return row[0], row[1]


async def test_y1_the_mirror_continues_only_from_a_node_holding_the_clients_message(
        store) -> None:  # noqa: F811
    """A mirror_index row that names a node with other content is not where a resent
    conversation continues: the message is stored where its own content is."""
    sid, msgs, _ = await _mirrored(store, ["alpha", "beta", "gamma", "delta"])
    branch = await store.load_branch(sid)
    ids = [n.id for n in branch.nodes]
    async with write_connection(store.engine) as conn:
        await _lift_guard(conn, "mirror_index")
        # The hash of "delta" (the last message) now names the node of "beta".
        await conn.execute(text("UPDATE mirror_index SET node_id = 'gone', message_id = :a "
                                "WHERE node_id = :b"), {"a": ids[1], "b": ids[3]})
    more = [*msgs, user("epsilon")]
    write = await store.mirror_extend(sid, chain_hashes("app", more), more)
    assert write.nodes and write.nodes[-1].message.parts[0].text == "epsilon"
    parent = write.nodes[0].parent_id
    assert parent != ids[1]  # not continued after "beta"
    stored = {n.id: n for n in await store.load_tree(sid)}
    assert stored[parent].message.parts[0].text in ("gamma", "delta")
