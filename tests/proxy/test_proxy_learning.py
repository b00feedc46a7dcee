"""Y9: the proxy learns the upstream's real window from its own context-overflow error, sends
the refused request once more fitted to it, and never again sends one over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.learning import overflow_limit
from contextfold.proxy.serve import ProxyThread
from tests.fakeserver import Reply, fake_server

REAL = 8_000
CONFIGURED = 32_000  # what the operator believed


@pytest.fixture(params=["openai", "vllm", "llamacpp"])
def upstream(request) -> Iterator:
    with fake_server(context_window=REAL, openai_flavor=request.param) as fake:
        yield fake


@pytest.fixture
def proxy(upstream, tmp_path: Path) -> Iterator[ProxyThread]:
    p = ProxyThread(ProxyConfig(upstream=upstream.openai_url, windows={"*": CONFIGURED},
                                db=f"sqlite:///{tmp_path / 'p.db'}")).start()
    yield p
    p.stop()


def test_a_wrong_window_is_learned_from_the_upstreams_overflow_y9(proxy, upstream):
    messages = [{"role": "system", "content": "You are terse."}]
    with httpx.Client(base_url=proxy.url + "/v1", timeout=60) as client:
        for turn in range(14):
            messages.append({"role": "user", "content": f"note {turn}: " + "lorem ipsum " * 300})
            upstream.enqueue(Reply(text=f"ok {turn}"))
            reply = client.post("/chat/completions", json={
                "model": "local-model", "max_tokens": 200, "messages": messages})
            # The client never sees the overflow: the proxy learned and resent.
            assert reply.status_code == 200, reply.text
            messages.append({"role": "assistant", "content": reply.json()["choices"][0]
                             ["message"]["content"]})
    chats = [r for r in upstream.requests if not r.is_summary]
    # One refusal taught the window; nothing after it went over the real window.
    assert len(upstream.overflowed) == 1
    first = upstream.requests.index(upstream.overflowed[0])
    later = upstream.requests[first + 1:]
    assert later and all(r.prompt_tokens + (r.max_tokens or 0) <= REAL for r in later)
    assert sum(len(r.body["messages"]) < len(messages) for r in chats) > 0  # compacted


def test_an_overflow_without_a_limit_is_relayed_not_learned_y9():
    assert overflow_limit(400, b'{"error": {"message": "prompt is too long", '
                               b'"type": "invalid_request_error"}}') is None
    assert overflow_limit(429, b'{"error": {"message": "maximum context length is 8192 '
                               b'tokens. However, you requested 9000 tokens"}}') is None
    assert overflow_limit(400, b'{"error": {"message": "This model\'s maximum context length '
                               b'is 8192 tokens. However, you requested 9041 tokens (9031 in '
                               b'the messages, 10 in the completion).", "code": '
                               b'"context_length_exceeded"}}') == 8192
