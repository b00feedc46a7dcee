"""What the proxy renders itself (SPEC V1, Y2, Y4): with masking on, old tool results are
forwarded as placeholders written by `core.render.export`, the one writer of contextfold's requests,
and every message the projection did not change is the client's own JSON."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from contextfold.core.models.budget import CompactionSettings
from contextfold.core.view.masking import MASK_MARKER
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from tests.fakeserver import Reply, ToolCallSpec, fake_server

WINDOW = 12_000
MASKING = CompactionSettings(masking="always")


@pytest.fixture
def upstream() -> Iterator:
    with fake_server(context_window=WINDOW) as fake:
        yield fake


def proxy_for(url: str, tmp_path: Path) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=url, windows={"*": WINDOW}, settings=MASKING,
                                   db=f"sqlite:///{tmp_path / 'proxy.db'}")).start()


def result_text(r: int) -> str:
    return f"module_{r}.py contents\n" + "def handler(event): return event\n" * 60


def masked(messages: list[dict]) -> list[dict]:
    """The forwarded messages holding a masked tool result (not the checkpoint, whose note
    names the marker too)."""
    return [m for m in messages if MASK_MARKER in json.dumps(m)
            and "[contextfold checkpoint]" not in json.dumps(m)]


def masking_requests(upstream) -> list:
    """The upstream's chat requests that held a masked result; all were valid and fitted."""
    assert not upstream.rejected and not upstream.overflowed
    chats = [r for r in upstream.requests if not r.is_summary]
    with_masks = [r for r in chats if masked(r.body["messages"])]
    assert with_masks, "the session never masked: the test would prove nothing"
    return with_masks


def test_masked_openai_tool_results_are_written_by_the_export_v1_y4(upstream, tmp_path):
    proxy = proxy_for(upstream.openai_url, tmp_path)
    try:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        messages: list[dict] = [{"role": "user", "content": "Read every module."}]
        for r in range(24):
            upstream.enqueue(Reply(text=f"reading {r}", tool_calls=(
                ToolCallSpec("read", {"path": f"module_{r}.py"}, id=f"call_{r}"),)),
                kind="chat")
            reply = client.chat.completions.create(model="local-model", max_tokens=300,
                                                   messages=messages)
            msg = reply.choices[0].message
            messages.append({"role": "assistant", "content": msg.content,
                             "tool_calls": [c.model_dump() for c in msg.tool_calls]})
            messages.append({"role": "tool", "tool_call_id": f"call_{r}",
                             "content": result_text(r)})
    finally:
        proxy.stop()
    with_masks = masking_requests(upstream)
    for request in with_masks:
        sent = request.body["messages"]
        for m in masked(sent):
            # Exactly the shape `to_openai` writes for a tool message, nothing else.
            assert set(m) == {"role", "tool_call_id", "content"} and m["role"] == "tool"
            assert m["content"].startswith(MASK_MARKER)
        # Every other message is the client's own, byte for byte (Y2).
        own = [json.dumps(m, sort_keys=True) for m in messages]
        for m in sent:
            if not masked([m]) and "[contextfold checkpoint]" not in json.dumps(m):
                assert json.dumps(m, sort_keys=True) in own
    # Y4: between two compactions a placeholder is forwarded byte for byte the same.
    stable = 0
    for a, b in itertools.pairwise(with_masks):
        if a.body["messages"][0] != b.body["messages"][0]:
            continue  # a new checkpoint in between
        later = {m["tool_call_id"]: m for m in masked(b.body["messages"])}
        for m in masked(a.body["messages"]):
            assert json.dumps(later[m["tool_call_id"]]) == json.dumps(m)
            stable += 1
    assert stable


def test_masked_anthropic_tool_results_are_written_by_the_export_v1_y4(upstream, tmp_path):
    proxy = proxy_for(upstream.base_url, tmp_path)
    try:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
        messages: list[dict] = [{"role": "user", "content": "Read every module."}]
        for r in range(24):
            upstream.enqueue(Reply(text=f"reading {r}", tool_calls=(
                ToolCallSpec("read", {"path": f"module_{r}.py"}, id=f"toolu_{r}"),)),
                kind="chat")
            reply = client.messages.create(model="local-model", max_tokens=300,
                                           messages=messages)
            messages.append({"role": "assistant",
                             "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{r}",
                 "content": result_text(r), "is_error": r == 0}]})
    finally:
        proxy.stop()
    with_masks = masking_requests(upstream)
    errors = 0
    for request in with_masks:
        for m in masked(request.body["messages"]):
            assert m["role"] == "user"
            (block,) = m["content"]
            assert block["type"] == "tool_result" and MASK_MARKER in block["content"]
            if block["tool_use_id"] == "toolu_0":  # the export's wording of an error result
                assert block["is_error"] is True
                assert block["content"].startswith("[tool error]\n" + MASK_MARKER)
                errors += 1
            else:
                assert "is_error" not in block and block["content"].startswith(MASK_MARKER)
    assert errors  # the errored result was masked too, and said so as the export says it
