"""Idempotent sends (docs/service.md, Idempotent sends) on SQLite and PostgreSQL: a send
repeated with the same `Idempotency-Key` never stores the user message twice, whether the
first attempt was answered, died after storing the message, or still runs (here or on
another worker)."""

from __future__ import annotations

import asyncio

from contextfold.core.values.messages import text_message
from contextfold.server.idempotency import message_node_id
from tests.server_fixtures import (  # noqa: F401
    Gate,
    create,
    open_window,
    parse_sse,
    service_factory,
    wait_until,
    worth_compacting,
)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def _send(c, sid: str, text: str, key: str | None, **headers: str):
    if key is not None:
        headers["Idempotency-Key"] = key
    return await c.post(f"/v1/sessions/{sid}/messages", json={"text": text}, headers=headers)


async def _users(c, sid: str) -> list[dict]:
    nodes = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
    return [n for n in nodes if n["role"] == "user"]


async def test_a_repeated_key_stores_the_message_once_and_answers_the_stored_turn(
        service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        first = await _send(c, sid, "hello once", "k-1")
        assert first.status_code == 200, first.text
        assert first.json()["replayed"] is False
        again = await _send(c, sid, "hello once", "k-1")
        assert again.status_code == 200, again.text
        body = again.json()
        assert body["replayed"] is True
        assert body["node_ids"] == first.json()["node_ids"]
        assert body["reply"]["node_id"] == first.json()["reply"]["node_id"]
        assert body["reply"]["text"] == first.json()["reply"]["text"]
        streamed = await _send(c, sid, "hello once", "k-1", Accept="text/event-stream")
        done = [data for name, data in parse_sse(streamed.text) if name == "done"]
        assert done and done[0]["replayed"] is True
        assert done[0]["node_ids"] == first.json()["node_ids"]
        assert [u["text"] for u in await _users(c, sid)] == ["hello once"]
        nodes = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
        assert len(nodes) == 2  # one message, one reply: nothing was generated again


async def test_different_keys_are_different_messages(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        for key in ("a", "b"):
            r = await _send(c, sid, "same words", key)
            assert r.status_code == 200 and r.json()["replayed"] is False
        r = await _send(c, sid, "same words", None)  # no key: a new message each time
        assert r.status_code == 200
        assert [u["text"] for u in await _users(c, sid)] == ["same words"] * 3


async def test_a_key_reused_for_another_text_is_refused(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        assert (await _send(c, sid, "the first text", "k")).status_code == 200
        r = await _send(c, sid, "a different text", "k")
        assert r.status_code == 422, r.text
        assert r.json()["type"] == "idempotency_key_reused"
        assert "Idempotency-Key" in r.json()["error"]
        assert [u["text"] for u in await _users(c, sid)] == ["the first text"]
        other = await create(c)  # keys belong to a session: another session may reuse one
        assert (await _send(c, other, "a different text", "k")).status_code == 200


async def test_a_message_stored_by_a_dead_worker_is_answered_not_stored_again(
        service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        # What a worker killed between storing the message and the reply leaves behind.
        stored = await svc.store.append(sid, text_message("user", "are you there?"),
                                        node_id=message_node_id(sid, "k-dead"))
        r = await _send(c, sid, "are you there?", "k-dead")
        assert r.status_code == 200, r.text
        turn = r.json()
        assert turn["replayed"] is False
        assert turn["node_ids"][0] == stored.id and len(turn["node_ids"]) == 2
        assert "are you there?" in turn["reply"]["text"]
        assert len(await _users(c, sid)) == 1
        assert (await _send(c, sid, "are you there?", "k-dead")).json()["replayed"] is True


async def test_two_workers_racing_on_one_key_store_one_message_and_one_reply(
        service_factory) -> None:  # noqa: F811
    """Two apps on one database are two workers; both take the same send at once."""
    async with service_factory(offline_delay=0.01) as one, \
            service_factory(offline_delay=0.01) as two, \
            one.client() as c1, two.client() as c2:
        sid = await create(c1)
        for round_ in range(3):
            text = f"race {round_}"
            a, b = await asyncio.gather(_send(c1, sid, text, f"k{round_}"),
                                        _send(c2, sid, text, f"k{round_}"))
            assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
            assert a.json()["node_ids"][0] == b.json()["node_ids"][0]
            assert a.json()["reply"]["node_id"] == b.json()["reply"]["node_id"]
        nodes = (await c1.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
        assert [n["text"] for n in nodes if n["role"] == "user"] == \
            ["race 0", "race 1", "race 2"]
        assert sum(n["role"] == "assistant" for n in nodes) == 3


async def test_a_repeat_while_the_first_attempt_runs_here_is_409_in_progress(
        service_factory) -> None:  # noqa: F811
    gate = Gate()
    async with service_factory(summarizer=gate, context_window=100_000) as svc, \
            svc.client() as c:
        sid, _ = await worth_compacting(c)
        await open_window(c, sid, gate)
        first = asyncio.create_task(_send(c, sid, "waits for the compaction", "k"))
        live = svc.app.state.service.sessions.open_sessions()[0]
        # until the first attempt holds its key (it waits for the compaction, U2)
        await wait_until(lambda: live.keyed, "the first attempt never held its key")
        again = await _send(c, sid, "waits for the compaction", "k")
        assert again.status_code == 409, again.text
        assert again.json()["type"] == "in_progress"
        assert again.headers["Retry-After"] == "1"
        gate.release()
        assert (await asyncio.wait_for(first, 60)).status_code == 200
        assert (await _send(c, sid, "waits for the compaction", "k")).json()["replayed"]
        assert len(await _users(c, sid)) == 5


async def test_a_key_whose_message_an_edit_replaced_is_409(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        assert (await _send(c, sid, "typo here", "k")).status_code == 200
        edited = await c.post(f"/v1/sessions/{sid}/edit", json={"text": "no typo"})
        assert edited.status_code == 200
        r = await _send(c, sid, "typo here", "k")
        assert r.status_code == 409 and r.json()["type"] == "idempotency_key_replaced"
        assert [u["text"] for u in await _users(c, sid)] == ["typo here", "no typo"]


async def test_a_malformed_key_is_a_clear_400(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        r = await _send(c, sid, "x", "k" * 201)
        assert r.status_code == 400 and "Idempotency-Key" in r.json()["error"]
        assert await _users(c, sid) == []
