"""Provider compaction items through the proxy (SPEC Y7), with the official SDKs' own types.

Anthropic's server-side compaction (`compact_20260112`) answers with a `compaction` content
block (`anthropic.types.beta.BetaCompactionBlock`); OpenAI's with a `compaction` output item
(`openai.types.responses.ResponseCompactionItem`). Either one, once in a history, is stored as
the opaque checkpoint the projection starts from: sent back to its provider exactly as it came,
never summarised (contextfold compacts only what follows it), never shown to another provider.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.beta import BetaCompactionBlock
from openai.types.responses import ResponseCompactionItem

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.view.projection import project
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from tests.fakeserver import Reply, ToolCallSpec

WINDOW = 10_000
KEY = "sk-compaction-test-SECRET"
FACT = "the provider summary says: the deploy key is DK-4417"
A_TOOLS = [{"name": "read", "description": "read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
O_TOOLS = [{"type": "function", "name": "read", "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            "strict": False}]


def _start(upstream, db: str, url: str) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=url, windows={"*": WINDOW}, db=db)).start()


async def _stored(db: str) -> list[tuple[Any, list]]:
    store = await open_store(db)
    try:
        out = []
        for info in await store.list_sessions():
            branch = await store.load_full_branch(info.id)
            out.append((info, list(branch.nodes)))
        return out
    finally:
        await store.close()


def _without_cache(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_anthropic_compaction_block_round_trips_and_is_never_summarised_y7(upstream, db,
                                                                             stream):
    proxy = _start(upstream, db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Task: read every file. " + "early detail " * 300}]
    block: dict[str, Any] | None = None
    try:
        for r in range(16):
            upstream.enqueue(Reply(text=f"batch {r}", tool_calls=(
                ToolCallSpec("read", {"path": f"a{r}.py"}, id=f"toolu_{r}"),),
                compaction=FACT if r == 0 else None), kind="chat")
            kwargs = dict(model="local-model", max_tokens=600, tools=A_TOOLS,
                          messages=messages, betas=["compact-2026-01-12"],
                          context_management={"edits": [{"type": "compact_20260112"}]})
            if stream:
                with client.beta.messages.stream(**kwargs) as s:
                    reply = s.get_final_message()
            else:
                reply = client.beta.messages.create(**kwargs)
            if r == 0:
                assert isinstance(reply.content[0], BetaCompactionBlock)  # the SDK's own type
                assert reply.content[0].content == FACT
                block = reply.content[0].model_dump(exclude_none=True)
            content = [b.model_dump(exclude_none=True) for b in reply.content]
            messages.append({"role": "assistant", "content": content})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": "x = 1\n" * 180}
                for b in content if b["type"] == "tool_use"]})
    finally:
        proxy.stop()
    assert block is not None
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 16 and not upstream.overflowed and not upstream.rejected
    later = chats[1:]
    for r in later:
        first = r.body["messages"][0]
        # The block, exactly as the API returned it, opens every later request (Y7) ...
        assert first["role"] == "assistant" and _without_cache(first["content"][0]) == block
        # ... and what it compacted is never sent again.
        assert "early detail" not in json.dumps(r.body["messages"])
    # contextfold compacted what followed it: its checkpoint comes right after the block.
    with_cp = [r for r in later if "[contextfold checkpoint]" in json.dumps(r.body["messages"])]
    assert with_cp, "contextfold never compacted the rounds after the provider's compaction"
    assert "[contextfold checkpoint]" in json.dumps(with_cp[-1].body["messages"][1])
    (_info, nodes), = asyncio.run(_stored(db))
    cps = [n.checkpoint for n in nodes if n.checkpoint is not None]
    assert cps[0].summarizer == "provider:anthropic" and cps[0].summary == ""
    own = [c for c in cps if not c.summarizer.startswith("provider:")]
    def compaction_parts(c):
        return [p for m in c.provider_base for p in m.parts if p.type == "provider_compaction"]

    # Every later checkpoint carries the block on, unchanged (its folded calls left out, K1).
    assert own and all(compaction_parts(c) == compaction_parts(cps[0]) for c in own)
    assert compaction_parts(cps[0])[0].data == block
    for c in cps:  # never summarised: the provider's text is in no summary
        assert "DK-4417" not in c.summary and block["encrypted_content"] not in c.summary
    # Never shown to another provider: an export for OpenAI has no trace of the block.
    from contextfold.core.values.tree import Branch
    branch = Branch(nodes=tuple(nodes))
    assert block["encrypted_content"] not in json.dumps(to_openai(project(branch)).messages)
    assert block["encrypted_content"] not in json.dumps(to_anthropic(project(branch)).messages)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_openai_compaction_item_round_trips_and_is_never_summarised_y7(upstream, db,
                                                                         stream):
    proxy = _start(upstream, db, upstream.openai_url)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}]},
        {"role": "user", "content": "Task: read every file and report."}]
    compaction: dict[str, Any] | None = None
    try:
        for r in range(16):
            upstream.enqueue(Reply(text=f"batch {r}", tool_calls=(
                ToolCallSpec("read", {"path": f"f{r}.py"}, id=f"call_{r}"),),
                compaction=FACT if r == 0 else None), kind="chat")
            kwargs = dict(model="local-model", input=items, tools=O_TOOLS,
                          max_output_tokens=600)
            if stream:
                with oa.responses.stream(**kwargs) as events:
                    response = events.get_final_response()
            else:
                response = oa.responses.create(**kwargs)
            if r == 0:
                assert isinstance(response.output[0], ResponseCompactionItem)  # SDK's type
                compaction = response.output[0].model_dump(exclude_none=True)
            output = [o.model_dump(exclude_none=True) for o in response.output]
            items.extend(output)
            items += [{"type": "function_call_output", "call_id": o["call_id"],
                       "output": "def f(): pass\n" * 200}
                      for o in output if o["type"] == "function_call"]
    finally:
        proxy.stop()
    assert compaction is not None and compaction["encrypted_content"].startswith("gAAAA")
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == 16 and not upstream.overflowed and not upstream.rejected
    for r in chats[1:]:
        sent = r.body["input"]
        # The item exactly as it came, with the items its window kept before it (Y7).
        at = sent.index(compaction)
        assert sent[0] == items[0] and at >= 1
        # A contextfold checkpoint, when there is one, comes after it.
        texts = [json.dumps(i) for i in sent]
        cp = [k for k, t in enumerate(texts) if "[contextfold checkpoint]" in t]
        assert all(k > at for k in cp)
    assert any("[contextfold checkpoint]" in json.dumps(r.body["input"]) for r in chats)
    (_info, nodes), = asyncio.run(_stored(db))
    cps = [n.checkpoint for n in nodes if n.checkpoint is not None]
    assert cps[0].summarizer == "provider:openai"
    assert all(c.provider == "openai" for c in cps)
    for c in cps:
        assert compaction["encrypted_content"] not in c.summary
