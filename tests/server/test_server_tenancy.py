"""SPEC W1-W3 over HTTP: tenants never see each other's sessions (404 on every endpoint),
tokens are stored hashed and can be revoked, keys never reach clients, size limits answer
413 and the per-tenant rate limit 429 with Retry-After. SQLite and PostgreSQL."""

from __future__ import annotations

import logging

from sqlalchemy import select

from contextfold.store.sql.schema import api_tokens, sessions
from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

NOT_FOUND = {"error": "no such session", "type": "not_found"}


async def test_w1_another_tenants_session_is_not_found_on_every_endpoint(
        service_factory) -> None:  # noqa: F811
    """W1: every session route answers exactly like a missing id for another tenant."""
    async with service_factory(auth=True) as svc:
        async with svc.client("acme") as acme:
            sid = await create(acme, title="acme's")
            turn = await say(acme, sid, "acme secret plans")
            reply = turn["reply"]["node_id"]
        calls = [
            ("GET", f"/v1/sessions/{sid}", None), ("GET", f"/v1/sessions/{sid}/tree", None),
            ("GET", f"/v1/sessions/{sid}/projection", None),
            ("POST", f"/v1/sessions/{sid}/messages", {"text": "hi"}),
            ("POST", f"/v1/sessions/{sid}/compact", {}),
            ("POST", f"/v1/sessions/{sid}/cancel", None),
            ("POST", f"/v1/sessions/{sid}/retry", None),
            ("POST", f"/v1/sessions/{sid}/edit", {"text": "changed"}),
            ("POST", f"/v1/sessions/{sid}/fork", {"node_id": reply}),
            ("POST", f"/v1/sessions/{sid}/model", {"model": "offline/other"}),
            ("GET", f"/v1/sessions/{sid}/events", None),
        ]
        async with svc.client("globex") as globex:
            for method, path, body in calls:
                r = await globex.request(method, path, json=body)
                assert r.status_code == 404, (path, r.status_code, r.text)
                assert r.json() == NOT_FOUND, path
                missing = await globex.request(method, path.replace(sid, "0" * 36), json=body)
                assert missing.status_code == 404 and missing.json() == r.json()
            assert (await globex.get("/v1/sessions")).json() == {"sessions": []}
            other = await create(globex)
            listed = [s["session_id"] for s in (await globex.get("/v1/sessions")).json()
                      ["sessions"]]
            assert listed == [other]
        # Nothing of globex's attempts reached acme's session.
        info = await svc.store.get_session(sid)
        assert info.branch_revision == 2 and info.tenant_id == "acme"
        assert (await svc.store.get_session(other)).tenant_id == "globex"
        async with svc.client("acme") as acme:
            listed = [s["session_id"] for s in (await acme.get("/v1/sessions")).json()
                      ["sessions"]]
            assert listed == [sid]


async def test_w1_fork_and_import_belong_to_the_caller(service_factory) -> None:  # noqa: F811
    from pathlib import Path

    raw = (Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl").read_bytes()
    async with service_factory(auth=True) as svc, svc.client("acme") as acme:
        sid = await create(acme)
        reply = (await say(acme, sid, "hello"))["reply"]["node_id"]
        forked = (await acme.post(f"/v1/sessions/{sid}/fork", json={"node_id": reply})).json()
        imported = (await acme.post("/v1/import", content=raw)).json()
        for new in (forked["session_id"], imported["session_id"]):
            assert (await svc.store.get_session(new)).tenant_id == "acme"


async def test_w1_no_existence_oracle_through_import_or_fork(service_factory) -> None:  # noqa: F811
    """W1: importing a file another tenant imported works (it is not "already stored"), and
    forking with another tenant's node id answers exactly what an unknown id answers."""
    from pathlib import Path

    raw = (Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl").read_bytes()
    async with service_factory(auth=True) as svc:
        async with svc.client("acme") as acme:
            assert (await acme.post("/v1/import", content=raw)).status_code == 201
            sid = await create(acme)
            secret = (await say(acme, sid, "acme only"))["reply"]["node_id"]
        async with svc.client("globex") as globex:
            r = await globex.post("/v1/import", content=raw)
            assert r.status_code == 201, r.text
            assert (await globex.post("/v1/import", content=raw)).status_code == 400  # twice
            mine = await create(globex)
            await say(globex, mine, "hello")
            foreign = await globex.post(f"/v1/sessions/{mine}/fork", json={"node_id": secret})
            unknown = await globex.post(f"/v1/sessions/{mine}/fork",
                                        json={"node_id": "0" * 36})
            assert foreign.status_code == unknown.status_code == 404
            assert foreign.json() == unknown.json() == {"error": "no such node",
                                                        "type": "not_found"}


async def test_w1_library_sessions_belong_to_the_default_tenant(
        service_factory) -> None:  # noqa: F811
    async with service_factory() as svc:
        made_by_library = await svc.store.create_session(title="cli")
        async with svc.client() as c:
            listed = (await c.get("/v1/sessions")).json()["sessions"]
            assert [s["session_id"] for s in listed] == [made_by_library.id]
            assert (await svc.store.get_session(made_by_library.id)).tenant_id == "default"


async def test_w2_tokens_are_stored_hashed_and_revocable(service_factory) -> None:  # noqa: F811
    async with service_factory(auth=True) as svc:
        info, token = await svc.store.create_token("acme", label="ci")
        async with svc.store.engine.connect() as conn:
            rows = (await conn.execute(select(api_tokens))).mappings().all()
        stored = " ".join(str(v) for row in rows for v in row.values())
        assert token not in stored and token[3:] not in stored
        import hashlib

        assert hashlib.sha256(token.encode()).hexdigest() in stored
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=svc.app),
                                     base_url="http://127.0.0.1") as raw:
            ok = await raw.get("/v1/sessions", headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200
            for header in ({}, {"Authorization": "Bearer nope"},
                           {"Authorization": f"Basic {token}"}):
                r = await raw.get("/v1/sessions", headers=header)
                assert r.status_code == 401 and r.json()["type"] == "unauthorized"
                assert r.headers["www-authenticate"] == "Bearer"
            await svc.store.revoke_token(info.id)
            r = await raw.get("/v1/sessions", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401
            assert (await raw.get("/healthz")).status_code == 200  # no token needed
        assert [t.revoked_at is not None for t in await svc.store.list_tokens("acme")] == [True]


async def test_w2_keys_never_reach_clients_or_logs(
        service_factory, monkeypatch, caplog) -> None:  # noqa: F811
    """W2: a server-side key is used by the server only; base_url is allowlisted (and the
    OpenAI key goes only to a URL bound to OpenAI, Y8: an allow-listed keyless URL alone
    would now refuse `openai/gpt-4o`)."""
    secret = "sk-test-" + "k3y" * 10
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    async with service_factory(allow_base_urls=("http://127.0.0.1:9/v1",),
                               provider_urls={"openai": "http://127.0.0.1:9/v1"}) as svc, \
            svc.client() as c:
        r = await c.post("/v1/sessions", json={"model": "openai/gpt-4o",
                                               "base_url": "https://attacker.example/v1"})
        assert r.status_code == 400 and r.json()["type"] == "base_url_not_allowed"
        r = await c.post("/v1/sessions", json={"model": "openai/gpt-4o",
                                               "base_url": "http://127.0.0.1:9/v1/"})
        assert r.status_code == 201
        sid = r.json()["session_id"]
        # The provider is unreachable (port 9): the error must not carry the key.
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
        assert r.status_code == 502 and r.json()["type"] == "provider_error"
        bodies = [r.text, (await c.get(f"/v1/sessions/{sid}")).text,
                  (await c.get("/v1/sessions")).text, (await c.get("/v1/config")).text,
                  (await c.get(f"/v1/sessions/{sid}/tree")).text]
        for body in bodies:
            assert secret not in body
        assert secret not in caplog.text
        async with svc.store.engine.connect() as conn:
            rows = (await conn.execute(select(sessions.c.metadata))).all()
        assert all(secret not in str(row) for row in rows)


async def test_w3_body_and_message_limits_answer_413(service_factory) -> None:  # noqa: F811
    async with service_factory(max_body_bytes=4096, max_message_chars=1000,
                               max_import_bytes=8192) as svc, svc.client() as c:
        sid = await create(c)
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 1001})
        assert r.status_code == 413 and r.json()["type"] == "message_too_large"
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "x" * 5000})
        assert r.status_code == 413 and r.json()["type"] == "payload_too_large"

        async def chunked():  # no Content-Length: counted while reading
            for _ in range(10):
                yield b"y" * 1000

        r = await c.post("/v1/import", content=chunked())
        assert r.status_code == 413 and r.json()["type"] == "payload_too_large"
        assert (await svc.store.get_session(sid)).branch_revision == 0  # nothing stored
        assert len(await svc.store.list_sessions()) == 1


async def test_w3_rate_limit_per_tenant_answers_429(service_factory) -> None:  # noqa: F811
    async with service_factory(auth=True, rate_limit=5) as svc:
        async with svc.client("acme") as acme:
            codes = [(await acme.get("/v1/sessions")).status_code for _ in range(6)]
            assert codes == [200] * 5 + [429]
            r = await acme.get("/v1/sessions")
            assert r.json()["type"] == "rate_limited"
            assert int(r.headers["retry-after"]) >= 1
        async with svc.client("globex") as globex:  # another tenant has its own bucket
            assert (await globex.get("/v1/sessions")).status_code == 200


async def test_sessions_listed_a_page_at_a_time(service_factory) -> None:  # noqa: F811
    """`GET /v1/sessions?limit=N`: the newest first, one page at a time through
    `next_before`, every session exactly once, never another tenant's (W1); a `before`
    that is not the caller's session answers 404 like any other read."""
    async with service_factory(auth=True) as svc:
        async with svc.client("globex") as globex:
            foreign = await create(globex)
        async with svc.client("acme") as acme:
            made = [await create(acme, title=f"s{i}") for i in range(5)]
            whole = (await acme.get("/v1/sessions")).json()
            assert [s["session_id"] for s in whole["sessions"]] == made  # oldest first
            pages, before = [], None
            while True:
                params = {"limit": 2, **({"before": before} if before else {})}
                page = (await acme.get("/v1/sessions", params=params)).json()
                pages.append([s["session_id"] for s in page["sessions"]])
                before = page["next_before"]
                if before is None:
                    break
            assert pages == [made[4:2:-1], made[2:0:-1], made[:1]]
            # A page's rows are the whole listing's rows.
            rows = {s["session_id"]: s for s in whole["sessions"]}
            first = (await acme.get("/v1/sessions", params={"limit": 5})).json()
            assert first["next_before"] is None
            assert first["sessions"] == [rows[s] for s in reversed(made)]
            r = await acme.get("/v1/sessions", params={"limit": 2, "before": foreign})
            assert r.status_code == 404 and r.json() == NOT_FOUND
            r = await acme.get("/v1/sessions", params={"before": made[0]})
            assert r.status_code == 400 and "limit" in r.json()["error"]
            r = await acme.get("/v1/sessions", params={"limit": 0})
            assert r.status_code == 422 and r.json()["error"].startswith("query.limit")
