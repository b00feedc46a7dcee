"""The endpoints the web page needs (server/routes_page.py, docs/web.md): search over the
branch (SPEC L4), pins from the page (N1-N2), rename and archive (metadata, never history),
export, the context breakdown (adds up to the gauge) and the server's settings (key names,
never values)."""

from __future__ import annotations

import json

from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


async def test_search_is_scoped_to_the_branch_and_the_tenant(service_factory) -> None:  # noqa: F811
    async with service_factory(auth=True) as svc, svc.client("acme") as c, \
            svc.client("globex") as other:
        sid = await create(c)
        await say(c, sid, "the bibliography lives in refs/library.bib")
        await say(c, sid, "unrelated chatter about lunch")
        # L4: an edit moves the branch; the old wording is off the branch and not found.
        edited = await c.post(f"/v1/sessions/{sid}/edit", json={"text": "zebra crossing"})
        assert edited.status_code == 200, edited.text
        hits = (await c.get(f"/v1/sessions/{sid}/search", params={"q": "library.bib"})).json()
        # The offline echo quotes the message: the user's and its reply both match.
        assert {h["role"] for h in hits["hits"]} == {"user", "assistant"}
        assert all("library.bib" in h["snippet"] for h in hits["hits"])
        assert all(h["created_at"].endswith("Z") for h in hits["hits"])
        gone = (await c.get(f"/v1/sessions/{sid}/search", params={"q": "lunch"})).json()
        assert gone["hits"] == []
        # W1: another tenant's session is not found, whatever the query.
        r = await other.get(f"/v1/sessions/{sid}/search", params={"q": "library.bib"})
        assert r.status_code == 404
        assert (await c.get(f"/v1/sessions/{sid}/search", params={"q": ""})).status_code == 422


async def test_pins_from_the_api_are_events_the_projection_shows(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        turn = await say(c, sid, "never overwrite refs/library.bib")
        user_id = turn["node_ids"][0]
        r = await c.post(f"/v1/sessions/{sid}/pins", json={"node_id": user_id})
        assert r.status_code == 201, r.text
        pin_id = r.json()["pin"]["pin_id"]
        projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
        assert [p["text"] for p in projection["pins"]] == ["never overwrite refs/library.bib"]
        assert (await c.post(f"/v1/sessions/{sid}/pins", json={})).status_code == 400
        r = await c.delete(f"/v1/sessions/{sid}/pins/{pin_id}")
        assert r.status_code == 200 and r.json()["pins"] == []
        assert (await c.get(f"/v1/sessions/{sid}/projection")).json()["pins"] == []
        # N2: both events stay in the durable tree.
        kinds = [n["kind"] for n in (await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]]
        assert kinds.count("pin") == 2
        r = await c.delete(f"/v1/sessions/{sid}/pins/{pin_id}")
        assert r.status_code == 400 and "no active pin" in r.json()["error"]


async def test_rename_and_archive_keep_the_history(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, title="first title")
        await say(c, sid, "hello")
        listed = (await c.get("/v1/sessions")).json()["sessions"][0]
        assert listed["face"] == "service" and listed["archived"] is False
        assert listed["last_message_at"].endswith("Z")
        r = await c.patch(f"/v1/sessions/{sid}", json={"title": "Renamed", "archived": True})
        assert r.status_code == 200, r.text
        listed = (await c.get("/v1/sessions")).json()["sessions"][0]
        assert listed["title"] == "Renamed" and listed["archived"] is True
        assert (await c.get(f"/v1/sessions/{sid}")).json()["title"] == "Renamed"
        assert len((await c.get(f"/v1/sessions/{sid}/tree")).json()["nodes"]) == 2
        r = await c.patch(f"/v1/sessions/{sid}", json={"title": "", "archived": False})
        listed = (await c.get("/v1/sessions")).json()["sessions"][0]
        assert listed["title"] == "first title" and listed["archived"] is False


async def test_context_breakdown_adds_up_to_the_gauge(service_factory) -> None:  # noqa: F811
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, system="be brief", context_window=8192)
        turn = await say(c, sid, "hello there " * 30)
        await c.post(f"/v1/sessions/{sid}/pins", json={"node_id": turn["node_ids"][0]})
        body = (await c.get(f"/v1/sessions/{sid}/context")).json()
        gauge = (await c.get(f"/v1/sessions/{sid}")).json()["gauge"]
        assert body["used"] == gauge["tokens"] and body["limit"] == gauge["safe_input_limit"]
        assert sum(body["parts"].values()) == body["used"]
        assert body["free"] == body["limit"] - body["used"]
        assert body["parts"]["pins"] > 0 and body["parts"]["tools"] > 0  # recall tools
        assert body["parts"]["messages"] > 0


async def test_export_and_settings(service_factory, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("GROQ_API_KEY", "gsk-secret-value")
    async with service_factory() as svc, svc.client() as c:
        sid = await create(c, title="to export")
        await say(c, sid, "export me")
        r = await c.get(f"/v1/sessions/{sid}/export", params={"format": "anthropic"})
        assert r.status_code == 200
        assert "attachment" in r.headers["content-disposition"]
        doc = json.loads(r.text)
        assert doc["session"]["title"] == "to export"
        assert [n["role"] for n in doc["branch"]] == ["user", "assistant"]
        assert doc["request"]["format"] == "anthropic"
        assert doc["request"]["messages"][0]["role"] == "user"
        r = await c.get("/v1/settings")
        body = r.json()
        assert body["default_model"] == "offline/echo" and body["default_context_window"] > 0
        assert {"provider": "groq", "label": "Groq", "env_var": "GROQ_API_KEY"} in \
            body["provider_keys"]
        assert "gsk-secret-value" not in r.text


async def test_a_re_import_names_the_session_holding_it(service_factory) -> None:  # noqa: F811
    from pathlib import Path

    data = (Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl").read_bytes()
    async with service_factory() as svc, svc.client() as c:
        first = await c.post("/v1/import", params={"title": "first import"}, content=data)
        assert first.status_code == 201, first.text
        held = first.json()["session_id"]
        again = await c.post("/v1/import", content=data)
        assert again.status_code == 400, again.text  # the status a duplicate always had
        body = again.json()
        assert body["session_id"] == held
        assert body["session_title"] == "first import" and "first import" in body["error"]
