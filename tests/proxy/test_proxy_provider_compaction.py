"""The providers' newest compaction through the proxy (SPEC Y7), with the official SDKs.

Anthropic's on-demand compaction (beta `compact-2026-09-04`: a request with a top-level
`compaction` answered by one signed `compaction` block, `stop_reason: "compaction"`), its
background form (the conversation goes on while the block is written, then the client swaps
it in for exactly the messages it had sent), and OpenAI's in-call compaction
(`context_management: [{"type": "compaction", "compact_threshold": N}]` in an ordinary
`/responses` call, an encrypted `compaction` item in the output and the stream), each driven
by the SDK against the local fake provider (`tests/fakeserver/compaction.py`), which checks
the signature of every block sent back. The block or item is passed through, stored as the
opaque checkpoint the session goes on from (one session, not a fork), echoed back exactly,
and never shown to another provider.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types.beta import BetaCompactionBlock
from openai.types.responses import ResponseCompactionItem

from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.values.messages import ProviderCompactionPart
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import project
from contextfold.proxy import ProxyConfig
from contextfold.proxy.provider_compaction import asks_provider_compaction, compacts_now
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from contextfold.wire import openai_responses
from contextfold.wire.anthropic_messages import render_provider_base
from tests.fakeserver import Reply

WINDOW = 60_000  # room enough: what compacts here is the provider, never the window
KEY = "sk-provider-compaction-SECRET"
BETA = "compact-2026-09-04"
SYSTEM = "You help design a recipe app's data model. Keep answers short."


def _start(db: str, url: str) -> ProxyThread:
    return ProxyThread(ProxyConfig(upstream=url, windows={"*": WINDOW}, db=db)).start()


async def _stored(db: str) -> list[tuple[Any, Branch, int]]:
    """Each session with its current branch and how many nodes its tree holds."""
    store = await open_store(db)
    try:
        out = []
        for info in await store.list_sessions():
            full = await store.load_full_branch(info.id)
            out.append((info, Branch(nodes=tuple(full.nodes)),
                        len(await store.load_tree(info.id))))
        return out
    finally:
        await store.close()


def _same_fields(sent: dict[str, Any], returned: dict[str, Any]) -> None:
    """The block or item as sent upstream is the one returned: every field, exactly (a cache
    breakpoint the proxy adds on Anthropic's block is the request's, not the block's)."""
    sent = {k: v for k, v in sent.items() if k != "cache_control"}
    assert sent.keys() == returned.keys()
    for name, value in returned.items():
        assert json.dumps(sent[name], ensure_ascii=False) == \
            json.dumps(value, ensure_ascii=False), name


def _turn(client: anthropic.Anthropic, history: list[Any], stream: bool, **extra: Any) -> Any:
    kwargs = dict(model="claude-opus-4-6", max_tokens=4096, system=SYSTEM, betas=[BETA],
                  messages=history, **extra)
    if stream:
        with client.beta.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.beta.messages.create(**kwargs)


def _converse(client: anthropic.Anthropic, upstream: Any, history: list[Any],
              questions: list[str], answer: str, stream: bool = False) -> None:
    """Ask each of `questions` in turn (the fake answers `answer` with its number `{n}`), the
    replies appended to `history` as the client keeps it."""
    for n, question in enumerate(questions):
        upstream.enqueue(Reply(text=answer.format(n=n)), kind="chat")
        history.append({"role": "user", "content": question})
        history.append({"role": "assistant", "content": _turn(client, history, stream).content})


QUESTIONS = ["What are the main entities of the data model?",
             "Which fields should Recipe have?",
             "Which fields should Ingredient have?",
             "Which fields should Step have?",
             "Which indexes should these tables have?",
             "Which fields should be required?"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_on_demand_compaction_is_passed_through_echoed_and_continues_y7(
        upstream, db, stream):
    proxy = _start(db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    history: list[Any] = []
    try:
        _converse(client, upstream, history, QUESTIONS[:3], "answer {n}: Recipe, Ingredient, Step.",
                  stream)
        # The compaction request: the conversation as it stands, with `compaction`.
        summary = _turn(client, history, stream, compaction={"type": "summarize"})
        assert summary.stop_reason == "compaction"
        block = summary.content[0]
        assert isinstance(block, BetaCompactionBlock) and len(summary.content) == 1
        assert block.signature and block.content and QUESTIONS[0] in block.content
        returned = block.model_dump(exclude_none=True)
        assert returned.keys() == {"type", "content", "signature", "tool_changes"}
        asked = upstream.requests[-1].body
        # Passed through: the parameter as sent, the messages as the client had them.
        # (the fake refuses it without the `compact-2026-09-04` header: that went on too).
        assert asked["compaction"] == {"type": "summarize"} and "context_management" not in asked
        assert asked["system"] == SYSTEM and asked["max_tokens"] == 4096
        assert [m["role"] for m in asked["messages"]] == [m["role"] for m in history]
        # The swap: the block in place of every message it summarises, then go on.
        history = [{"role": "assistant", "content": summary.content}]
        _converse(client, upstream, history, QUESTIONS[3:], "afterwards {n}", stream)
    finally:
        proxy.stop()
    assert not upstream.rejected and not upstream.overflowed  # every signature held
    later = [r for r in upstream.requests if not r.is_summary][-3:]
    for r in later:
        first = r.body["messages"][0]
        # The signed block, exactly as the API returned it, opens every later request ...
        assert first["role"] == "assistant" and len(first["content"]) == 1
        _same_fields(first["content"][0], returned)
        # ... and no message it summarised is sent again (contextfold's recall block, L5,
        # may quote one, inside the latest user turn, never as the message itself).
        for m in r.body["messages"][1:]:
            assert m["content"] not in QUESTIONS[:3]
            assert m["role"] == "user" or "answer" not in json.dumps(m)
    # One session, continued from the provider's checkpoint (not a fork, not a new one).
    (_info, branch, _size), = asyncio.run(_stored(db))
    texts = [n.message.text for n in branch.nodes if n.message is not None]
    assert QUESTIONS[0] in texts[0] and QUESTIONS[-1] in " ".join(texts)
    kept = [n.message for n in branch.nodes if n.message is not None and any(
        isinstance(p, ProviderCompactionPart) for p in n.message.parts)]
    # The compaction answer is stored with what its call cost: zero at the top, the
    # summarising call in `usage.iterations` (E1, Q4).
    assert len(kept) == 1 and kept[0].usage is not None
    assert kept[0].usage.input > 0 and kept[0].usage.output > 0
    cps = [n.checkpoint for n in branch.nodes if n.checkpoint is not None]
    assert [c.summarizer for c in cps] == ["provider:anthropic"] and cps[0].summary == ""
    stored = [p for m in cps[0].provider_base for p in m.parts
              if isinstance(p, ProviderCompactionPart)]
    assert [p.data for p in stored] == [returned]
    # The session's projection starts from it; contextfold summarised nothing itself.
    projection = project(branch)
    assert projection.summary is cps[0] or projection.summary == cps[0]
    assert not upstream.summary_requests


def test_anthropic_background_compaction_swaps_in_for_exactly_the_messages_sent_y7(
        upstream, db):
    proxy = _start(db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    history: list[Any] = []
    try:
        _converse(client, upstream, history, QUESTIONS[:2], "answer {n}")
        sent = len(history)
        with ThreadPoolExecutor(max_workers=1) as pool:
            # The compaction runs while the conversation goes on, on its full history.
            pending = pool.submit(_turn, client, list(history), False,
                                  compaction={"type": "summarize"})
            _converse(client, upstream, history, QUESTIONS[2:4], "meanwhile {n}")
            summary = pending.result(timeout=30)
        assert summary.stop_reason == "compaction"
        returned = summary.content[0].model_dump(exclude_none=True)
        # Drop exactly the messages the compaction request held; what came since stays.
        history[:sent] = [{"role": "assistant", "content": summary.content}]
        upstream.enqueue(Reply(text="after the swap"), kind="chat")
        history.append({"role": "user", "content": QUESTIONS[4]})
        _turn(client, history, False)
    finally:
        proxy.stop()
    assert not upstream.rejected and not upstream.overflowed
    swapped = upstream.requests[-1].body["messages"]
    _same_fields(swapped[0]["content"][0], returned)
    # The block, then the turns appended while it was written, then the new question.
    users = [json.dumps(m["content"]) for m in swapped[1::2]]
    assert len(swapped) == 6 and [q in u for q, u in zip(QUESTIONS[2:5], users,
                                                         strict=True)] == [True] * 3
    assert [m["role"] for m in swapped[1:]] == ["user", "assistant"] * 2 + ["user"]
    assert all(q not in u for q in QUESTIONS[:2] for u in users[:2])
    (_info, branch, _size), = asyncio.run(_stored(db))
    cps = [n.checkpoint for n in branch.nodes if n.checkpoint is not None]
    assert [c.summarizer for c in cps] == ["provider:anthropic"]
    assert [p.data for m in cps[0].provider_base for p in m.parts] == [returned]
    # The branch goes on from the block: the messages it summarised, the block, the turns
    # since, the new question.
    msgs = [n.message for n in branch.nodes if n.message is not None]
    at = next(i for i, m in enumerate(msgs) if any(
        isinstance(p, ProviderCompactionPart) for p in m.parts))
    assert [m.text for m in msgs[:at]] == [QUESTIONS[0], "answer 0", QUESTIONS[1], "answer 1"]
    assert [m.text for m in msgs[at + 1:]] == [QUESTIONS[2], "meanwhile 0", QUESTIONS[3],
                                               "meanwhile 1", QUESTIONS[4], "after the swap"]


def test_an_on_demand_compaction_without_a_block_leaves_the_conversation_as_it_was_y7(
        upstream, db):
    proxy = _start(db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    history: list[Any] = []
    try:
        _converse(client, upstream, history, QUESTIONS[:2], "answer {n}")
        cut = client.beta.messages.create(model="claude-opus-4-6", max_tokens=5,
                                          system=SYSTEM, betas=[BETA], messages=history,
                                          compaction={"type": "summarize"})
        assert cut.stop_reason == "max_tokens" and cut.content == []
        upstream.enqueue(Reply(text="answer 2"), kind="chat")
        history.append({"role": "user", "content": QUESTIONS[2]})
        _turn(client, history, False)
    finally:
        proxy.stop()
    # No empty turn was stored for it: the branch is the conversation the client holds.
    (_info, branch, size), = asyncio.run(_stored(db))
    texts = [n.message.text for n in branch.nodes if n.message is not None]
    assert texts == [QUESTIONS[0], "answer 0", QUESTIONS[1], "answer 1", QUESTIONS[2],
                     "answer 2"]
    assert size == len(branch.nodes)  # nothing beside it in the tree either


def _oa_items(output: list[Any]) -> list[dict[str, Any]]:
    return [o.model_dump(exclude_none=True) for o in output]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_in_call_compaction_item_is_stored_and_dropping_before_it_continues_y7(
        upstream, db, stream):
    proxy = _start(db, upstream.openai_url)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    managed = [{"type": "compaction", "compact_threshold": 400}]
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}]}]
    compactions: list[dict[str, Any]] = []  # each new item, as returned
    expected: list[dict[str, Any] | None] = []  # the newest one each request should carry
    try:
        for n in range(8):
            upstream.enqueue(Reply(text=f"step {n} done. " + "detail " * 60), kind="chat")
            items.append({"role": "user", "content": f"Step {n}: go on with task {n}."})
            expected.append(compactions[-1] if compactions else None)
            kwargs = dict(model="gpt-5.5", input=items, context_management=managed,
                          max_output_tokens=600)
            if stream:
                with oa.responses.stream(**kwargs) as events:
                    kinds = [e.type for e in events]
                    response = events.get_final_response()
                assert "response.output_item.done" in kinds
                # The compacting event, relayed as it came (the SDK's own event type).
                assert ("response.compaction.compacting" in kinds) == isinstance(
                    response.output[0], ResponseCompactionItem)
            else:
                response = oa.responses.create(**kwargs)
            output = _oa_items(response.output)
            items.extend(output)
            assert upstream.requests[-1].body["context_management"] == managed  # passed on
            if isinstance(response.output[0], ResponseCompactionItem):  # the SDK's own type
                compactions.append(output[0])
                # The guide: drop the items before the newest compaction item.
                at = items.index(output[0])
                items = [items[0], *items[at:]]
    finally:
        proxy.stop()
    assert compactions, "the threshold was never reached"
    assert not upstream.rejected and not upstream.overflowed
    chats = [r for r in upstream.requests if not r.is_summary]
    assert len(chats) == len(expected) == 8 and expected.count(None) < 8
    for r, newest in zip(chats, expected, strict=True):
        sent = r.body["input"]
        found = [i for i in sent if i.get("type") == "compaction"]
        if newest is None:
            assert not found
            continue
        # The newest encrypted item, exactly, first after the developer prompt: nothing of
        # what it compacted goes out again.
        assert len(found) == 1 and sent[0] == items[0] and sent[1] is not None
        _same_fields(sent[1], newest)
        assert "Step 0:" not in json.dumps(sent)
    # One session, from the first step on, continued after each item (not a new one).
    (_info, branch, _size), = asyncio.run(_stored(db))
    texts = " ".join(n.message.text for n in branch.nodes if n.message is not None)
    assert "Step 0:" in texts and "Step 7:" in texts
    cps = [n.checkpoint for n in branch.nodes if n.checkpoint is not None]
    assert cps and all(c.summarizer == "provider:openai" for c in cps)
    base = [p for m in cps[-1].provider_base for p in m.parts
            if isinstance(p, ProviderCompactionPart)]
    assert [p.data for p in base] == [expected[-1]]  # the newest a request carried
    assert not upstream.summary_requests  # contextfold left the compacting to the provider


def test_a_provider_block_is_never_shown_to_another_provider_y7(upstream, db):
    """What does happen: another protocol is another conversation scope, so the block can
    never reach it through the proxy; an export or projection of the session for another
    provider leaves the block out and starts from the messages after it (the span the
    provider compacted is represented by nothing of that provider's)."""
    proxy = _start(db, upstream.base_url)
    client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
    oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    try:
        upstream.enqueue(Reply(text="Recipe, Ingredient, Step."), kind="chat")
        history: list[Any] = [{"role": "user", "content": QUESTIONS[0]}]
        history.append({"role": "assistant",
                        "content": _turn(client, history, False).content})
        summary = _turn(client, history, False, compaction={"type": "summarize"})
        block = summary.content[0].model_dump(exclude_none=True)
        history = [{"role": "assistant", "content": summary.content},
                   {"role": "user", "content": QUESTIONS[1]}]
        upstream.enqueue(Reply(text="title, servings"), kind="chat")
        _turn(client, history, False)
        # The same person goes on with another provider, through the same proxy.
        upstream.enqueue(Reply(text="from the other provider"), kind="chat")
        oa.chat.completions.create(model="gpt-5.5", messages=[
            {"role": "user", "content": QUESTIONS[0]},
            {"role": "assistant", "content": "Recipe, Ingredient, Step."},
            {"role": "user", "content": QUESTIONS[1]}])
    finally:
        proxy.stop()
    other = upstream.requests[-1]
    assert other.protocol == "openai"
    assert block["signature"] not in json.dumps(other.body)
    assert block["content"] not in json.dumps(other.body)
    sessions = asyncio.run(_stored(db))
    assert len(sessions) == 2  # another protocol: another scope, its own session
    (anth,) = [b for info, b, _ in sessions if any(
        isinstance(p, ProviderCompactionPart) for n in b.nodes if n.message is not None
        for p in n.message.parts)]
    projection = project(anth)
    for export in (to_openai, to_anthropic):
        text = json.dumps(export(projection).messages)
        assert block["signature"] not in text and block["content"] not in text
        assert QUESTIONS[1] in text and QUESTIONS[0] not in text
    base = projection.summary.provider_base if projection.summary is not None else ()
    assert base, "the session's projection starts from the provider's block"
    # Rendered for the Responses API, Anthropic's block is no item; for Anthropic, it is
    # the block itself.
    assert all(openai_responses.render_message(m) == [] for m in base)
    rendered = render_provider_base(base[0])
    assert rendered is not None
    _same_fields(rendered["content"][0], block)


@pytest.mark.parametrize(("protocol", "body", "asks", "now"), [
    ("anthropic", {"compaction": {"type": "summarize"}}, True, True),
    ("anthropic", {"context_management": {"edits": [{"type": "compact_20260112"}]}}, True,
     False),
    ("anthropic", {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
     False, False),  # context editing clears, it does not compact
    ("responses", {"context_management": [{"type": "compaction", "compact_threshold": 9}]},
     True, False),
    ("responses", {"compaction": {"type": "summarize"}}, False, False),
    ("openai", {"context_management": [{"type": "compaction"}]}, False, False),
    ("anthropic", {"messages": []}, False, False),
])
def test_which_requests_ask_the_provider_to_compact_y7(protocol, body, asks, now):
    assert asks_provider_compaction(protocol, body) is asks
    assert compacts_now(protocol, body) is now
