"""SPEC Y12: a continuation handle is honoured only in the scope that created it.

Every handle a client of the proxy can name is tried from another scope — another client key
without `--auth`, another tenant with it — on a proxy that has just served the owner and on
a new proxy over the same database (a restart, or another process of a fleet):

- `previous_response_id` (Responses): the other scope gets the API's own
  `previous_response_not_found`, nothing is forwarded and no session is stored for it;
- the conversation label (`x-contextfold-session`, every protocol): the same label and the
  same opening words from another scope start a session of their own, and nothing of the
  owner's conversation is forwarded in the other's request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply, fake_server
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures: SQLite, PostgreSQL)

WINDOW = 16_000
SECRET = "the vault code is QZ-4471"


@pytest.fixture
def upstream() -> Iterator[Any]:
    with fake_server(context_window=WINDOW) as fake:
        yield fake


def _start(upstream: Any, db: str, auth: bool) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"*": WINDOW}, db=db,
                                   auth=auth, identity_salt="scope-test-salt")).start()


def _tokens(db: str) -> dict[str, str]:
    async def make() -> dict[str, str]:
        async with await open_store(db) as store:
            return {t: (await store.create_token(t))[1] for t in ("acme", "globex")}

    return asyncio.run(make())


def _stored_texts(db: str) -> list[tuple[str | None, str]]:
    """(tenant, every stored message's text) of each session in the database."""
    async def read() -> list[tuple[str | None, str]]:
        async with await open_store(db) as store:
            out = []
            for info in await store.list_sessions():
                tree = await store.load_tree(info.id)
                out.append((info.tenant_id, json.dumps(
                    [n.message.text for n in tree if n.message is not None])))
            return out

    return asyncio.run(read())


def _settled_texts(db: str, reply: str, timeout: float = 30.0) -> list[tuple[str | None, str]]:
    """`_stored_texts` once some session holds `reply` (the proxy records a reply after it
    has answered it)."""
    deadline = time.monotonic() + timeout
    while True:
        texts = _stored_texts(db)
        if any(reply in stored for _tenant, stored in texts) or time.monotonic() > deadline:
            return texts
        time.sleep(0.05)


def _scopes(db: str, auth: bool) -> tuple[dict[str, str], dict[str, str]]:
    """The owner's headers and the other scope's: another tenant with `--auth` (the same
    client key, so only the tenant tells them apart), else another client key."""
    if auth:
        tokens = _tokens(db)
        key = {"authorization": "Bearer sk-shared"}
        return ({**key, "x-contextfold-token": tokens["acme"]},
                {**key, "x-contextfold-token": tokens["globex"]})
    return {"authorization": "Bearer sk-X"}, {"authorization": "Bearer sk-Y"}


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "after-restart"])
@pytest.mark.parametrize("auth", [False, True], ids=["keys", "tenants"])
def test_y12_previous_response_id_of_another_scope_is_not_found(
        upstream, db_url: str, auth: bool, restart: bool) -> None:  # noqa: F811
    db = db_url
    owner, other = _scopes(db, auth)
    proxy = _start(upstream, db, auth)
    try:
        upstream.enqueue(Reply(text="noted"), kind="chat")
        r = httpx.post(proxy.url + "/v1/responses", headers=owner, timeout=30,
                       json={"model": "local-model", "input": SECRET})
        assert r.status_code == 200, r.text
        rid = r.json()["id"]
        if restart:
            proxy.stop()
            proxy = _start(upstream, db, auth)
        # The proxy answers first and records the reply after (in the background): the
        # store's "before" is the owner's finished turn, its reply included.
        before = _settled_texts(db, "noted")
        sent = len(upstream.requests)
        r = httpx.post(proxy.url + "/v1/responses", headers=other, timeout=30, json={
            "model": "local-model", "previous_response_id": rid, "input": "what did I say?"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "previous_response_not_found" and rid in error["message"]
        assert "QZ-4471" not in r.text
        assert len(upstream.requests) == sent  # nothing forwarded
        assert _stored_texts(db) == before  # nothing stored
        # The owner still continues its own conversation, here or after the restart.
        upstream.enqueue(Reply(text="QZ-4471"), kind="chat")
        r = httpx.post(proxy.url + "/v1/responses", headers=owner, timeout=30, json={
            "model": "local-model", "previous_response_id": rid, "input": "which code?"})
        assert r.status_code == 200, r.text
        assert "QZ-4471" in json.dumps(upstream.requests[-1].body["input"])
    finally:
        proxy.stop()


_BODIES = {
    "/v1/chat/completions": lambda text: {"model": "local-model",
                                          "messages": [{"role": "user", "content": text}]},
    "/v1/messages": lambda text: {"model": "local-model", "max_tokens": 64,
                                  "messages": [{"role": "user", "content": text}]},
    "/v1/responses": lambda text: {"model": "local-model", "input": text},
}


@pytest.mark.parametrize("restart", [False, True], ids=["same-process", "after-restart"])
@pytest.mark.parametrize("auth", [False, True], ids=["keys", "tenants"])
@pytest.mark.parametrize("path", list(_BODIES))
def test_y12_a_label_continues_only_its_own_scopes_conversation(upstream, tmp_path: Path,
                                                                path: str, auth: bool,
                                                                restart: bool):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    owner, other = _scopes(db, auth)
    label = {"x-contextfold-session": "team-standup"}
    proxy = _start(upstream, db, auth)
    try:
        upstream.enqueue(Reply(text="stored"), kind="chat")
        r = httpx.post(proxy.url + path, headers={**owner, **label}, timeout=30,
                       json=_BODIES[path](SECRET))
        assert r.status_code == 200, r.text
        if restart:
            proxy.stop()
            proxy = _start(upstream, db, auth)
        # The other scope sends the same label and the same opening words, then asks on.
        upstream.enqueue(Reply(text="fresh"), kind="chat")
        body = _BODIES[path](SECRET)
        r = httpx.post(proxy.url + path, headers={**other, **label}, timeout=30, json=body)
        assert r.status_code == 200, r.text
    finally:
        proxy.stop()
    forwarded = json.dumps(upstream.requests[-1].body)
    assert "stored" not in forwarded  # nothing of the owner's conversation went out
    sessions = _stored_texts(db)
    assert len(sessions) == 2  # one each: the label did not join them
    assert sum("stored" in texts for _, texts in sessions) == 1
    if auth:
        assert sorted(t for t, _ in sessions) == ["acme", "globex"]
