"""Recall in the store (SPEC L1, L4) on SQLite and PostgreSQL: indexed at append time, found
by words, identifiers and Japanese text, after compaction, and only on the session's own
branch (forks sharing ancestors, siblings from retry and edit, other sessions and trees)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from contextfold.core.recall.recall_text import parse_query, tokens
from contextfold.core.values.messages import Message, ToolCallPart, ToolResultPart, ZoteroItemPart
from contextfold.store import InvalidOperationError, NodeNotFoundError, open_store
from contextfold.store.sql.migrate import downgrade, upgrade
from tests.builders import assistant, tool_call, tool_result, user
from tests.store_fixtures import checkpoint_for, manual_plan

pytest_plugins = ["tests.store_fixtures"]

ZOTERO_KEY = "K7QX4M2P"
DOI = "10.1016/j.cell.2021.04.048"
PATH = "/home/ana/thesis/chapter-3_draft.md"
ERROR = "ERR_SSL_PROTOCOL_ERROR"


async def _research_session(store) -> tuple[str, dict[str, str]]:
    info = await store.create_session(title="research")
    ids: dict[str, str] = {}
    msgs = [
        user(f"Please open Zotero item {ZOTERO_KEY} and never overwrite {PATH}."),
        tool_call("c1", "zotero_get", {"key": ZOTERO_KEY}),
        Message(role="tool", parts=(
            ToolResultPart(call_id="c1", output=f"Title: Spatial transcriptomics\nDOI: {DOI}"),
            ZoteroItemPart(item_key=ZOTERO_KEY, title="Spatial transcriptomics"))),
        assistant("The paper is about spatial transcriptomics of the mouse brain."),
        user("東京大学の研究チームの論文も探してください。"),
        assistant("東京大学の論文を三件見つけました。"),
        user("The download failed"),
        tool_call("c2", "fetch", {"url": "https://example.org/paper.pdf"}),
        tool_result("c2", f"net::{ERROR} while fetching", is_error=True),
        assistant("The server refused TLS; I will retry later."),
    ]
    nodes = await store.append_many(info.id, msgs)
    ids.update(zotero=nodes[0].id, tool=nodes[2].id, japanese=nodes[4].id,
               japanese_reply=nodes[5].id, error=nodes[8].id, last=nodes[-1].id)
    return info.id, ids


async def _found(store, sid: str, query: str, **kw) -> list[str]:
    return [h.node.id for h in await store.search_history(sid, query, **kw)]


# --------------------------------------------------------------------------- L1 findable


async def test_words_identifiers_and_japanese_are_found(store):  # L1
    sid, ids = await _research_session(store)
    assert ids["zotero"] in await _found(store, sid, ZOTERO_KEY)
    assert ids["zotero"] in await _found(store, sid, ZOTERO_KEY.lower())
    assert await _found(store, sid, DOI) == [ids["tool"]]
    assert await _found(store, sid, PATH) == [ids["zotero"]]
    assert await _found(store, sid, ERROR) == [ids["error"]]
    assert set(await _found(store, sid, "東京大学")) == {ids["japanese"], ids["japanese_reply"]}
    assert await _found(store, sid, "研究チーム") == [ids["japanese"]]
    assert ids["zotero"] in await _found(store, sid, "never overwrite")
    assert await _found(store, sid, "transcriptom*")  # prefix
    assert await _found(store, sid, "nothing-like-this") == []


async def test_identifiers_match_verbatim_not_as_loose_words(store):  # L1
    sid, ids = await _research_session(store)
    # Same tokens in another order / with other separators: not the identifier.
    assert await _found(store, sid, "10.1016/j.cell.2021.04.049") == []
    assert await _found(store, sid, "cell/j.10.1016") == []
    # All terms must match; `any_term` relaxes it.
    assert await _found(store, sid, f"{ZOTERO_KEY} 東京大学") == []
    both = await _found(store, sid, f"{ZOTERO_KEY} 東京大学", any_term=True)
    assert ids["zotero"] in both and ids["japanese"] in both


async def test_hits_carry_position_turn_and_a_bounded_snippet(store):  # L1 L2
    info = await store.create_session()
    long_text = "filler words " * 400 + f"the key {ZOTERO_KEY} is here " + "tail " * 400
    nodes = await store.append_many(info.id, [user("first question"), assistant("ok"),
                                              user(long_text), assistant("noted")])
    (hit,) = await store.search_history(info.id, ZOTERO_KEY)
    assert hit.node.id == nodes[2].id and hit.position == 2 and hit.turn == 2
    assert ZOTERO_KEY in hit.snippet and len(hit.snippet) <= 242
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")


async def test_found_after_compaction(store):  # L1
    sid, ids = await _research_session(store)
    branch = await store.load_branch(sid)
    plan = manual_plan(branch)
    result = await store.commit_checkpoint(plan, checkpoint_for(plan, "short summary"),
                                           session_id=sid)
    assert result.committed
    tail = await store.load_branch(sid)
    assert ids["zotero"] not in {n.id for n in tail.nodes}  # compacted away ...
    assert ids["zotero"] in await _found(store, sid, ZOTERO_KEY)  # ... still reachable
    assert await _found(store, sid, "short summary") == []  # checkpoints are not indexed


async def test_import_indexes_the_whole_tree(store, tmp_path):  # L1
    from tests.builders import chain

    nodes = chain([user(f"look at {PATH}"), assistant("done"), user("thanks")], prefix="imp")
    info = await store.import_tree(nodes, nodes[-1].id, title="imported")
    assert await _found(store, info.id, PATH) == ["imp0"]


async def test_bad_queries_are_refused_by_name(store):  # L1
    sid, _ = await _research_session(store)
    with pytest.raises(InvalidOperationError, match="nothing to search"):
        await store.search_history(sid, " ?! ")
    with pytest.raises(InvalidOperationError, match="limit"):
        await store.search_history(sid, "paper", limit=0)


# --------------------------------------------------------------------------- L4 own branch


async def test_recall_reads_only_the_sessions_own_branch(store):  # L4
    info = await store.create_session()
    shared = await store.append_many(info.id, [user("shared ancestor alpha"),
                                               assistant("reply alpha")])
    fork = await store.fork(info.id, shared[-1].id)
    mine = await store.append_many(info.id, [user("original bravo"), assistant("orig reply")])
    theirs = await store.append_many(fork.id, [user("forked charlie"), assistant("fork reply")])
    # Both see the shared ancestors.
    assert await _found(store, info.id, "alpha") == [shared[1].id, shared[0].id]
    assert await _found(store, fork.id, "alpha") == [shared[1].id, shared[0].id]
    # Neither sees the other's branch.
    assert await _found(store, info.id, "charlie") == []
    assert await _found(store, fork.id, "bravo") == []
    assert await _found(store, info.id, "bravo") == [mine[0].id]
    assert await _found(store, fork.id, "charlie") == [theirs[0].id]
    # Another tree with the same words is never visible.
    other = await store.create_session()
    await store.append_many(other.id, [user("alpha bravo charlie"), assistant("x")])
    assert await _found(store, info.id, "charlie") == []
    with pytest.raises(NodeNotFoundError, match="not on the branch"):
        await store.expand_history(info.id, theirs[0].id)
    with pytest.raises(NodeNotFoundError, match="not on the branch"):
        await store.expand_history(other.id, mine[0].id)


async def test_retry_and_edit_siblings_leave_the_branch(store):  # L4
    info = await store.create_session()
    await store.append(info.id, user("question one"))
    await store.append(info.id, assistant("first reply delta"))
    await store.retry(info.id)
    second = await store.append(info.id, assistant("second reply echo"))
    assert await _found(store, info.id, "delta") == []
    assert await _found(store, info.id, "echo") == [second.id]
    edited = await store.edit(info.id, user("edited question foxtrot"))
    assert await _found(store, info.id, "echo") == []
    assert await _found(store, info.id, "question") == [edited.id]
    # The first message was edited away too: it is a sibling root, not an ancestor.
    assert await _found(store, info.id, "one") == []


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.sampled_from(["append", "retry", "edit", "fork"]), min_size=1,
                    max_size=14))
async def test_search_sees_exactly_the_branch(tmp_path_factory, ops):  # L4 property
    """Whatever the mix of appends, retries, edits and forks: every session finds exactly
    the messages on its own branch (compared with the branch the store loads)."""
    path = tmp_path_factory.mktemp("recall") / "r.db"
    s = await open_store(f"sqlite:///{path}")
    try:
        sessions = [(await s.create_session()).id]
        for i, op in enumerate(ops):
            sid = sessions[i % len(sessions)]
            branch = await s.load_full_branch(sid)
            last = branch.nodes[-1] if branch.nodes else None
            if op == "append" or last is None:
                if last is not None and last.message.role == "user":
                    await s.append(sid, assistant(f"word{i} reply"))
                else:
                    await s.append(sid, user(f"word{i} asked"))
            elif op == "retry" and any(n.message.role == "assistant" for n in branch.nodes):
                await s.retry(sid)
            elif op == "edit" and any(n.message.role == "user" for n in branch.nodes):
                await s.edit(sid, user(f"word{i} edited"))
            elif op == "fork" and last.message.role == "assistant":
                sessions.append((await s.fork(sid, last.id)).id)
        for sid in sessions:
            branch = await s.load_full_branch(sid)
            expected = {n.id for n in branch.nodes}
            found = set()
            for i in range(len(ops)):
                found |= {h.node.id for h in await s.search_history(sid, f"word{i}")}
            assert found == expected
    finally:
        await s.close()


# --------------------------------------------------------------------------- expand (L2)


async def test_expand_returns_the_original_messages_in_order(store):  # L2
    sid, ids = await _research_session(store)
    hits = await store.expand_history(sid, ids["tool"], before=2, after=1)
    assert [h.position for h in hits] == [0, 1, 2, 3]
    assert hits[2].node.id == ids["tool"]
    assert isinstance(hits[1].node.message.parts[0], ToolCallPart)
    span = await store.expand_history(sid, ids["last"], to_node_id=ids["japanese"])
    assert span[0].node.id == ids["japanese"] and span[-1].node.id == ids["last"]
    capped = await store.expand_history(sid, ids["zotero"], after=100, max_nodes=3)
    assert len(capped) == 3
    with pytest.raises(InvalidOperationError, match="negative"):
        await store.expand_history(sid, ids["zotero"], before=-1)


# --------------------------------------------------------------------------- migration


async def test_migration_backfills_existing_nodes(db_url):  # L1
    s = await open_store(db_url)
    try:
        sid, ids = await _research_session(s)
        await downgrade(s.engine, "0002")
        await upgrade(s.engine)
        assert await _found(s, sid, DOI) == [ids["tool"]]
        assert await _found(s, sid, "東京大学") == [ids["japanese_reply"], ids["japanese"]] \
            or set(await _found(s, sid, "東京大学")) == {ids["japanese"], ids["japanese_reply"]}
        async with s.engine.connect() as conn:
            count = (await conn.execute(text("SELECT count(*) FROM recall_nodes"))).scalar()
        assert count == 10
    finally:
        await s.close()


async def test_index_rows_are_append_only(store):  # L1
    await _research_session(store)
    with pytest.raises(Exception, match="append-only"):
        async with store.engine.begin() as conn:
            await conn.execute(text("UPDATE recall_nodes SET turn = 0"))


# --------------------------------------------------------------------------- tokens


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60))
def test_tokens_of_a_text_always_find_the_text(value):  # L1 property
    """Any text with a token is found by itself: the query and the index agree."""
    toks = tokens(value)
    if not toks:
        return
    query = parse_query(value.replace('"', " "))
    assert all(set(t.tokens) <= set(toks) or t.prefix for t in query.terms)



async def test_search_history_each_answers_each_query_in_one_read(store):  # L1 L4 L5
    # Issue 26: automatic recall asks for a request's parts at once; the store answers each
    # as `search_history` does, reading the session row and the branch's lines once. On
    # SQLite and PostgreSQL (the memory store's form asks `search_history` once per query).
    from sqlalchemy import event

    from contextfold.core.recall.auto_recall import recall_query

    sid, _ = await _research_session(store)
    queries = [recall_query(q) for q in (f"Zotero {ZOTERO_KEY}", "東京大学の論文",
                                         "the download failed", "nothing-matches 4242")]
    alone = [await store.search_history(sid, q, limit=12, any_term=True) for q in queries]
    assert sum(map(bool, alone)) >= 3  # the queries find things: the comparison means it
    seen: list[str] = []

    def on_execute(_c, _cur, sql, *_a) -> None:
        seen.append(" ".join(sql.split()))

    event.listen(store.engine.sync_engine, "before_cursor_execute", on_execute)
    await store.search_history(sid, queries[0], limit=12, any_term=True)
    one = {k: sum(s.startswith(k) for s in seen) for k in ("SELECT sessions",
                                                          "SELECT r.line_id")}
    seen.clear()
    together = await store.search_history_each(sid, queries, limit=12, any_term=True)
    event.remove(store.engine.sync_engine, "before_cursor_execute", on_execute)
    assert [[h.node.id for h in hits] for hits in together] == \
        [[h.node.id for h in hits] for hits in alone]
    assert {k: sum(s.startswith(k) for s in seen) for k in one} == one  # read once
