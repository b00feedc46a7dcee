"""Property: two store instances (two workers) writing one session in any order never make
the memo write a wrong parent (issue 26), on SQLite and PostgreSQL.

Each instance remembers the session row and recall places it last saw; the other's writes
make those guesses wrong. Whatever the sequence of appends, chains, retries, forks and
conditional appends, every append continues the stored leaf (SPEC C1), a conditional one
from a moved leaf is refused, recall finds each branch's own messages (L4), and the audit
finds every invariant intact (C1-C6).
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.store import InvalidOperationError, StaleBranchError, open_store
from contextfold.store.audit.invariants import check_store
from tests.builders import assistant, user
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

OPS = st.lists(st.tuples(st.sampled_from(["append", "chain", "retry", "fork", "expected"]),
                         st.integers(0, 1)), min_size=1, max_size=12)


async def _run(url: str, ops: list[tuple[str, int]]) -> None:
    async with await open_store(url) as a, await open_store(url) as b:
        stores = (a, b)
        info = await a.create_session()
        sid = info.id
        first = await a.append(sid, user("start"))
        leaf, texts = first.id, ["start"]
        seen = {0: leaf, 1: None}  # the leaf each instance last wrote or saw
        for i, (op, who) in enumerate(ops):
            store = stores[who]
            word = f"w{i}x"
            if op == "append":
                node = await store.append(sid, assistant(f"said {word}"))
                assert node.parent_id == leaf  # C1: from the stored leaf, not a guess
                leaf, seen[who] = node.id, node.id
                texts.append(word)
            elif op == "chain":
                made = await store.append_many(sid, [user(f"asked {word}"),
                                                     assistant(f"told {word}")])
                assert made[0].parent_id == leaf
                leaf, seen[who] = made[-1].id, made[-1].id
                texts.append(word)
            elif op == "retry":
                try:
                    moved = await store.retry(sid)
                except InvalidOperationError:
                    continue  # nothing to retry: nothing moved
                leaf, seen[who] = moved.leaf_id, moved.leaf_id
            elif op == "fork":
                try:
                    fork = await store.fork(sid, leaf)
                except InvalidOperationError:
                    continue  # the leaf is not a stable assistant message
                other = stores[1 - who]
                forked = await other.append(fork.id, user(f"fork only {word}"))
                assert forked.parent_id == leaf
            else:  # conditional on the leaf this instance last saw
                expected = seen[who]
                if expected is None:
                    continue
                try:
                    node = await store.append(sid, user(f"cond {word}"),
                                              expected_leaf_id=expected)
                except StaleBranchError:
                    assert expected != leaf  # refused only when the leaf really moved
                    continue
                assert expected == leaf and node.parent_id == leaf
                leaf, seen[who] = node.id, node.id
                texts.append(word)
            stored = await stores[i % 2].get_session(sid)
            assert stored.leaf_id == leaf
        branch = await a.load_branch(sid)
        on_branch = " ".join(n.message.text for n in branch.nodes  # type: ignore[union-attr]
                             if n.message is not None)
        for word in texts:
            hits = await b.search_history(sid, word)
            assert bool(hits) == (word in on_branch), word  # L4: its own branch only
            assert all("fork only" not in (h.node.message.text or "")  # type: ignore[union-attr]
                       for h in hits)
        report = await check_store(a)
        assert report.ok, report


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_c1_l4_two_workers_never_write_from_a_wrong_guess(db_url, ops):  # noqa: F811
    """C1, C2, L4 (issue 26): any interleaving of two instances' writes."""
    asyncio.run(_run(db_url, ops))
