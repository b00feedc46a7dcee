"""SPEC M7 over HTTP: `POST /v1/sessions/{id}/compact?preview=1` answers the checkpoint that
would be committed and commits nothing; a body `summary` commits the user's edit as a new
checkpoint marked as edited; a `base` the session has moved past answers 409 stale_preview
and writes nothing."""

from __future__ import annotations

from tests.runtime.test_compaction_preview import EDITED
from tests.server_fixtures import service_factory, worth_compacting  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def _checkpoints(c, sid: str) -> list[dict]:
    nodes = (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]
    return [n for n in nodes if n["kind"] == "checkpoint"]


async def test_preview_then_commit_an_edit_over_http(service_factory) -> None:  # noqa: F811
    async with service_factory(context_window=16_000) as svc, svc.client() as c:
        sid, _ = await worth_compacting(c)
        r = await c.post(f"/v1/sessions/{sid}/compact?preview=1", json={})
        assert r.status_code == 200, r.text
        preview = r.json()["outcome"]
        assert preview["status"] == "preview" and preview["summary"] and preview["base"]
        assert await _checkpoints(c, sid) == []  # nothing committed

        r = await c.post(f"/v1/sessions/{sid}/compact",
                         json={"summary": EDITED, "base": preview["base"]})
        assert r.status_code == 200, r.text
        done = r.json()["outcome"]
        assert done["status"] == "compacted" and done["edited"] is True
        assert done["summarizer"] == "user-edited"
        (cp,) = await _checkpoints(c, sid)
        assert cp["id"] == done["checkpoint_id"]

        r = await c.post(f"/v1/sessions/{sid}/compact",
                         json={"summary": EDITED, "base": preview["base"]})
        assert r.status_code == 409 and r.json()["type"] == "stale_preview", r.text
        assert len(await _checkpoints(c, sid)) == 1

        r = await c.post(f"/v1/sessions/{sid}/compact?preview=1", json={"summary": "x"})
        assert r.status_code == 400
        r = await c.post(f"/v1/sessions/{sid}/compact", json={"summary": "  "})
        assert r.status_code == 400 and "empty" in r.text
