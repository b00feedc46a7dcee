"""SPEC W4 (U1-U4, C4) over HTTP: while a compaction runs, retry / edit / fork / model /
compact answer 409 with the reason; a send is accepted, waits, and goes out afterwards; a
cancel rolls the compaction back and a waiting send then sends and saves nothing.

The summariser is a gate (tests/server_fixtures.py): the compaction window stays open until
the test releases it, so nothing here depends on timing. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio

import pytest

from contextfold.runtime.conversation import Conversation
from tests.server_fixtures import (  # noqa: F401
    LONG,
    Gate,
    create,
    open_window,
    say,
    service_factory,
    wait_until,
    worth_compacting,
)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def _nodes(c, sid: str) -> list[dict]:
    return (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]


@pytest.fixture
def send_waiting(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set when a send reaches the wait for a running compaction (U2): a test waits for it
    instead of sleeping and hoping the request got there."""
    waiting = asyncio.Event()
    real = Conversation._wait_for_compaction

    async def spied(self: Conversation, draft: object) -> None:
        if self._runner.running:
            waiting.set()
        await real(self, draft)  # type: ignore[arg-type]

    monkeypatch.setattr(Conversation, "_wait_for_compaction", spied)
    return waiting


async def test_w4_u4_operations_refused_while_compacting_and_u2_send_waits(
        service_factory, send_waiting: asyncio.Event) -> None:  # noqa: F811
    gate = Gate()
    async with service_factory(summarizer=gate, context_window=100_000) as svc, \
            svc.client() as c:
        sid, reply = await worth_compacting(c)
        await open_window(c, sid, gate)

        for path, body in [("retry", None), ("edit", {"text": "x"}),
                           ("fork", {"node_id": reply}), ("model", {"model": "offline/b"}),
                           ("compact", {})]:
            r = await c.post(f"/v1/sessions/{sid}/{path}", json=body)
            assert r.status_code == 409, (path, r.text)
            assert r.json()["type"] == "compacting" and "compaction" in r.json()["reason"]

        before = await _nodes(c, sid)
        send = asyncio.create_task(c.post(f"/v1/sessions/{sid}/messages",
                                          json={"text": "sent while compacting"}))
        await asyncio.wait_for(send_waiting.wait(), 60)  # the send is in, waiting
        assert not send.done()
        assert len(await _nodes(c, sid)) == len(before)  # U2: nothing went out yet

        gate.release()
        r = await asyncio.wait_for(send, 60)
        assert r.status_code == 200, r.text
        turn = r.json()
        assert "sent while compacting" in turn["reply"]["text"]
        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        # The message went out after the checkpoint: the request held the new summary.
        assert projection["checkpoint"] is not None
        assert projection["checkpoint"]["payload"]["summarizer"] == "gated"
        assert turn["session"]["state"]["phase"] in ("idle", "compacting")


async def test_w4_c4_cancel_rolls_back_and_u3_the_waiting_send_is_not_sent(
        service_factory, send_waiting: asyncio.Event) -> None:  # noqa: F811
    gate = Gate()
    async with service_factory(summarizer=gate, context_window=100_000) as svc, \
            svc.client() as c:
        sid, _ = await worth_compacting(c)
        before = await _nodes(c, sid)
        await open_window(c, sid, gate)
        send = asyncio.create_task(c.post(
            f"/v1/sessions/{sid}/messages", json={"text": "keep this draft"},
            headers={"Accept": "text/event-stream"}))
        await asyncio.wait_for(send_waiting.wait(), 60)
        assert not send.done()

        r = await c.post(f"/v1/sessions/{sid}/cancel")
        assert r.status_code == 200 and r.json()["cancelled"] is True
        r = await asyncio.wait_for(send, 60)
        from tests.server_fixtures import parse_sse

        events = parse_sse(r.text)
        names = [n for n, _ in events]
        assert "compaction_cancelled" in names and names[-1] == "error"
        error = events[-1][1]
        assert error["type"] == "send_aborted" and error["status"] == 409
        assert error["reason"] == "cancelled" and error["draft"] == "keep this draft"
        # C4 + U3: no checkpoint, no user message, nothing sent.
        after = await _nodes(c, sid)
        assert [n["id"] for n in after] == [n["id"] for n in before]
        state = (await c.get(f"/v1/sessions/{sid}")).json()["state"]
        assert state["phase"] == "idle"
        assert (await c.post(f"/v1/sessions/{sid}/cancel")).json()["cancelled"] is False

        gate.rearm()
        gate.release()
        r = await c.post(f"/v1/sessions/{sid}/compact", json={})  # works again afterwards
        assert r.status_code == 200 and r.json()["outcome"]["status"] == "compacted"


async def test_w4_busy_turn_refuses_a_second_turn(service_factory) -> None:  # noqa: F811
    async with service_factory(offline_delay=0.05) as svc, svc.client() as c:
        sid = await create(c)
        first = asyncio.create_task(c.post(f"/v1/sessions/{sid}/messages",
                                           json={"text": "a slow streamed reply " * 5}))

        async def busy() -> bool:
            return (await c.get(f"/v1/sessions/{sid}")).json()["state"]["phase"] == "busy"

        await wait_until(busy, "the first turn never showed as busy")
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "second"})
        assert r.status_code == 409 and r.json()["type"] == "busy"
        assert (await first).status_code == 200
