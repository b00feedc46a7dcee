"""Shared helpers for the runtime tests (no tests here): models on the fake provider for both
wire protocols, a store per test, request checks, and a scripted Zotero research agent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contextfold.core.models.budget import ModelCapacity
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.values.messages import (
    AnnotationPart,
    Message,
    PdfPagePart,
    ToolCallPart,
    ToolResultPart,
    ZoteroItemPart,
)
from contextfold.providers import NO_RETRY, AnthropicModel, ChatModel, OpenAICompatModel
from contextfold.store import open_store
from tests.fakeserver import RecordedRequest, Reply, ToolCallSpec, server_fixture

PROTOCOLS = ("openai", "anthropic")
FIXTURES = Path(__file__).parents[1] / "fixtures"


_OPEN_MODELS: list[Any] = []


def chat_model(server: Any, protocol: str, name: str = "fake-model", **options: Any) -> ChatModel:
    """A real adapter (official SDK, real HTTP) pointed at the fake provider."""
    options.setdefault("retry", NO_RETRY)
    model: Any
    if protocol == "openai":
        model = OpenAICompatModel(name, base_url=server.openai_url, api_key="test-key",
                                  provider="openai-compatible", **options)
    else:
        model = AnthropicModel(name, base_url=server.anthropic_url, api_key="test-key",
                               **options)
    _OPEN_MODELS.append(model)
    return model


def models_closer() -> Any:
    """An autouse fixture closing every model's HTTP client inside the test's event loop:
    `close_models = models_closer()` at module level of a test file."""

    @pytest.fixture(autouse=True)
    async def _close_models() -> AsyncIterator[None]:
        yield
        while _OPEN_MODELS:
            await _OPEN_MODELS.pop().aclose()

    return _close_models


def capacity(window: int, max_output: int = 8_192, name: str | None = None) -> ModelCapacity:
    return ModelCapacity(model=name or f"fake-{window // 1000}k", context_window=window,
                         max_output=max_output)


def store_fixture() -> Any:
    """A fixture giving each test a fresh SQLite store in its tmp dir:
    `store = store_fixture()` at module level of a test file."""

    @pytest.fixture
    async def _store(tmp_path: Path) -> AsyncIterator[Any]:
        async with await open_store(f"sqlite:///{tmp_path / 'sessions.db'}") as s:
            yield s

    return _store


def runtime_fixtures() -> tuple[Any, Any, Any]:
    """The fixtures of a test file that runs conversations on the fake provider, as
    `store, close_models, fake = runtime_fixtures()` at its module level: a fresh store per
    test, every model's HTTP client closed in the test's loop (autouse), and the fake
    provider (one per module, reset before every test)."""
    return store_fixture(), models_closer(), server_fixture()


def request_problems(request: RecordedRequest) -> list[str]:
    """What the independent validity oracle finds wrong with a recorded request body."""
    if request.protocol == "openai":
        return openai_problems([m for m in request.messages if m.get("role") != "system"])
    return anthropic_problems(request.messages)


def assert_requests_fit(server: Any, window: int) -> None:
    """Every recorded request fitted the window (prompt + max_tokens, the server's own
    tokenizer), was answered 200, and was a valid tool sequence."""
    assert server.requests, "no request reached the server"
    for r in server.requests:
        assert r.prompt_tokens + (r.max_tokens or 0) <= window, (r.prompt_tokens, r.max_tokens)
        assert r.status == 200, (r.status, r.body.get("messages", [])[-1:])
        assert request_problems(r) == []


def chat_requests(server: Any) -> list[RecordedRequest]:
    return [r for r in server.requests if not r.is_summary]


# --------------------------------------------------------------------------- research agent


def zotero_items() -> list[dict[str, Any]]:
    return [entry["data"] for entry in
            json.loads((FIXTURES / "zotero" / "items_doc.json").read_text())]


def _citation(item: dict[str, Any]) -> str:
    names = [c.get("lastName") or c.get("name") or "" for c in item.get("creators", [])]
    year = next((t for t in item.get("date", "").split() if t.isdigit() and len(t) == 4), "n.d.")
    return f"({' and '.join(n for n in names[:2] if n) or 'Anon.'} {year})"


def _key(prefix: str, n: int) -> str:
    """A Zotero-shaped key (8 upper-case letters/digits), deterministic."""
    alphabet = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"
    digits = []
    for _ in range(8 - len(prefix)):
        digits.append(alphabet[n % len(alphabet)])
        n //= len(alphabet)
    return prefix + "".join(reversed(digits))


@dataclass
class ResearchAgent:
    """A scripted research agent: per turn it searches Zotero, reads an item's metadata and a
    PDF page, and (every `annotate_every` turns) writes an annotation. The fake model makes
    the tool calls (queued replies); `run_tools` plays Zotero with real item records."""

    items: list[dict[str, Any]] = field(default_factory=zotero_items)
    annotate_every: int = 4
    page_chars: int = 1_400
    used_keys: set[str] = field(default_factory=set)
    tool_rounds: int = 0

    def item(self, turn: int) -> dict[str, Any]:
        return self.items[turn % len(self.items)]

    def attachment_key(self, item: dict[str, Any]) -> str:
        return _key("A", sum(ord(c) for c in item["key"]))

    def question(self, turn: int) -> str:
        item = self.item(turn)
        return (f"Turn {turn}: find '{item.get('title', '')[:60]}' in the library, read page "
                f"{turn % 9 + 1} of its PDF and tell me what it says about the method.")

    def script(self, server: Any, turn: int) -> None:
        """Queue the fake model's replies for one turn (chat requests only)."""
        item = self.item(turn)
        key = item["key"]
        page = turn % 9 + 1
        replies = [
            Reply(tool_calls=(ToolCallSpec("zotero_search",
                                           {"query": item.get("title", "")[:40]}),)),
            # Metadata and the page in parallel, as agents do when calls are independent.
            Reply(tool_calls=(
                ToolCallSpec("zotero_get_item", {"item_key": key}),
                ToolCallSpec("read_pdf_page", {"attachment_key": self.attachment_key(item),
                                               "page": page}),
            )),
        ]
        if turn % self.annotate_every == 0:
            replies.append(Reply(tool_calls=(ToolCallSpec("zotero_create_annotation", {
                "parent_item_key": self.attachment_key(item), "page": page,
                "text": f"method claim on page {page}"}),)))
        replies.append(Reply(text=f"Item {key} {_citation(item)}, page {page}: the method is "
                                  f"described as deliberate. Noted for turn {turn}."))
        server.enqueue(*replies, kind="chat")

    async def run_tools(self, calls: Sequence[ToolCallPart]) -> list[Message]:
        out = []
        for call in calls:
            self.tool_rounds += 1
            out.append(self._run(call))
        return out

    def _run(self, call: ToolCallPart) -> Message:
        args = call.input if isinstance(call.input, dict) else {}
        by_key = {i["key"]: i for i in self.items}
        extra: list[Any] = []
        if call.name == "zotero_search":
            query = str(args.get("query", "")).lower()
            hits = [i for i in self.items if query[:20] in i.get("title", "").lower()][:3]
            output = json.dumps([{"key": i["key"], "title": i.get("title", "")} for i in hits])
            self.used_keys.update(i["key"] for i in hits)
        elif call.name == "zotero_get_item":
            item = by_key[args["item_key"]]
            output = json.dumps(item, ensure_ascii=False)
            extra.append(ZoteroItemPart(item_key=item["key"], title=item.get("title", ""),
                                        citation=_citation(item)))
            self.used_keys.add(item["key"])
        elif call.name == "read_pdf_page":
            att, page = str(args["attachment_key"]), int(args["page"])
            sentence = (f"Page {page} of attachment {att} discusses the method and its "
                        "evidence in detail, with examples and counter-examples. ")
            output = (sentence * (self.page_chars // len(sentence) + 1))[: self.page_chars]
            extra.append(PdfPagePart(attachment_name=f"{att}.pdf", attachment_key=att,
                                     page=page, total_pages=9))
            self.used_keys.add(att)
        elif call.name == "zotero_create_annotation":
            ann = _key("N", self.tool_rounds)
            parent = str(args["parent_item_key"])
            output = json.dumps({"key": ann, "parentItem": parent, "annotationType": "highlight",
                                 "annotationText": args.get("text", ""),
                                 "annotationPageLabel": str(args.get("page", ""))})
            extra.append(AnnotationPart(annotation_key=ann, parent_item_key=parent,
                                        text=str(args.get("text", "")),
                                        page=str(args.get("page", ""))))
            self.used_keys.update({ann, parent})
        else:  # pragma: no cover - the script only calls the tools above
            raise AssertionError(f"unexpected tool {call.name}")
        result = ToolResultPart(call_id=call.id, name=call.name, output=output)
        return Message(role="tool", parts=(result, *extra))


# --------------------------------------------------------------------------- conversations


SMALL_WINDOW = 4_000  # safe limit 3,000, auto threshold 2,550, tail 1,000 (see derive_budget)


async def open_conversation(store: Any, server: Any, protocol: str, *, window: int = SMALL_WINDOW,
                            max_output: int = 1_000, **options: Any) -> Any:
    from contextfold.runtime import Conversation

    return await Conversation.open(store, model=chat_model(server, protocol, f"fake-{window}"),
                                   capacity=capacity(window, max_output), **options)


async def tree_checkpoints(store: Any, session_id: str) -> list[Any]:
    """Every checkpoint ever committed in the session's tree (also off-branch ones)."""
    return [n for n in await store.load_tree(session_id) if n.checkpoint is not None]


def words(n: int, seed: str = "lorem") -> str:
    """About `n` words of plain English-like text."""
    return " ".join(f"{seed}{i % 97}" for i in range(n))


async def fill(conv: Any, turns: int, size: int = 60, *, wait: bool = True) -> None:
    """`turns` plain question/answer turns of about `size` words each."""
    for i in range(turns):
        await conv.send(f"question {i}: " + words(size))
        if wait:
            await conv.wait_idle()


class GatedSummarizer:
    """An offline summariser that waits for `release` (a slow summary, under test control)."""

    def __init__(self) -> None:
        import asyncio

        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def __call__(self, plan: Any) -> tuple[str, str]:
        from contextfold.summarize.extractive import summarize_extractive

        self.calls += 1
        self.started.set()
        await self.release.wait()
        return summarize_extractive(plan), "gated"


def send_waiting(conv: Any) -> Any:
    """An event set when a send starts waiting for the running compaction (U2), so a test
    waits for that moment instead of sleeping on the real clock."""
    import asyncio

    reached = asyncio.Event()
    runner = conv._runner
    original = runner.wait

    async def wait() -> Any:
        reached.set()
        return await original()

    runner.wait = wait
    return reached


async def send_until_compacting(conv: Any, gate: GatedSummarizer, size: int = 60) -> int:
    """Send turns until one leaves an automatic compaction running in the background (it
    starts when send() returns), then wait until the gated summariser holds it."""
    for turn in range(50):
        await conv.send(f"question {turn}: " + words(size))
        if conv.state.compacting:
            await gate.started.wait()
            return turn + 1
    raise AssertionError("no automatic compaction started within 50 turns")


async def fill_to(conv: Any, tokens: int, size: int = 400) -> int:
    """Send turns of about `size` words until the next request holds over `tokens`
    (by the conversation's own estimate); returns how many turns it took."""
    turns = 0
    while conv.gauge().tokens <= tokens:
        await conv.send(f"question {turns}: " + words(size))
        await conv.wait_idle()
        turns += 1
        assert turns < 200, "the history does not grow"
    return turns
