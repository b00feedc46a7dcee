"""The proxy answers every library error with the protocol's own error, chosen by the error's
kind (proxy/errors.py): the official SDKs, over real HTTP, raise their usual exception, and
nothing that could not be served reaches the upstream."""

from __future__ import annotations

import asyncio
import sqlite3

import anthropic
import openai
import pytest

from contextfold.store import open_store
from tests.fakeserver import Reply
from tests.proxy.test_proxy_openai import KEY, WINDOW, proxy, start  # noqa: F401


def test_an_unknown_model_is_a_bad_request_naming_the_proxy_flag(proxy, upstream):  # noqa: F811
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        oa.chat.completions.create(model="no-such-model-xyz",
                                   messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 400 and err.value.type == "invalid_request_error"
    assert "--model-window no-such-model-xyz=TOKENS" in err.value.message
    an = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        an.messages.create(model="no-such-model-xyz", max_tokens=10,
                           messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []


def _mark_read_only(url: str) -> None:
    # What a damaged history makes of a session (SPEC D2), set by hand: the flag the store
    # itself sets when it finds damage.
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE sessions SET read_only = 1")


async def _sessions(url: str) -> list:
    store = await open_store(url)
    try:
        return await store.list_sessions(check_damage=False)
    finally:
        await store.close()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_read_only_session_is_a_conflict_in_the_protocols_shape(upstream, db,
                                                                 protocol):  # D2
    # Before the error vocabulary, a store error the proxy did not list was a plain-text
    # 500; by kind it is the protocol's 409, and the SDK raises its ConflictError.
    upstream.enqueue(Reply(text="first answer"), kind="chat")
    first = [{"role": "user", "content": "remember the number 7"}]
    p = start(upstream, db)
    try:
        if protocol == "openai":
            oa = openai.OpenAI(base_url=p.url + "/v1", api_key=KEY, max_retries=0)
            reply = oa.chat.completions.create(model="local-model", messages=first)
            answer = {"role": "assistant", "content": reply.choices[0].message.content}
        else:
            an = anthropic.Anthropic(base_url=p.url, api_key=KEY, max_retries=0)
            got = an.messages.create(model="local-model", max_tokens=50, messages=first)
            answer = {"role": "assistant", "content": got.content[0].text}
    finally:
        p.stop()  # the reply is recorded after the client has it
    assert len(asyncio.run(_sessions(db))) == 1
    _mark_read_only(db)
    sent = len(upstream.requests)
    follow_up = [*first, answer, {"role": "user", "content": "which number?"}]
    p = start(upstream, db)
    try:
        if protocol == "openai":
            with pytest.raises(openai.ConflictError) as err:
                oa = openai.OpenAI(base_url=p.url + "/v1", api_key=KEY, max_retries=0)
                oa.chat.completions.create(model="local-model", messages=follow_up)
            body = err.value.body
            assert err.value.status_code == 409 and body["type"] == "invalid_request_error"
        else:
            with pytest.raises(anthropic.ConflictError) as err:
                an = anthropic.Anthropic(base_url=p.url, api_key=KEY, max_retries=0)
                an.messages.create(model="local-model", max_tokens=50, messages=follow_up)
            body = err.value.body["error"]
            assert err.value.status_code == 409 and err.value.body["type"] == "error"
    finally:
        p.stop()
    assert "read-only" in body["message"]
    assert len(upstream.requests) == sent  # nothing forwarded
