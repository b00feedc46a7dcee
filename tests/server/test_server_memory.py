"""SPEC Y14 for `contextfold serve`: what a worker holds of the sessions it serves (the
open conversations and the store's write memos) lives in its one cache bounded by bytes
(`Held`, `--memory-cache`), on SQLite and PostgreSQL.

With a tiny bound the worker serves many sessions one after another: idle ones are
evicted and the cache stays within its bound; a session that comes back after eviction is
opened again from the store and continues its own branch; a session running something (a
compaction, a turn waiting for it) is never evicted. No process memory is measured here
(`bench/service_soak.py` measures the resident set).
"""

from __future__ import annotations

import asyncio

from contextfold.core.values.held import Held
from contextfold.store import open_store
from contextfold.store.sql.memo import WriteMemo
from tests.server_fixtures import (  # noqa: F401
    Gate,
    create,
    open_window,
    say,
    service_factory,
    worth_compacting,
)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

BOUND = 150_000  # bytes: a handful of short sessions


async def _texts(c, sid: str) -> list[tuple[str, str]]:
    """(role, text) of the session's branch, oldest first."""
    r = await c.get(f"/v1/sessions/{sid}/tree")
    assert r.status_code == 200, r.text
    return [(n["role"], n["text"]) for n in r.json()["nodes"]
            if n["on_branch"] and n["role"] in ("user", "assistant")]


async def test_y14_a_worker_evicts_idle_sessions_and_a_returning_one_continues(
        service_factory) -> None:  # noqa: F811
    async with service_factory(memory_bytes=BOUND) as svc, svc.client() as c:
        sessions = svc.app.state.service.sessions
        held = sessions.held
        sids = []
        for n in range(24):
            sid = await create(c, title=f"conversation {n}")
            for turn in range(2):
                await say(c, sid, f"[{n}.{turn}] " + "words of this conversation " * 20)
            sids.append(sid)
            assert held.bytes <= held.max_bytes  # every session idle between requests
        assert held.evicted > 0
        open_ids = {live.session_id for live in sessions.open_sessions()}
        assert sids[-1] in open_ids and sids[0] not in open_ids
        assert len(open_ids) < len(sids)
        # The store's write memos are in the same cache (SPEC Y14: one per process).
        kinds = {k[0][1] for k in held if isinstance(k[0], tuple)}
        assert {"rows", "nodes"} <= kinds
        before = await _texts(c, sids[0])
        assert [role for role, _ in before] == ["user", "assistant"] * 2

        # The first conversation returns: opened again from the store, it continues its
        # own branch (the new message follows its last reply; nothing lost or doubled).
        turn = await say(c, sids[0], "[0.2] and after a while, once more")
        assert turn["session"]["revision"] == 6  # 3 turns, one leaf move per message
        after = await _texts(c, sids[0])
        assert after[:4] == before
        assert after[4] == ("user", "[0.2] and after a while, once more")
        assert after[5][0] == "assistant" and len(after) == 6
        assert sids[0] in {live.session_id for live in sessions.open_sessions()}
        # A branch grown at the leaf is measured by its new nodes only: the same size as
        # measured whole.
        for live in sessions.open_sessions():
            grown = live.size()
            live._measured = (None, 0)
            assert live.size() == grown
        # Another evicted one is read (not written): its history is whole.
        assert len(await _texts(c, sids[1])) == 4
        # The listing's memo of each session's model is in the same cache, bounded with it.
        listed = (await c.get("/v1/sessions")).json()["sessions"]
        assert [x["session_id"] for x in listed] == sids
        assert {x["model"] for x in listed} == {"offline/echo"}
        assert any(k[0] == "model" for k in held) and held.bytes <= held.max_bytes


async def test_y14_a_session_running_something_is_never_evicted(service_factory) -> None:  # noqa: F811
    gate = Gate()
    async with service_factory(memory_bytes=BOUND, summarizer=gate,
                               context_window=100_000) as svc, svc.client() as c:
        sessions = svc.app.state.service.sessions
        sid, _ = await worth_compacting(c)
        await open_window(c, sid, gate)  # a compaction runs on it until released
        send = asyncio.create_task(c.post(f"/v1/sessions/{sid}/messages",
                                          json={"text": "waits for the compaction"}))
        busy = next(live for live in sessions.open_sessions() if live.session_id == sid)
        for n in range(12):  # many others come and go meanwhile
            other = await create(c, title=f"other {n}")
            await say(c, other, f"[{n}] " + "filler text " * 40)
        assert sessions.held.evicted > 0
        assert busy in sessions.open_sessions()  # the same conversation, never evicted
        gate.release()
        r = await asyncio.wait_for(send, 60)
        assert r.status_code == 200, r.text
        texts = await _texts(c, sid)
        assert [t for role, t in texts if role == "user"][-1] == "waits for the compaction"
        assert sum(t == "waits for the compaction" for _, t in texts) == 1
        # Idle now: the next sessions may evict it, and it still answers afterwards.
        for n in range(12):
            other = await create(c, title=f"later {n}")
            await say(c, other, f"[{n}] " + "filler text " * 40)
        assert busy not in sessions.open_sessions()
        assert (await say(c, sid, "back again"))["reply"]["node_id"]


def test_y14_the_store_write_memos_are_bounded_by_bytes() -> None:
    memo = WriteMemo(Held(20_000))
    for n in range(2_000):
        memo.nodes.put(("tree", f"node-{n}"), {"id": f"node-{n}", "content_hash": "h" * 64})
    assert memo.held.bytes <= 20_000
    assert memo.nodes.get(("tree", "node-1999")) is not None  # the latest kept
    assert memo.nodes.get(("tree", "node-0")) is None  # the oldest forgotten


async def test_y14_a_store_keeps_its_memos_in_the_cache_it_is_given(db_url: str) -> None:  # noqa: F811
    held = Held(1 << 20)
    async with await open_store(db_url) as store:
        store.hold_memos_in(held)
        scoped = store.for_tenant("default")  # a tenant's view follows the same cache
        info = await scoped.create_session()
        from tests.builders import assistant, user

        await scoped.append(info.id, user("hello"))
        await scoped.append(info.id, assistant("hi"))
        assert held.bytes > 0
        assert any(isinstance(k[0], tuple) and k[0][1] == "rows" and k[1] == info.id
                   for k in held)
        for key in list(held):  # forgotten: the next append reads what it needs again
            held.pop(key)
        node = await scoped.append(info.id, user("again"))
        assert [n.id for n in (await scoped.load_branch(info.id)).nodes][-1] == node.id


async def test_y14_the_proxys_store_memos_live_in_the_proxys_one_cache(tmp_path) -> None:
    """The proxy bounds everything it holds per conversation with one cache, the store's
    write memos included (as `serve` does): not a second cache of the store's own."""
    from contextfold.proxy import ProxyConfig
    from contextfold.proxy.app import Proxy

    async with await open_store(f"sqlite:///{tmp_path / 'p.db'}") as store:
        before = store._memo.held
        proxy = Proxy(ProxyConfig(upstream="http://127.0.0.1:9", windows={"*": 8_000}),
                      store, client=None)
        assert store._memo.held is proxy.held and before is not proxy.held
