"""Preflight before every request (SPEC P1-P3): model switch to a smaller window, a huge
paste, images, and requests between tool rounds — over real HTTP, both wire protocols."""

from __future__ import annotations

import pytest

from contextfold.core.values.messages import FilePart, Message, TextPart, ToolResultPart
from contextfold.runtime import DraftTooLargeError
from contextfold.summarize.llm import LlmSummarizer
from tests.fakeserver import Reply, ToolCallSpec
from tests.runtime.test_runtime_support import (
    FIXTURES,
    PROTOCOLS,
    assert_requests_fit,
    capacity,
    chat_model,
    chat_requests,
    fill,
    fill_to,
    open_conversation,
    runtime_fixtures,
    words,
)

store, close_models, fake = runtime_fixtures()


def _checkpoints(branch):
    return [n for n in branch.nodes if n.checkpoint is not None]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_switch_from_200k_to_16k_compacts_before_the_next_send(fake, store, protocol):
    # P2 B1 B2
    conv = await open_conversation(store, fake, protocol, window=200_000, max_output=8_192)
    await fill_to(conv, 20_000)  # fine for 200k, far too much for 16k
    assert _checkpoints(conv.branch) == []

    fake.configure(context_window=16_000)  # from now on the server is the small model
    first_small = len(fake.requests)
    gauge = conv.switch_model(chat_model(fake, protocol, "fake-16k"), capacity(16_000))
    assert gauge.safe_input_limit < 16_000 < gauge.tokens  # the UI sees it at once

    result = await conv.send("Now continue on the small model.")
    assert [c.status for c in result.compactions] == ["compacted"]
    (checkpoint,) = _checkpoints(conv.branch)
    assert checkpoint.checkpoint.details["trigger"] == "preflight"
    assert checkpoint.checkpoint.model == "fake-16k"
    assert result.request_tokens <= conv.budget.safe_input_limit
    small = fake.requests[first_small:]
    assert small and all(r.prompt_tokens + r.max_tokens <= 16_000 for r in small)
    assert_requests_fit(fake, 200_000)
    await conv.close()


def _paste(chars: int) -> str:
    """A real mixed Japanese/English document, repeated to `chars` characters."""
    seed = "".join(p.read_text() for p in sorted((FIXTURES / "seeds").glob("*.txt")))
    return (seed * (chars // len(seed) + 1))[:chars]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_100k_paste_refused_before_any_provider_call(fake, store, protocol):  # P3 P1
    model = chat_model(fake, protocol, "fake-32k")
    summarizer = LlmSummarizer(model, capacity(32_000))  # any compaction would be a request
    conv = await open_conversation(store, fake, protocol, window=32_000, max_output=8_192,
                                   summarizer=summarizer)
    events = conv.events()
    await fill(conv, 3, size=50)
    info = await store.get_session(conv.session_id)
    requests = len(fake.requests)
    paste = _paste(100_000)

    with pytest.raises(DraftTooLargeError) as refused:
        await conv.send(paste)
    error = refused.value
    assert error.draft.text == paste  # the draft is handed back whole
    assert error.overflow_tokens > 0
    assert error.estimated_tokens > error.safe_input_limit == conv.budget.safe_input_limit
    assert str(error.overflow_tokens) in str(error)
    assert len(fake.requests) == requests  # no chat request, no summary request
    after = await store.get_session(conv.session_id)
    assert (after.leaf_id, after.branch_revision) == (info.leaf_id, info.branch_revision)
    blocked = [e for e in events.pending() if e.kind == "preflight_blocked"]
    assert blocked and blocked[0].limit == conv.budget.safe_input_limit

    # The conversation is intact: a normal message still goes through.
    result = await conv.send("Sorry, here is a short summary of it instead.")
    assert result.turn_complete
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_draft_with_images_that_fits_only_after_compaction(fake, store, protocol):
    # P1 P2 E4
    conv = await open_conversation(store, fake, protocol, window=32_000, max_output=8_192)
    # Below the auto threshold, but within three images of the safe limit. Turns of 150
    # words (~300 tokens) cannot jump over the 400 tokens between the target and the auto
    # threshold, whatever the fixed part of the request (system, tools) weighs.
    await fill_to(conv, conv.budget.safe_input_limit - 4_000, size=150)
    assert _checkpoints(conv.branch) == []
    images = tuple(FilePart(name=f"figure{i}.png", media_type="image/png", size=90_000)
                   for i in range(3))
    draft = Message(role="user", parts=(TextPart(text="What do these figures show?"), *images))
    assert conv.estimate().tokens <= conv.budget.safe_input_limit
    assert conv.estimate([draft]).tokens > conv.budget.safe_input_limit

    result = await conv.send(draft)
    assert [c.status for c in result.compactions] == ["compacted"]
    assert _checkpoints(conv.branch)[-1].checkpoint.details["trigger"] == "preflight"
    assert result.request_tokens <= conv.budget.safe_input_limit
    assert_requests_fit(fake, 32_000)
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_requests_between_tool_rounds_are_checked_too(fake, store, protocol):
    # P1 P2 A2 A4 K1
    conv = await open_conversation(store, fake, protocol, window=32_000, max_output=8_192)
    turns = await fill_to(conv, conv.budget.auto_threshold - 3_000)
    before = conv.gauge().tokens
    fake.enqueue(*[Reply(tool_calls=(ToolCallSpec("read_pdf_page", {"page": p}),))
                   for p in range(1, 5)], Reply(text="Read all four pages."), kind="chat")

    async def read_pages(calls):
        return [ToolResultPart(call_id=c.id, name=c.name,
                               output=words(1_500, f"page{c.input['page']}w")) for c in calls]

    result = await conv.send("Read pages 1 to 4 of the PDF.", run_tools=read_pages)
    assert result.turn_complete and result.text == "Read all four pages."
    # The history plus four big pages cannot fit: a compaction ran between two rounds,
    # when every call had its result, never with a call open.
    (checkpoint,) = _checkpoints(conv.branch)
    assert checkpoint.checkpoint.details["trigger"] == "preflight"
    assert checkpoint.checkpoint.tokens_before > conv.budget.safe_input_limit > before
    parent = next(n for n in (await conv.history()).nodes if n.id == checkpoint.parent_id)
    assert parent.message.role == "tool"
    assert_requests_fit(fake, 32_000)
    assert len(chat_requests(fake)) == turns + 5
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stale_preflight_compaction_is_planned_again(fake, store, protocol):
    # P2 C1: another client changes the branch while the preflight summary is written; the
    # commit is refused as stale and the preflight plans again (up to 3 attempts) instead of
    # refusing a draft that fits after compaction.
    from contextfold.runtime import Conversation
    from contextfold.summarize.extractive import summarize_extractive

    plans: list = []
    other: list = []

    async def summarizer(plan):
        plans.append(plan)
        if len(plans) == 1:
            fake.enqueue(Reply(text="a regenerated answer"))
            await other[0].retry()  # the branch moves under the running compaction
        return summarize_extractive(plan), "test"

    conv = await open_conversation(store, fake, protocol, window=200_000, max_output=8_192,
                                   summarizer=summarizer)
    await fill_to(conv, 20_000)
    other.append(await Conversation.open(store, conv.session_id, model=conv.model,
                                         capacity=conv.capacity))
    conv.switch_model(chat_model(fake, protocol, "fake-16k"), capacity(16_000))

    result = await conv.send("Now continue on the small model.")
    assert [c.status for c in result.compactions] == ["stale", "compacted"]
    assert len(plans) == 2
    assert result.request_tokens <= conv.budget.safe_input_limit
    assert _checkpoints(conv.branch)[-1].checkpoint.details["trigger"] == "preflight"
    await other[0].close()
    await conv.close()
