"""One reader of OpenAI Responses items (issue 39): the same items, fed through every public
path that reads them, are stored as the same messages.

The paths: the reader itself (`wire.openai_responses.read_input`), the proxy's Responses
endpoint (`POST /v1/responses` over real HTTP, the official `openai` SDK in front of the
scripted upstream), and the OpenAI Agents integration (`ContextfoldSession.add_items`, the
Agents SDK's own item types). Each case names what the one reader decides for it (the cases
where the proxy's reader and the integration's used to disagree: images, files, hosted tools,
provider compaction)."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from contextfold.core.models.catalog import capacity_for
from contextfold.core.values.messages import (
    FilePart,
    Message,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from contextfold.integrations.openai_agents import ContextfoldSession
from contextfold.integrations.responses_items import items_to_messages, message_items
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread
from contextfold.store import open_store
from contextfold.wire.openai_responses import HISTORY, read_input, render_message
from tests.fakeserver import Reply, fake_server

WINDOW = 32_000
KEY = "sk-one-reader-test-SECRET"
PDF = "data:application/pdf;base64,JVBERi0xLjQK"  # 9 bytes of a PDF header
PNG = "data:image/png;base64,iVBORw0KGgo="  # 8 bytes


def user(text: str, *extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}, *extra]}


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "id": f"msg_{zlib.crc32(text.encode())}",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def u(text: str, *files: FilePart) -> Message:
    return Message(role="user", parts=(TextPart(text=text), *files))


def a(*parts: Any) -> Message:
    return Message(role="assistant", parts=parts)


def tool(call_id: str, name: str, output: str, *files: FilePart) -> Message:
    return Message(role="tool", parts=(ToolResultPart(call_id=call_id, name=name,
                                                      output=output), *files))


WEB = {"type": "web_search_call", "id": "ws_1", "status": "completed",
       "action": {"type": "search", "query": "contextfold"}}
FILES = {"type": "file_search_call", "id": "fs_1", "status": "completed",
         "queries": ["deploy key"], "results": None}
COMPACTION = {"type": "compaction", "id": "cmp_1",
              "encrypted_content": "gAAAAB-opaque-provider-summary=="}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read",
        "arguments": '{"path": "a.py"}', "status": "completed"}

# name -> (items, the messages every path stores). Each case opens with its own user words,
# so the proxy keeps it a conversation of its own.
CASES: dict[str, tuple[list[dict[str, Any]], list[Message]]] = {
    # Images and files are references: name, type, size (never the bytes, R5), in the order
    # given, in a user message (the integration's reader made a 200-character data URL the
    # name of an image; the proxy's left `input_file` out).
    "message with text, image and file parts": (
        [user("case A: what is in these?",
              {"type": "input_image", "image_url": "https://example.com/shots/cat.png",
               "detail": "auto"},
              {"type": "input_image", "image_url": PNG, "detail": "low"},
              {"type": "input_image", "file_id": "file-img-9", "detail": "auto"},
              {"type": "input_file", "filename": "spec.pdf", "file_data": PDF},
              {"type": "input_file", "file_id": "file-abc"}),
         said("A cat, a pixel, a spec.")],
        [u("case A: what is in these?",
           FilePart(name="cat.png", media_type="image/png"),
           FilePart(name="image-3.png", media_type="image/png", size=8),
           FilePart(name="file-img-9", media_type="image/*"),
           FilePart(name="spec.pdf", media_type="application/pdf", size=9),
           FilePart(name="file-abc", media_type="application/*")),
         a(TextPart(text="A cat, a pixel, a spec."))]),
    # A call and the text before it are one reply (K1); the output names its call's tool;
    # an output given as parts is its text, and its images are references beside it (as a
    # Messages tool_result's are; the proxy's reader dropped them, the integration's wrote
    # "[image: ...]" into the text).
    "function_call and function_call_output": (
        [user("case B: read a.py and show the chart"), said("Reading."), CALL,
         {"type": "function_call_output", "call_id": "call_1",
          "output": [{"type": "input_text", "text": "def f(): pass"},
                     {"type": "input_image", "image_url": "https://example.com/chart.png"}]},
         said("It defines f.")],
        [u("case B: read a.py and show the chart"),
         a(TextPart(text="Reading."),
           ToolCallPart(id="call_1", name="read", input={"path": "a.py"})),
         tool("call_1", "read", "def f(): pass",
              FilePart(name="chart.png", media_type="image/png")),
         a(TextPart(text="It defines f."))]),
    # Reasoning opens a response; its encrypted content is its signature (R2: stored, never
    # summarised); a call's string output is the result as given.
    "reasoning": (
        [user("case C: think, then call"),
         {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-enc-reasoning==",
          "summary": [{"type": "summary_text", "text": "check the file first"}]},
         CALL, {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
         {"type": "reasoning", "id": "rs_2", "summary": []}, said("Done.")],
        [u("case C: think, then call"),
         a(ReasoningPart(text="check the file first", signature="gAAAA-enc-reasoning=="),
           ToolCallPart(id="call_1", name="read", input={"path": "a.py"})),
         tool("call_1", "read", "ok"),
         a(ReasoningPart(text=""), TextPart(text="Done."))]),
    # Hosted tools have no part: each is one assistant message naming the item, its fields
    # in key order (nothing dropped silently; the proxy forwards the item itself).
    "hosted tool calls": (
        [user("case D: search the web and my files"), WEB, FILES, said("Found both.")],
        [u("case D: search the web and my files"),
         a(TextPart(text='[web_search_call] {"action": {"query": "contextfold", "type": '
                         '"search"}, "status": "completed", "type": "web_search_call"}')),
         a(TextPart(text='[file_search_call] {"queries": ["deploy key"], "results": null, '
                         '"status": "completed", "type": "file_search_call"}')),
         a(TextPart(text="Found both."))]),
    # OpenAI's own compaction is the provider's checkpoint (Y7), held as it came; the model's
    # answer after it joins it (the integration's reader stored it as JSON text).
    "compaction item": (
        [user("case E: carry on after the provider's compaction"), COMPACTION,
         said("Continuing from the summary.")],
        [u("case E: carry on after the provider's compaction"),
         a(ProviderCompactionPart(provider="openai", data=COMPACTION),
           TextPart(text="Continuing from the summary."))]),
}




def case(name: str) -> tuple[list[dict[str, Any]], list[Message]]:
    """A case's items as a request sends them (ending on the user's turn, as a client's do),
    and the messages they are stored as."""
    items, expected = CASES[name]
    return [*items, user("your turn")], [*expected, u("your turn")]


@pytest.mark.parametrize("name", list(CASES))
def test_the_reader_reads_each_item_kind_once(name: str) -> None:
    items, expected = case(name)
    assert [g.message for g in read_input(items)] == expected
    assert items_to_messages(items) == expected  # the integration calls the same reader


def test_a_tool_outputs_image_is_named_when_the_integration_sends_it_again() -> None:
    """R5: the bytes are gone; the model is told what was there."""
    _, expected = case("function_call and function_call_output")
    [item] = message_items(expected[2])
    assert item["output"] == "def f(): pass\n[attached file: chart.png (image/png)]"
    [compaction, text] = message_items(case("compaction item")[1][1])
    assert compaction == COMPACTION and text["content"] == "Continuing from the summary."


def test_one_writer_in_two_forms() -> None:  # R2 R5 Y7
    """The proxy (`WIRE`) and the Agents SDK session (`HISTORY`) write through the one
    writer; what differs is the form, each difference named in `ItemForm`."""
    image = FilePart(name="chart.png", media_type="image/png", size=10)
    failed = Message(role="tool", parts=(ToolResultPart(call_id="c1", name="run",
                                                        output="boom", is_error=True), image))
    assert render_message(failed) == [
        {"type": "function_call_output", "call_id": "c1", "output": "boom"}]
    assert render_message(failed, form=HISTORY) == [
        {"type": "function_call_output", "call_id": "c1",
         "output": "[tool error] boom\n[attached file: chart.png (image/png)]"}]
    system = Message(role="system", parts=(TextPart(text="be brief"),))
    assert render_message(system) == [{"type": "message", "role": "developer", "content": [
        {"type": "input_text", "text": "be brief"}]}]
    assert render_message(system, form=HISTORY) == [{"role": "system", "content": "be brief"}]
    reply = Message(role="assistant", status="aborted", parts=(
        ReasoningPart(text="think", signature="enc"), TextPart(text="one"),
        TextPart(text="two"), ToolCallPart(id="c2", name="run", input={"x": 1})))
    call = {"type": "function_call", "call_id": "c2", "name": "run", "arguments": '{"x": 1}'}
    assert render_message(reply) == [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}],
         "encrypted_content": "enc"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "one"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "two"}]}, call]
    # HISTORY: the reply's text as one easy message; no reasoning; an aborted reply's
    # calls never got results, so they are not sent.
    assert render_message(reply, form=HISTORY) == [{"role": "assistant", "content": "one\ntwo"}]
    assert message_items(reply.model_copy(update={"status": "complete"})) == [
        {"role": "assistant", "content": "one\ntwo"}, call]


# --------------------------------------------------------------------------- every path


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """The proxy's Responses path, each case sent once; yields the store's URL."""
    db = f"sqlite:///{tmp_path_factory.mktemp('one-reader') / 'proxy.db'}"
    with fake_server(context_window=WINDOW, api_key=KEY) as upstream:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.openai_url,
                                        windows={"local-model": WINDOW}, db=db)).start()
        try:
            oa = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
            for name in CASES:
                items = case(name)[0]
                upstream.enqueue(Reply(text="noted"), kind="chat")
                response = oa.responses.create(model="local-model", input=items)  # type: ignore[arg-type]
                if COMPACTION not in items:  # (the projection starts at one, Y7)
                    assert upstream.requests[-1].body["input"] == items  # as sent (Y2)
                # The client resends it all with the reply and a new turn: the same
                # conversation, matched by content (Y1), not a second one.
                upstream.enqueue(Reply(text="noted again"), kind="chat")
                output = [o.model_dump(exclude_none=True) for o in response.output]
                oa.responses.create(model="local-model",
                                    input=[*items, *output, user("and again")])  # type: ignore[list-item]
        finally:
            proxy.stop()
        yield db, upstream


async def _stored(db: str) -> dict[str, list[Message]]:
    """Each stored session's messages, by the text of its first message."""
    store = await open_store(db)
    try:
        out: dict[str, list[Message]] = {}
        for info in await store.list_sessions():
            branch = await store.load_full_branch(info.id)
            messages = [n.message for n in branch.nodes if n.message is not None]
            out[messages[0].text] = messages
        return out
    finally:
        await store.close()


def _as_read(message: Message) -> Message:
    """A stored message as a reader makes it (what a face adds on recording left out)."""
    return Message(role=message.role, parts=message.parts)


@pytest.mark.parametrize("name", list(CASES))
def test_the_proxy_stores_what_the_reader_reads(proxied, name: str) -> None:
    db, _ = proxied
    expected = case(name)[1]
    sessions = asyncio.run(_stored(db))
    assert len(sessions) == len(CASES)  # each case one conversation (Y1), resent or not
    stored = sessions[expected[0].text]
    assert [_as_read(m) for m in stored[:len(expected)]] == expected
    assert [m.text for m in stored[len(expected):]] == ["noted", "and again", "noted again"]


@pytest.mark.parametrize("name", list(CASES))
async def test_the_agents_session_stores_what_the_proxy_stores(proxied, tmp_path: Path,
                                                               name: str) -> None:
    items, expected = case(name)
    store = await open_store(f"sqlite:///{tmp_path / 'agents.db'}")
    try:
        session = await ContextfoldSession.open(
            store, capacity=capacity_for("gpt-4o-mini", context_window=WINDOW),
            background=False)
        await session.add_items([dict(i) for i in items])
        branch = await store.load_full_branch(session.session_id)
        stored = [_as_read(n.message) for n in branch.nodes if n.message is not None]
    finally:
        await store.close()
    assert stored == expected
    proxy_stored = (await _stored(proxied[0]))[expected[0].text][:len(expected)]
    assert stored == [_as_read(m) for m in proxy_stored]
