"""SPEC Y8 (and the rest of W2, W3) for `contextfold serve`: only its own host names are
answered (no DNS rebinding), state changes only from its own origin or from clients that
send no Origin, raw-body endpoints only with their content type, bounded bodies (a chunked
oversized JSON body is a 413), bad tokens limited per client address, the page's headers,
no CDN scripts, and no temporary file name in any answer. The browser side is
tests/browser/test_page_guard.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from tests.server_fixtures import create, say, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl"


@contextlib.asynccontextmanager
async def raw_client(svc, base: str = "http://127.0.0.1:8765",
                     client: tuple[str, int] = ("127.0.0.1", 50000)
                     ) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app as if it were reached at `base` (the ASGI server tuple follows
    the URL, like a socket's local address) from `client`."""
    transport = httpx.ASGITransport(app=svc.app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url=base, timeout=60) as c:
        yield c


async def test_y8_a_foreign_host_name_gets_nothing(service_factory) -> None:  # noqa: F811
    """Y8: `Host: rebind.attacker.example` (a name switched to 127.0.0.1) is refused on
    every path, the page and the API description included; nothing is listed or stored."""
    async with service_factory() as svc:
        async with svc.client() as c:
            sid = await create(c, title="private")
            await say(c, sid, "my secret plans")
        async with raw_client(svc) as c:
            for method, path, body in (("GET", "/v1/sessions", None), ("GET", "/", None),
                                       ("GET", "/openapi.json", None),
                                       ("GET", f"/v1/sessions/{sid}/tree", None),
                                       ("POST", "/v1/sessions", {"title": "rebound"})):
                r = await c.request(method, path, json=body,
                                    headers={"Host": "rebind.attacker.example:8765"})
                assert r.status_code == 421, (path, r.status_code)
                assert r.json()["type"] == "misdirected_request"
                assert "secret" not in r.text and sid not in r.text
            # The same requests under the server's own names are answered.
            for host in ("127.0.0.1:8765", "localhost:8765"):
                r = await c.get("/v1/sessions", headers={"Host": host})
                assert r.status_code == 200 and r.json()["sessions"][0]["session_id"] == sid
            # The right name on another port is not ours either.
            r = await c.get("/v1/sessions", headers={"Host": "127.0.0.1:9999"})
            assert r.status_code == 421
        assert len(await svc.store.list_sessions()) == 1


async def test_y8_the_connections_own_address_and_allowed_hosts_are_answered(
        service_factory) -> None:  # noqa: F811
    """Y8: the address a connection arrived at (a LAN address under --host 0.0.0.0) and the
    names given with --allowed-host are answered; other names are not."""
    allowed = ("contextfold.example.org", "10.9.9.9:8443")
    async with service_factory(allowed_hosts=allowed) as svc, \
            raw_client(svc, "http://192.168.7.20:8765") as c:
        assert (await c.get("/v1/sessions")).status_code == 200  # Host 192.168.7.20:8765
        r = await c.get("/v1/sessions", headers={"Host": "192.168.7.21:8765"})
        assert r.status_code == 421
        for host in ("contextfold.example.org", "contextfold.example.org:443",
                     "CONTEXTFOLD.example.org.", "10.9.9.9:8443"):
            r = await c.get("/v1/sessions", headers={"Host": host})
            assert r.status_code == 200, host
        for host in ("10.9.9.9:8444", "evil.contextfold.example.org", "", "a b"):
            r = await c.get("/v1/sessions", headers={"Host": host})
            assert r.status_code == 421, host


async def test_y8_cross_site_simple_posts_are_refused_before_any_handler(
        service_factory) -> None:  # noqa: F811
    """Y8: a "simple" cross-site POST (text/plain, which a browser sends without asking)
    carries the attacker's Origin and is refused with 403; nothing is stored. API clients
    (no Origin) and the page itself (its own origin) are accepted."""
    raw = FIXTURE.read_bytes()
    async with service_factory() as svc, raw_client(svc) as c:
        evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
        r = await c.post("/v1/import?title=stolen", content=raw, headers=evil)
        assert r.status_code == 403 and r.json()["type"] == "forbidden_origin"
        r = await c.post("/v1/sessions", content=b'{"title": "x"}', headers=evil)
        assert r.status_code == 403
        for origin in ("null", "http://127.0.0.1:8765.evil.example", "file://",
                       "http://127.0.0.1:9999"):
            r = await c.post("/v1/sessions", json={}, headers={"Origin": origin})
            assert r.status_code == 403, origin
        assert await svc.store.list_sessions() == []
        # Reads are not state changes: a GET with a foreign Origin is not refused here (the
        # browser keeps the answer from the other site's page: there are no CORS headers).
        r = await c.get("/v1/sessions", headers={"Origin": "http://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        assert (await c.post("/v1/sessions", json={})).status_code == 201
        r = await c.post("/v1/sessions", json={},
                         headers={"Origin": "http://127.0.0.1:8765"})
        assert r.status_code == 201
        r = await c.post("/v1/sessions", json={}, headers={"Origin": "http://localhost:8765"})
        assert r.status_code == 201


async def test_y8_raw_body_endpoints_take_only_a_session_files_content_type(
        service_factory) -> None:  # noqa: F811
    """Y8: /v1/import and /v1/replay refuse form content types (415) even without an
    Origin; the page's application/octet-stream and a bare body are accepted."""
    raw = FIXTURE.read_bytes()
    async with service_factory() as svc, raw_client(svc) as c:
        for kind in ("text/plain", "application/x-www-form-urlencoded",
                     "multipart/form-data; boundary=x", "text/html"):
            for path in ("/v1/import", "/v1/replay?context_window=64000"):
                r = await c.post(path, content=raw, headers={"Content-Type": kind})
                assert r.status_code == 415, (path, kind)
                assert r.json()["type"] == "unsupported_media_type"
        assert await svc.store.list_sessions() == []
        r = await c.post("/v1/import", content=raw,
                         headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 201, r.text
        r = await c.post("/v1/replay?context_window=64000", content=raw)
        assert r.status_code == 200, r.text


async def test_y8_the_page_has_hardening_headers_and_no_cdn_docs(
        service_factory) -> None:  # noqa: F811
    """Y8: the page forbids foreign scripts, framing and sniffing; FastAPI's /docs (scripts
    from a CDN) is off and /openapi.json stays."""
    async with service_factory() as svc, raw_client(svc) as c:
        for path in ("/", "/app.js", "/v1/config"):
            r = await c.get(path)
            assert r.status_code == 200, path
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["x-content-type-options"] == "nosniff"
        for path in ("/docs", "/redoc"):
            r = await c.get(path)
            assert r.status_code == 404 and "cdn" not in r.text.lower(), path
        assert (await c.get("/openapi.json")).json()["info"]["title"] == "contextfold"


async def test_w3_a_chunked_oversized_json_body_is_413(service_factory) -> None:  # noqa: F811
    """W3: a JSON body sent without Content-Length is counted while read; over the limit it
    answers 413 payload_too_large (FastAPI's "error parsing the body" 400 never gets out)."""
    async with service_factory(max_body_bytes=4096) as svc, raw_client(svc) as c:
        async def chunked():
            yield b'{"title": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}'

        r = await c.post("/v1/sessions", content=chunked(),
                         headers={"Content-Type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "the request body is larger than 4096 bytes",
                            "type": "payload_too_large", "limit_bytes": 4096}
        assert await svc.store.list_sessions() == []


async def test_w2_bad_tokens_are_rate_limited_per_client_address(
        service_factory) -> None:  # noqa: F811
    """W2, W3: after 20 bad tokens from one address every token check from it answers 429
    (the right token too, so a guesser learns nothing while limited); another address is
    not affected."""
    async with service_factory(auth=True, rate_limit=100_000) as svc:
        good = await svc.token("acme")
        async with raw_client(svc, client=("10.0.0.66", 4000)) as guesser:
            codes: list[int] = []
            while 429 not in codes and len(codes) < 60:  # 20 a minute: one more every 3 s
                codes.append((await guesser.get("/v1/sessions", headers={
                    "Authorization": f"Bearer cf_guess{len(codes)}"})).status_code)
            assert codes[:20] == [401] * 20 and codes[-1] == 429, codes
            r = await guesser.get("/v1/sessions", headers={"Authorization": f"Bearer {good}"})
            assert r.status_code == 429 and r.json()["type"] == "rate_limited"
            assert int(r.headers["retry-after"]) >= 1
        async with raw_client(svc, client=("10.0.0.67", 4000)) as other:
            r = await other.get("/v1/sessions", headers={"Authorization": f"Bearer {good}"})
            assert r.status_code == 200


async def test_w2_answers_never_name_the_servers_temporary_upload_file(
        service_factory) -> None:  # noqa: F811
    """W2: errors, warnings and imported node ids speak of "upload", never of the spooled
    temporary file (its name tells where the server keeps uploads)."""
    good = FIXTURE.read_bytes()
    async with service_factory() as svc, raw_client(svc) as c:
        bodies = [b"not json\n", good + b"\nbroken line\n",
                  b'[{"role": "user", "content": "\\ud83d half an emoji"}]',
                  b'[{"role": "user", "content": "hi"}, {"role": "assistant"}]']
        texts = []
        for body in bodies:
            for path in ("/v1/import", "/v1/replay?context_window=64000"):
                r = await c.post(path, content=body)
                texts.append(r.text)
        assert any("upload" in t for t in texts)
        for text in texts:
            assert "contextfold-upload" not in text and "/tmp" not in text, text
        for info in await svc.store.list_sessions():
            tree = (await c.get(f"/v1/sessions/{info.id}/tree")).json()
            assert all("contextfold-upload" not in n["id"] for n in tree["nodes"])


def test_y8_serve_answers_only_its_names_over_a_real_socket(tmp_path: Path) -> None:
    """Y8 through uvicorn: the port and address come from the socket; `--allowed-host` adds
    a name; a bad `--allowed-host` is refused at startup (exit 2)."""
    import subprocess
    import sys

    from tests.server_fixtures import ROOT, serve_process

    db = f"sqlite:///{tmp_path / 's.db'}"
    with serve_process("--db", db, "--allowed-host", "contextfold.test") as (url, _proc):
        port = url.rsplit(":", 1)[1]
        assert httpx.get(f"{url}/v1/sessions").status_code == 200
        r = httpx.get(f"{url}/v1/sessions", headers={"Host": "contextfold.test"})
        assert r.status_code == 200
        r = httpx.get(f"{url}/v1/sessions", headers={"Host": f"rebind.test:{port}"})
        assert r.status_code == 421 and r.json()["type"] == "misdirected_request"
    done = subprocess.run([sys.executable, "-m", "contextfold", "serve", "--db", db,
                           "--allowed-host", "http://x.example/"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "--allowed-host" in done.stderr, done.stderr


async def test_y8_a_deeply_nested_json_body_is_refused_not_a_500(
        service_factory) -> None:  # noqa: F811
    """Y8: the service's JSON bodies are bounded in depth too: a 100,000-deep body and a
    deep value inside a field are client errors, never a 500."""
    async with service_factory() as svc, raw_client(svc) as c:
        deep = b"[" * 100_000 + b"]" * 100_000
        r = await c.post("/v1/sessions", content=deep,
                         headers={"Content-Type": "application/json"})
        assert r.status_code in (400, 422) and r.json()["type"] != "internal", r.text
        sid = await create(c)
        nested = b'{"text": ' + b'{"a": ' * 5000 + b'1' + b'}' * 5000 + b'}'
        r = await c.post(f"/v1/sessions/{sid}/messages", content=nested,
                         headers={"Content-Type": "application/json"})
        assert r.status_code in (400, 422) and r.json()["type"] != "internal", r.text
