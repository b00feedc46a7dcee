"""A damaged session on the service (SPEC D1-D3): every endpoint answers with what can be
read safely, `read_only: true` and the problems — never a 500 (it was `'DamagedBranch'
object has no attribute 'leaf_id'`) — and nothing is written. Damage is made by hand, as in
tests/store/test_store_damage.py. SQLite and PostgreSQL."""

from __future__ import annotations

from contextfold.core.values.messages import Checkpoint
from contextfold.store.audit.invariants import dump_tables
from tests.builders import assistant, user
from tests.damage import raw_node, set_leaf
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def test_a_damaged_session_reads_as_read_only_with_its_problems(
        service_factory) -> None:  # noqa: F811  # D1 D2 D3
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, title="damaged later")
        await say(c, sid, "a question before the damage")
        await (await c.get(f"/v1/sessions/{sid}")).aclose()  # opened and cached on the worker
        info = await svc.store.get_session(sid)
        await raw_node(svc.store, info.tree_id, "orphan-a", "ghost", assistant("lost parent"))
        await raw_node(svc.store, info.tree_id, "orphan-u", "orphan-a", user("hello"))
        await set_leaf(svc.store, sid, "orphan-u")
        rows = await dump_tables(svc.store, leases=True)

        session = await c.get(f"/v1/sessions/{sid}")
        assert session.status_code == 200, session.text
        body = session.json()
        assert body["read_only"] is True and body["gauge"] is None
        assert body["leaf_id"] == "orphan-u" and body["title"] == "damaged later"
        assert any("missing_parent" in p for p in body["problems"]), body["problems"]

        listed = {s["session_id"]: s for s in (await c.get("/v1/sessions")).json()["sessions"]}
        assert listed[sid]["read_only"] is True
        page = (await c.get("/v1/sessions", params={"limit": 50})).json()["sessions"]
        assert {s["session_id"]: s for s in page}[sid]["read_only"] is True  # D2 in a page too

        tree = (await c.get(f"/v1/sessions/{sid}/tree")).json()
        assert tree["read_only"] is True and tree["problems"] == body["problems"]
        assert [n["id"] for n in tree["nodes"] if n["on_branch"]] == ["orphan-a", "orphan-u"]
        paged = (await c.get(f"/v1/sessions/{sid}/tree?limit=5")).json()
        assert paged["read_only"] is True and paged["problems"]

        for method, path, payload in (
                ("POST", "model", {"model": "offline/echo", "context_window": 16_000}),
                ("POST", "messages", {"text": "more"}),
                ("POST", "compact", {}),
                ("GET", "projection", None)):
            r = await c.request(method, f"/v1/sessions/{sid}/{path}", json=payload)
            assert r.status_code == 409 and r.json()["type"] == "read_only", (path, r.text)
        r = await c.post(f"/v1/sessions/{sid}/model", json={"model": "offline/echo"})
        assert r.json()["problems"] == body["problems"]
        assert await dump_tables(svc.store, leases=True) == rows  # D3: nothing written


async def test_damage_in_summarised_history_reads_as_read_only(service_factory) -> None:  # noqa: F811  # D1 D2
    """The loaded tail is sound, the history before its checkpoint is not (a parent loop):
    still read-only everywhere, saying why (the tail alone would not tell)."""
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        await say(c, sid, "first")
        tree = (await svc.store.get_session(sid)).tree_id
        for node, parent, message in (("loop-a", "loop-b", user("a")),
                                      ("loop-b", "loop-a", assistant("b")),
                                      ("x-user", "loop-b", user("y")),
                                      ("x-leaf", "x-user", assistant("z"))):
            await raw_node(svc.store, tree, node, parent, message)
        checkpoint = Checkpoint(summary="s", first_kept_id="x-user", tokens_before=1)
        await raw_node(svc.store, tree, "x-cp", "x-leaf", checkpoint, kind="checkpoint",
                       first_kept_id="x-user")
        await set_leaf(svc.store, sid, "x-cp")
        body = (await c.get(f"/v1/sessions/{sid}")).json()
        assert body["read_only"] is True and body["gauge"] is None, body
        assert any("cycle" in p for p in body["problems"]), body["problems"]
        listed = (await c.get("/v1/sessions")).json()["sessions"]
        assert [s["read_only"] for s in listed] == [True]
        page = (await c.get("/v1/sessions", params={"limit": 1})).json()
        assert [s["read_only"] for s in page["sessions"]] == [True] and page["next_before"] is None
        tree_json = (await c.get(f"/v1/sessions/{sid}/tree")).json()
        assert tree_json["read_only"] is True and tree_json["problems"] == body["problems"]
        r = await c.post(f"/v1/sessions/{sid}/model", json={"model": "offline/echo"})
        assert r.status_code == 409 and r.json()["type"] == "read_only"
