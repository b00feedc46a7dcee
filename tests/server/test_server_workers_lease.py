"""SPEC Y13 for `serve --workers`: a send that needs a compaction while another worker holds
the session's compaction lease waits for that worker's checkpoint and goes out, never a 409.

Two service apps over one database stand for two workers. The race this covers: the other
worker takes the lease right after the send looked (the send's own check of the lease found
it free), so the send's preflight meets the lease. SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging

from contextfold.server.sessions import SessionManager
from tests.server_fixtures import (  # noqa: F401
    LONG,
    Gate,
    open_window,
    service_factory,
    wait_until,
    worth_compacting,
)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def test_y13_a_send_waits_for_another_workers_compaction(
        service_factory, monkeypatch, caplog) -> None:  # noqa: F811
    caplog.set_level(logging.INFO)
    gate = Gate()
    async with service_factory(summarizer=gate, context_window=8192) as one, \
            service_factory(summarizer=gate, context_window=8192) as two, \
            one.client() as c1, two.client() as c2:
        sid, _ = await worth_compacting(c1)
        await open_window(c1, sid, gate)  # worker one compacts, holding the lease

        async def looked_too_early(self, live) -> bool:  # the lease was free when it looked
            return False

        monkeypatch.setattr(SessionManager, "remote_compaction", looked_too_early)
        send = asyncio.create_task(c2.post(f"/v1/sessions/{sid}/messages",
                                           json={"text": "big: " + LONG * 8}))


        def waiting() -> bool:  # the send met the lease and says it waits (an event, not a nap)
            return any("another process is compacting" in rec.getMessage()
                       for rec in caplog.records)

        await wait_until(waiting, "the send waiting for worker one's compaction")
        assert not send.done()  # waiting for worker one's checkpoint, not refused
        gate.release()
        r = await asyncio.wait_for(send, 60)
        assert r.status_code == 200, r.text
        projection = (await c2.get(f"/v1/sessions/{sid}/projection")).json()
        assert projection["checkpoint"] is not None
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert any("another process is compacting" in rec.getMessage() for rec in caplog.records)
