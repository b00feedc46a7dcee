"""`contextfold proxy` with the official `anthropic` SDK as the client (Y2-Y4)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from tests.fakeserver import Reply, ToolCallSpec

WINDOW = 10_000
KEY = "sk-ant-proxy-test-SECRET"
TOOLS = [{"name": "read", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


@pytest.fixture
def proxy(upstream, tmp_path: Path) -> Iterator[ProxyThread]:
    p = ProxyThread(ProxyConfig(upstream=upstream.base_url, windows={"*": WINDOW},
                                db=f"sqlite:///{tmp_path / 'proxy.db'}")).start()
    yield p
    p.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_tool_loop_fits_with_a_stable_cached_prefix_y2_y4(proxy, upstream,
                                                                       stream):
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Read every file and report."}]
    for r in range(18):
        upstream.enqueue(Reply(text=f"batch {r}", tool_calls=(
            ToolCallSpec("read", {"path": f"a{r}.py"}, id=f"toolu_{r}_a"),
            ToolCallSpec("read", {"path": f"b{r}.py"}, id=f"toolu_{r}_b"))))
        kwargs = dict(model="local-model", max_tokens=800, system="You are a coding agent.",
                      tools=TOOLS, messages=messages)
        if stream:
            with client.messages.stream(**kwargs) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"], "content": "x = 1\n" * 180}
            for b in content if b["type"] == "tool_use"]})
    assert sum(len(json.dumps(m)) for m in messages) // 4 > WINDOW
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 18 and not upstream.overflowed and not upstream.rejected
    compacted = [r for r in chats if "[contextfold checkpoint]" in json.dumps(r.body)]
    assert compacted  # the history was folded, never sent whole
    for r in compacted:  # Y4: the checkpoint block carries a cache breakpoint
        first = r.body["messages"][0]["content"][0]
        assert first["text"].startswith("[contextfold checkpoint]")
        assert first["cache_control"] == {"type": "ephemeral"}
    # Y4: consecutive requests with the same checkpoint share the same leading bytes.
    same = [(a, b) for a, b in itertools.pairwise(compacted)
            if a.body["messages"][0] == b.body["messages"][0]]
    assert same
    for a, b in same:
        n = len(a.body["messages"])
        assert json.dumps(b.body["messages"][:n - 1]) == json.dumps(a.body["messages"][:n - 1])


def test_a_request_that_cannot_fit_gets_the_anthropic_error_y3(proxy, upstream):
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="local-model", max_tokens=100,
                               messages=[{"role": "user", "content": "word " * 20_000}])
    assert "prompt is too long" in str(err.value)
    assert upstream.requests == []
