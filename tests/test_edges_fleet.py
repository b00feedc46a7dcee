"""The edges found running many proxies and services on one database (issue 38): each bad
input is a 4xx naming the field — no 500, no traceback in the log, no raw Python exception
text in the body — on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from contextfold._net import checked_base_url
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.proxy.recording_upstream import RecordingUpstream
from tests.server_fixtures import ROOT, service_factory  # noqa: F401
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

RAW_PYTHON = ("codec can't", "Traceback", "DataError", "psycopg", "Error(")


@pytest.mark.parametrize("body, field", [
    ('{"title": "a\\u0000b"}', "title"),
    ('{"system": "hi \\ud800 there"}', "system"),
    ('{"title": "x \\udfff"}', "title"),
    ('{"base_url": "http://127.0.0.1:9/v1\\tx"}', "base_url"),
    ('{"base_url": "http://127.0.0.1:9/v1?key=1"}', "base_url"),
    ('{"base_url": "file:///etc/passwd"}', "base_url"),
])
async def test_a_bad_text_field_is_a_4xx_naming_it(service_factory, body: str,  # noqa: F811
                                                    field: str, caplog) -> None:
    async with service_factory() as svc, svc.client() as c:
        r = await c.post("/v1/sessions", content=body,
                         headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, r.text
        assert field in r.json()["error"]
        assert not any(bit in r.text for bit in RAW_PYTHON), r.text
        assert (await c.get("/v1/sessions")).json()["sessions"] == []  # nothing stored
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


@pytest.mark.parametrize("url, ok", [
    ("http://127.0.0.1:8080/v1", True), ("https://api.example.com", True),
    ("ftp://example.com/v1", False), ("http://x/v1\t", False), ("http://x/v1?a=b", False),
    ("http://x/v1#frag", False), ("http:///v1", False), ("javascript:alert(1)", False),
])
def test_checked_base_url_takes_only_a_model_servers_http_url(url: str, ok: bool) -> None:
    if ok:
        assert checked_base_url(url) == url
    else:
        with pytest.raises(ValueError, match=r"^base_url: "):
            checked_base_url(url)


def test_proxy_upstream_accepts_only_http_urls() -> None:
    done = subprocess.run([sys.executable, "-m", "contextfold", "proxy", "--upstream",
                           "ftp://127.0.0.1:9/v1"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "--upstream" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def _raw(port: int, head: bytes, body: bytes, *, close_write: bool) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(head + body)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        sock.settimeout(10)
        got = b""
        while True:
            try:
                chunk = sock.recv(4096)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
        return got
    finally:
        sock.close()


def test_proxy_a_body_cut_short_and_an_oversized_declared_body(tmp_path: Path,
                                                               caplog) -> None:
    caplog.set_level(logging.INFO)
    upstream = RecordingUpstream().start()
    proxy = ProxyThread(ProxyConfig(upstream=upstream.url, windows={"*": 32768},
                                    db=f"sqlite:///{tmp_path / 'p.db'}",
                                    max_body_bytes=4096)).start()
    try:
        def head(length: int) -> bytes:
            return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
                    ).encode()

        # Declared too large: a readable 413 at once, before the body is read.
        big = _raw(proxy.port, head(10_000_000), b'{"mo', close_write=False)
        assert big.startswith(b"HTTP/1.1 413") and b"--max-body-bytes" in big
        # Cut short: the client stops sending and closes; a 400 naming the body.
        cut = _raw(proxy.port, head(1000), b'{"model": "m"', close_write=True)
        assert cut == b"" or (cut.startswith(b"HTTP/1.1 400") and b"request body" in cut)
        time.sleep(0.3)
    finally:
        proxy.stop()
        upstream.stop()
    assert upstream.seen == []  # nothing forwarded
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert any("closed the connection after" in rec.getMessage() for rec in caplog.records)


def test_a_refused_request_leaves_no_empty_session(tmp_path: Path) -> None:
    upstream = RecordingUpstream().start()
    db = f"sqlite:///{tmp_path / 'p.db'}"
    proxy = ProxyThread(ProxyConfig(upstream=upstream.url, windows={"*": 4096}, db=db)).start()
    try:
        huge = {"model": "m", "messages": [{"role": "user", "content": "word " * 20_000}]}
        for path, body in [("/v1/chat/completions", huge),
                           ("/v1/messages", {**huge, "max_tokens": 64}),
                           ("/v1/responses", {"model": "m", "input": "word " * 20_000}),
                           ("/v1/chat/completions", {"model": "m", "messages": "nope"})]:
            r = httpx.post(proxy.url + path, json=body, timeout=30)
            assert r.status_code == 400, (path, r.text)
    finally:
        proxy.stop()
        upstream.stop()
    assert upstream.seen == []

    async def count() -> int:
        async with await open_store(db) as store:
            return len(await store.list_sessions())

    assert asyncio.run(count()) == 0


# --------------------------------------------------------------------------- rows edited in place


async def _edit_in_place(db: str, kind: str, session_id: str) -> tuple[str, int]:
    """Rewrite the first message of the session's branch by hand (the append-only guard
    dropped, the hash left as it was): the id of the edited node, and the tree's node count."""
    from sqlalchemy import func, select, text, update

    from contextfold.store.sql.engine import write_connection
    from contextfold.store.sql.schema import nodes

    async with await open_store(db) as store:
        info = await store.get_session(session_id)
        victim = (await store.load_branch(session_id)).nodes[0]
        async with write_connection(store.engine) as conn:
            await conn.execute(text("DROP TRIGGER IF EXISTS nodes_no_update" if kind ==
                                    "sqlite" else
                                    "ALTER TABLE nodes DISABLE TRIGGER nodes_append_only"))
            payload = (await conn.execute(select(nodes.c.payload).where(
                nodes.c.tree_id == info.tree_id, nodes.c.id == victim.id))).scalar_one()
            await conn.execute(update(nodes).where(
                nodes.c.tree_id == info.tree_id, nodes.c.id == victim.id).values(
                payload=payload.replace("first question", "forged question")))
            count = (await conn.execute(select(func.count()).select_from(nodes).where(
                nodes.c.tree_id == info.tree_id))).scalar_one()
        return victim.id, count


async def _nodes_of(db: str, session_id: str) -> int:
    from sqlalchemy import func, select

    from contextfold.store.sql.engine import read_connection
    from contextfold.store.sql.schema import nodes

    async with await open_store(db) as store:
        info = await store.get_session(session_id)
        async with read_connection(store.engine) as conn:
            return (await conn.execute(select(func.count()).select_from(nodes).where(
                nodes.c.tree_id == info.tree_id))).scalar_one()


def test_d2_a_running_proxy_notices_a_row_edited_in_place(db_url: str, backend: str,  # noqa: F811
                                                          monkeypatch, caplog) -> None:
    """issue 38: a proxy that holds a conversation's branch reads it again after a while
    (`RECHECK_SECONDS`; 0 here) and the store checks each row against its hash: the next
    request is answered with an error naming the session and the edited node, and nothing
    more is stored — as a fresh process would do. SQLite and PostgreSQL."""
    from contextfold.runtime.mirror import Mirror

    monkeypatch.setattr(Mirror, "recheck_seconds", 0.0)
    upstream = RecordingUpstream().start()
    proxy = ProxyThread(ProxyConfig(upstream=upstream.url, windows={"*": 16_000},
                                    db=db_url)).start()
    messages = [{"role": "user", "content": "first question"}]
    try:
        def send() -> httpx.Response:
            return httpx.post(proxy.url + "/v1/chat/completions", timeout=30,
                              json={"model": "m", "max_tokens": 64, "messages": messages},
                              headers={"authorization": "Bearer sk-edge"})

        for turn in range(2):
            r = send()
            assert r.status_code == 200, r.text
            messages += [r.json()["choices"][0]["message"],
                         {"role": "user", "content": f"and then {turn}?"}]
        (sid,) = [s.id for s in asyncio.run(_sessions(db_url))]
        edited, stored = asyncio.run(_edit_in_place(db_url, backend, sid))
        forwarded = len(upstream.seen)
        for _ in range(2):  # refused every time, the same way
            r = send()
            assert r.status_code == 409, r.text
            error = r.json()["error"]["message"]
            assert sid in error and edited in error and "modified after it was written" \
                in error
            assert not any(bit in r.text for bit in RAW_PYTHON), r.text
    finally:
        proxy.stop()
        upstream.stop()
    assert len(upstream.seen) == forwarded  # nothing of it forwarded
    assert asyncio.run(_nodes_of(db_url, sid)) == stored  # nothing stored, nothing lost
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


async def _sessions(db: str) -> list:
    async with await open_store(db) as store:
        return await store.list_sessions()


async def test_d2_a_running_service_notices_a_row_edited_in_place(
        service_factory, db_url: str, backend: str, monkeypatch) -> None:  # noqa: F811
    """issue 38: `serve` holding a session reads its branch again after a while (0 here):
    a row edited in place by hand makes the session read-only there as in a fresh process
    (a 409 naming the damage; nothing written). SQLite and PostgreSQL."""
    from contextfold.server.sessions import SessionManager
    from tests.server_fixtures import create, say

    async with service_factory() as svc, svc.client() as c:
        sid = await create(c)
        await say(c, sid, "first question")
        await say(c, sid, "second question")
        monkeypatch.setattr(SessionManager, "recheck_seconds", 0.0)
        edited, stored = await _edit_in_place(db_url, backend, sid)
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "third"})
        assert r.status_code == 409, r.text
        assert edited in r.text and not any(bit in r.text for bit in RAW_PYTHON)
        assert (await c.get(f"/v1/sessions/{sid}")).json()["read_only"] is True
    assert await _nodes_of(db_url, sid) == stored
