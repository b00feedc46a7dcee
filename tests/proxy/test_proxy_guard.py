"""SPEC Y8, W1, W2, Y1, Y5 for `contextfold proxy`: only its own host names, no cross-site
state changes, bounded bodies and depth, paths that never leave the upstream's prefix,
`--auth` with the service's tokens (and a non-loopback bind refused without it), and
conversations of clients that identify differently kept apart. Every refusal is the client
protocol's own error body, and nothing refused reaches the upstream."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.identity import _salt_file, agent_name, conversation_scope
from contextfold.proxy.paths import unsafe_segment, upstream_url
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store

from .recording_upstream import RecordingUpstream

ROOT = Path(__file__).resolve().parents[2]
CHAT = {"model": "local-model", "messages": [{"role": "user", "content": "hello there"}]}
MESSAGES = {"model": "local-model", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[RecordingUpstream]:
    server = RecordingUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def make_proxy(upstream: RecordingUpstream, tmp_path: Path):
    started: list[ProxyThread] = []

    def make(**options: Any) -> ProxyThread:
        options.setdefault("upstream", upstream.url)
        config = ProxyConfig(windows={"*": 32768}, db=f"sqlite:///{tmp_path / 'proxy.db'}",
                             identity_salt="test-salt", **options)
        started.append(ProxyThread(config).start())
        return started[-1]

    upstream.seen.clear()
    yield make
    for proxy in started:
        proxy.stop()


def _sessions(db: str, tenant: str | None = None) -> list[Any]:
    async def read() -> list[Any]:
        async with await open_store(db) as store:
            scoped = store.for_tenant(tenant) if tenant else store
            return await scoped.list_sessions()

    return asyncio.run(read())


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'proxy.db'}"


def test_y8_a_rebound_host_name_gets_the_protocols_error_and_nothing_is_forwarded(
        make_proxy, upstream, tmp_path) -> None:
    proxy = make_proxy()
    rebound = {"Host": f"rebind.test:{proxy.port}"}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT, headers=rebound)
    assert r.status_code == 421
    assert r.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape
    assert "host name" in r.json()["error"]["message"]
    r = httpx.post(proxy.url + "/v1/messages", json=MESSAGES, headers=rebound)
    assert r.status_code == 421 and r.json()["type"] == "error"  # Anthropic's shape
    assert r.json()["error"]["type"] == "invalid_request_error"
    for path in ("/v1/models", "/"):
        assert httpx.get(proxy.url + path, headers=rebound).status_code == 421
    assert upstream.seen == [] and _sessions(_db(tmp_path)) == []
    r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT,  # its own name
                   headers={"x-contextfold-token": "cf_meant-for-an-auth-proxy"})
    assert r.status_code == 200, r.text
    assert "x-contextfold-token" not in upstream.seen[-1].headers  # never forwarded
    r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT,
                   headers={"Host": f"localhost:{proxy.port}"})
    assert r.status_code == 200


def test_y8_a_cross_site_post_is_refused_before_anything_is_stored(
        make_proxy, upstream, tmp_path) -> None:
    proxy = make_proxy()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=httpx.Request(
        "POST", "http://x", json=CHAT).content, headers={
            "Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert r.status_code == 403 and "another site" in r.json()["error"]["message"]
    assert upstream.seen == [] and _sessions(_db(tmp_path)) == []
    r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT,
                   headers={"Origin": f"http://127.0.0.1:{proxy.port}"})
    assert r.status_code == 200  # a page on the proxy's own origin


def test_y8_bodies_are_bounded_while_read_with_the_protocols_413(
        make_proxy, upstream) -> None:
    proxy = make_proxy(max_body_bytes=64 * 1024)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 100_000}]}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=big)
    assert r.status_code == 413 and "larger than 65536 bytes" in r.json()["error"]["message"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while reading
        yield b'{"model": "local-model", "max_tokens": 9, "messages": [{"role": "user", ' \
              b'"content": "'
        for _ in range(100):
            yield b"y" * 1000
        yield b'"}]}'

    r = httpx.post(proxy.url + "/v1/messages", content=chunked(),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["type"] == "error"
    assert upstream.seen == []
    assert httpx.post(proxy.url + "/v1/chat/completions", json=CHAT).status_code == 200


def test_y8_a_deeply_nested_body_answers_400_not_500(make_proxy, upstream) -> None:
    proxy = make_proxy()
    deep = b'{"model": "local-model", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(proxy.url + "/v1/chat/completions", content=deep,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"]
    # Deep enough to break later steps, not the parser: refused as well.
    nested: Any = "leaf"
    for _ in range(600):
        nested = {"a": nested}
    body = {**MESSAGES, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi", "extra": nested}]}]}
    r = httpx.post(proxy.url + "/v1/messages", json=body)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "nested too deeply" in r.json()["error"]["message"]
    assert upstream.seen == []


def test_y8_a_deeply_nested_reply_is_relayed_not_a_500(make_proxy, upstream) -> None:
    # The upstream is not the client: a reply too deep to parse is passed on as it came,
    # and nothing is recorded from it (no RecursionError on the proxy).
    deep = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    upstream.reply_bytes = deep
    try:
        r = httpx.post(make_proxy().url + "/v1/chat/completions", json=CHAT, timeout=60)
    finally:
        upstream.reply_bytes = None
    assert r.status_code == 200 and r.content == deep


def _raw_get(port: int, path: str) -> tuple[int, str]:
    """GET with the path exactly as written (httpx would normalise dot segments itself)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def test_y8_paths_never_leave_the_upstreams_prefix(make_proxy, upstream) -> None:
    proxy = make_proxy(upstream=upstream.url + "/tenant-a/v1")
    for path in ("/v1/../../../admin", "/v1/%2e%2e/%2e%2e/admin", "/v1/%2E%2E/admin",
                 "/v1/%252e%252e/%252e%252e/admin", "/v1/..%2f..%2fadmin",
                 "/v1/models/..", "/v1/./models", "/v1/a%5c..%5cadmin", "/v1/%252fadmin"):
        status, text = _raw_get(proxy.port, path)
        assert status == 400, (path, status, text)
        assert "could leave the upstream" in text
    assert upstream.seen == []
    status, _ = _raw_get(proxy.port, "/v1/models/gpt-4o-mini")
    assert status == 200
    assert [s.raw_path for s in upstream.seen] == ["/tenant-a/v1/models/gpt-4o-mini"]


def test_y8_the_joined_upstream_url_stays_under_the_base_path() -> None:
    base = "http://host/tenant-a/v1"
    assert upstream_url(base, "/v1/chat/completions", "") == \
        "http://host/tenant-a/v1/chat/completions"
    assert upstream_url(base, "/v1/messages", "beta=true") == \
        "http://host/tenant-a/v1/messages?beta=true"
    for path in ("/v1/../admin", "/../x", "/v1/%2e%2e/x"):
        with pytest.raises(ValueError):
            upstream_url(base, path, "")
    assert unsafe_segment("/v1/models/meta-llama.Llama-3") is None
    assert unsafe_segment("/v1/...") is None  # three dots climb nowhere


def _tokens(db: str, *tenants: str) -> dict[str, str]:
    async def make() -> dict[str, str]:
        async with await open_store(db) as store:
            return {t: (await store.create_token(t))[1] for t in tenants}

    return asyncio.run(make())


def test_w2_proxy_auth_takes_the_services_tokens_in_its_own_header(
        make_proxy, upstream, tmp_path) -> None:
    """W2, W1, Y5: `--auth` needs a tenant's token in x-contextfold-token; the agent's own
    key still reaches the upstream, the token never does; sessions belong to the tenant."""
    db = _db(tmp_path)
    tokens = _tokens(db, "acme", "globex")
    proxy = make_proxy(auth=True)
    agent_key = {"Authorization": "Bearer sk-agent-key"}
    for extra in ({}, {"x-contextfold-token": "cf_wrong"}, {"Authorization": "Bearer " +
                                                            tokens["acme"]}):
        r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT,
                       headers={**agent_key, **extra})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "x-contextfold-token" in r.json()["error"]["message"]
    r = httpx.post(proxy.url + "/v1/messages", json=MESSAGES)
    assert r.status_code == 401 and r.json()["type"] == "error"
    assert upstream.seen == []
    for tenant in ("acme", "globex"):
        r = httpx.post(proxy.url + "/v1/chat/completions", json=CHAT,
                       headers={**agent_key, "x-contextfold-token": tokens[tenant]})
        assert r.status_code == 200, r.text
    assert len(upstream.seen) == 2
    for seen in upstream.seen:
        assert seen.headers["authorization"] == "Bearer sk-agent-key"
        assert "x-contextfold-token" not in seen.headers
        assert all(tok not in str(seen.headers) for tok in tokens.values())
    proxy.stop()
    # The same opening message of two tenants: two sessions, each its tenant's own.
    acme, globex = _sessions(db, "acme"), _sessions(db, "globex")
    assert len(acme) == 1 and len(globex) == 1 and acme[0].id != globex[0].id
    assert acme[0].tenant_id == "acme" and globex[0].tenant_id == "globex"


def test_w2_bad_proxy_tokens_are_rate_limited_per_address(make_proxy, tmp_path) -> None:
    tokens = _tokens(_db(tmp_path), "acme")
    proxy = make_proxy(auth=True)
    codes: list[int] = []
    while 429 not in codes and len(codes) < 60:  # 20 a minute: one more every 3 s
        codes.append(httpx.get(proxy.url + "/v1/models", headers={
            "x-contextfold-token": f"cf_guess{len(codes)}"}).status_code)
    assert codes[:20] == [401] * 20 and codes[-1] == 429, codes
    r = httpx.get(proxy.url + "/v1/models", headers={"x-contextfold-token": tokens["acme"]})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1


@pytest.mark.parametrize("args, says", [
    (["--host", "0.0.0.0"], "--auth"),
    (["--host", "192.168.1.10"], "--auth"),
    (["--allowed-host", "http://x.example/"], "--allowed-host"),
])
def test_w2_y8_proxy_refuses_a_public_bind_without_auth_and_bad_hosts(args, says) -> None:
    done = subprocess.run([sys.executable, "-m", "contextfold", "proxy", "--upstream",
                           "http://127.0.0.1:9", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and says in done.stdout + done.stderr, done.stdout


def test_y1_y5_clients_that_identify_differently_get_their_own_sessions(
        make_proxy, tmp_path) -> None:
    """Y1 with identities: the same opening message from two agents, or from two keys, makes
    two sessions whose metadata stay their own; an agent's update (a new version in its
    user agent) continues its conversation. The key is never stored, not even hashed plain
    (Y5)."""
    db = _db(tmp_path)
    proxy = make_proxy()

    def send(agent: str, key: str, messages: list[dict[str, Any]]) -> None:
        r = httpx.post(proxy.url + "/v1/chat/completions", json={**CHAT, "messages": messages},
                       headers={"User-Agent": agent, "Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text

    opening = [{"role": "user", "content": "hello there"}]
    send("agent-a/1.0", "sk-alpha-key", opening)
    send("agent-b/1.0", "sk-alpha-key", opening)
    send("agent-a/1.0", "sk-beta-key", opening)
    proxy.stop()  # the replies are recorded when it stops, at the latest
    sessions = _sessions(db)
    assert len(sessions) == 3
    clients = sorted(s.metadata["proxy"]["client"] for s in sessions)
    assert clients == ["agent-a/1.0", "agent-a/1.0", "agent-b/1.0"]
    proxy = make_proxy()
    first = next(s for s in sessions if s.metadata["proxy"]["client"] == "agent-a/1.0"
                 and s.created_at == min(x.created_at for x in sessions))
    send("agent-a/1.3", "sk-alpha-key",
         [*opening, {"role": "assistant", "content": "ok"},
          {"role": "user", "content": "and now?"}])
    proxy.stop()
    after = _sessions(db)
    assert len(after) == 3  # the updated agent continued its own conversation
    grown = next(s for s in after if s.id == first.id)
    assert grown.branch_revision > first.branch_revision
    assert grown.metadata["proxy"]["client"] == "agent-a/1.3"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("proxy.db*"))
    for key in ("sk-alpha-key", "sk-beta-key"):
        assert key.encode() not in stored
        assert hashlib.sha256(key.encode()).hexdigest().encode() not in stored


def test_y5_the_scope_holds_no_key_and_ignores_versions() -> None:
    salt = b"s"
    a = conversation_scope("openai", {"user-agent": "claude-cli/2.0.14 (external, cli)",
                                      "authorization": "Bearer sk-one"}, salt)
    b = conversation_scope("openai", {"user-agent": "claude-cli/2.1.0 (external, cli)",
                                      "authorization": "Bearer sk-one"}, salt)
    c = conversation_scope("openai", {"user-agent": "claude-cli/2.1.0 (external, cli)",
                                      "authorization": "Bearer sk-two"}, salt)
    assert a == b != c and "sk-one" not in a
    assert conversation_scope("openai", {"user-agent": "x"}, b"other") == \
        conversation_scope("openai", {"user-agent": "x"}, b"s")  # no key: no salt needed
    assert conversation_scope("openai", {}, salt) == "openai:default"  # as before
    assert agent_name("OpenAI/Python 1.109.1") == "OpenAI/Python"


def test_y5_the_fingerprint_salt_is_kept_private_and_stable(tmp_path) -> None:
    path = tmp_path / "data" / "proxy-salt"
    first = _salt_file(path)
    assert len(first) == 64 and _salt_file(path) == first
    assert path.stat().st_mode & 0o777 == 0o600
