"""Recall in the in-memory store (SPEC L1, L2), which replay runs: the SQL store's contract.

The same linear history in `MemoryStore` and in the SQL store (SQLite and PostgreSQL) gives
the same hits for words, identifiers, Japanese, prefixes, all or any terms; bad arguments
are refused with the same errors; expansion reads the same messages.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.values.messages import Message, ToolCallPart, ToolResultPart
from contextfold.store import InvalidOperationError, NodeNotFoundError
from contextfold.store.memory import MemoryStore
from tests.builders import assistant, tool_call, tool_result, user
from tests.store_fixtures import checkpoint_for, manual_plan

pytest_plugins = ["tests.store_fixtures"]

WORDS = ["zebra", "quantum", "ledger", "mitochondria", "draft", "chapter", "résumé",
         "protocol", "transcriptomics", "overwrite", "paper", "retry"]
IDENTIFIERS = ["K7QX4M2P", "10.1016/j.cell.2021.04.048", "/home/ana/thesis/chapter-3_draft.md",
               "ERR_SSL_PROTOCOL_ERROR", "issue-27", "v2.3.1"]
JAPANESE = ["東京大学", "研究チーム", "論文", "京都", "東"]
VOCAB = WORDS + IDENTIFIERS + JAPANESE


def _history(seed: int = 7, size: int = 44) -> list[Message]:
    """A linear session mixing the vocabulary, with tool rounds and a recall tool round
    (whose call and result are not indexed)."""
    rng = random.Random(seed)
    msgs: list[Message] = [user("Planted: zebra quantum, K7QX4M2P and 10.1016/j.cell.2021.04.048 "
                                "from 東京大学 (résumé on transcriptomics)."), assistant("ok")]
    for i in range(size // 4):
        def said(n: int) -> str:
            return " ".join(rng.choice(VOCAB) for _ in range(n))
        msgs.append(user(f"{said(3)} please {said(2)}"))
        if i % 3 == 1:
            cid = f"c{i}"
            msgs += [tool_call(cid, "fetch", {"q": said(2)}), tool_result(cid, said(5))]
        elif i % 3 == 2:
            cid = f"r{i}"
            msgs += [Message(role="assistant", parts=(ToolCallPart(
                         id=cid, name="history_search", input={"query": "zebra"}),)),
                     Message(role="tool", parts=(ToolResultPart(
                         call_id=cid, name="history_search", output="zebra quantum"),))]
        msgs.append(assistant(f"{said(4)}. {said(2)}"))
    return msgs


async def _fill(store, msgs: list[Message], fold_at: int = 20) -> str:
    """The history in `store` with the same node ids, a checkpoint committed part way."""
    info = await store.create_session(title="parity")
    for i, msg in enumerate(msgs):
        await store.append(info.id, msg, node_id=f"m{i}")
        if i == fold_at:
            plan = manual_plan(await store.load_branch(info.id))
            result = await store.commit_checkpoint(plan, checkpoint_for(plan, "zebra summary"),
                                                   session_id=info.id)
            assert result.committed
    return info.id


def _hits(hits) -> set[tuple[str, int, int]]:
    return {(h.node.id, h.position, h.turn) for h in hits}


@pytest.fixture
async def both(store):
    msgs = _history()
    memory = MemoryStore()
    return (store, await _fill(store, msgs)), (memory, await _fill(memory, msgs))


_TERM = st.one_of(st.sampled_from(VOCAB),
                  st.sampled_from(WORDS).map(lambda w: w[:4] + "*"),
                  st.sampled_from(WORDS + JAPANESE).map(lambda w: f'"{w} {w}"'),
                  st.just("10.1016/j.cell.2021.04.049"), st.just("nothing"))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.lists(_TERM, min_size=1, max_size=3), any_term=st.booleans())
async def test_memory_and_sql_find_the_same_messages(both, terms, any_term):  # L1 parity
    """Any query over the same history: the same hits (node, position, turn) in both."""
    (sql, sql_id), (memory, memory_id) = both
    query = " ".join(terms)
    expected = await sql.search_history(sql_id, query, limit=100, any_term=any_term)
    found = await memory.search_history(memory_id, query, limit=100, any_term=any_term)
    assert _hits(found) == _hits(expected)
    assert [h.snippet for h in sorted(found, key=lambda h: h.position)] == \
        [h.snippet for h in sorted(expected, key=lambda h: h.position)]


async def test_each_kind_of_query_finds_something_in_both(both):  # L1 (the property bites)
    (sql, sql_id), (memory, memory_id) = both
    for query in ("K7QX4M2P", "10.1016/j.cell.2021.04.048", "東京大学", "東", "resume",
                  "transcr*", '"zebra quantum"'):
        expected = await sql.search_history(sql_id, query, limit=100)
        assert expected, query
        assert _hits(await memory.search_history(memory_id, query, limit=100)) == \
            _hits(expected), query
    # The recall tool's own round is never indexed, and checkpoints are not either.
    rounds = await memory.search_history(memory_id, "history_search", limit=100)
    assert rounds == [] == await sql.search_history(sql_id, "history_search", limit=100)
    assert all(h.node.message is not None
               for h in await memory.search_history(memory_id, "summary", limit=100))


async def test_bad_arguments_are_refused_alike(both):  # L1 L2
    for store, sid in both:
        for kwargs in ({"limit": 0}, {"limit": 101}):
            with pytest.raises(InvalidOperationError, match="limit must be between 1 and 100"):
                await store.search_history(sid, "zebra", **kwargs)
        with pytest.raises(InvalidOperationError, match="nothing to search"):
            await store.search_history(sid, " ?! ")
        with pytest.raises(InvalidOperationError, match="negative"):
            await store.expand_history(sid, "m1", before=-1)
        with pytest.raises(InvalidOperationError, match="max_nodes"):
            await store.expand_history(sid, "m1", max_nodes=0)
        with pytest.raises(NodeNotFoundError, match="not on the branch"):
            await store.expand_history(sid, "no-such-node")


async def test_expansion_reads_the_same_messages(both):  # L2
    (sql, sql_id), (memory, memory_id) = both
    for args in ({"node_id": "m5", "before": 3, "after": 30},
                 {"node_id": "m30", "to_node_id": "m2"},
                 {"node_id": "m0", "after": 100, "max_nodes": 7}):
        expected = await sql.expand_history(sql_id, **args)
        found = await memory.expand_history(memory_id, **args)
        assert [(h.node.id, h.position, h.turn) for h in found] == \
            [(h.node.id, h.position, h.turn) for h in expected]


async def test_ranking_puts_the_rare_term_first_and_newest_among_equals():  # L1
    store = MemoryStore()
    info = await store.create_session()
    nodes = [await store.append(info.id, m) for m in (
        user("common words about the ledger"), assistant("the ledger again"),
        user("the ledger and the rare mitochondria"), assistant("ledger"))]
    hits = await store.search_history(info.id, "ledger mitochondria", any_term=True)
    assert hits[0].node.id == nodes[2].id
    assert [h.node.id for h in await store.search_history(info.id, "zebra*")] == []
    same = await store.search_history(info.id, "ledger", limit=4)
    assert {h.node.id for h in same} == {n.id for n in nodes}
    assert await store.search_history(info.id, "ledger", limit=2) == same[:2]


@settings(max_examples=25, deadline=None)
@given(searched_at=st.sets(st.integers(0, 43), max_size=8), terms=st.lists(_TERM, min_size=1,
                                                                            max_size=3),
       any_term=st.booleans())
async def test_searching_between_pushes_finds_what_one_search_at_the_end_finds(
        searched_at, terms, any_term):  # L1 (issue 40: a push only queues its message)
    """A message is indexed by the first search after its push: whenever earlier searches
    ran, the same query over the same history gives the same hits, scores and snippets."""
    msgs = _history()
    lazy, eager = MemoryStore(), MemoryStore()
    lazy_id, eager_id = await _fill(lazy, msgs), (await eager.create_session()).id
    for i, msg in enumerate(msgs):
        await eager.append(eager_id, msg, node_id=f"m{i}")
        if i in searched_at:  # indexes what was pushed so far, then more is pushed
            await eager.search_history(eager_id, "zebra", limit=5, any_term=True)
    query = " ".join(terms)
    found = await lazy.search_history(lazy_id, query, limit=100, any_term=any_term)
    expected = await eager.search_history(eager_id, query, limit=100, any_term=any_term)
    assert [(h.node.id, h.score, h.snippet) for h in found] == \
        [(h.node.id, h.score, h.snippet) for h in expected]


async def test_a_push_tokenises_nothing_until_a_search(monkeypatch):  # L1 (issue 40)
    from contextfold.store.recall import memory_search

    indexed: list[str] = []
    original = memory_search.index_document
    monkeypatch.setattr(memory_search, "index_document",
                        lambda text: indexed.append(text) or original(text))
    store = MemoryStore()
    sid = (await store.create_session()).id
    for i, msg in enumerate(_history(size=8)):
        await store.append(sid, msg, node_id=f"m{i}")
    assert indexed == []
    assert await store.search_history(sid, "zebra quantum", any_term=True)
    first = len(indexed)
    assert first > 0
    await store.search_history(sid, "ledger", any_term=True)
    assert len(indexed) == first  # each message is tokenised once



_SKEWED = ["ledger", "draft", "chapter", "quantum", "K7QX4M2P", "zebra", "東京大学", "retry"]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000),
       weights=st.lists(st.integers(1, 40), min_size=len(_SKEWED), max_size=len(_SKEWED)),
       terms=st.lists(st.sampled_from([*_SKEWED, "issue-27"]), min_size=1, max_size=6),
       limit=st.integers(1, 12))
async def test_the_best_hits_of_any_term_are_the_first_of_all_hits(seed, weights, terms,
                                                                    limit):
    """L1 (issue 40): an any-term search skips the messages holding only common words once
    the rarer terms' messages outscore them; its `limit` hits are still the first `limit`
    of all the hits, with the same scores and snippets, ties newest first."""
    rng = random.Random(seed)
    store = MemoryStore()
    sid = (await store.create_session()).id
    for i in range(80):
        words = " ".join(rng.choices(_SKEWED, weights, k=rng.randint(1, 12)))
        await store.append(sid, user(words) if i % 2 == 0 else assistant(words),
                           node_id=f"m{i}")
    query = " ".join(terms)
    every = await store.search_history(sid, query, limit=100, any_term=True)
    best = await store.search_history(sid, query, limit=limit, any_term=True)
    assert [(h.node.id, h.score, h.snippet) for h in best] == \
        [(h.node.id, h.score, h.snippet) for h in every[:limit]]
