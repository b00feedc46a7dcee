"""Branch changes and cancellation while a summary is being written (SPEC C1-C5, O1-O2):
the commit is refused as stale and the conversation reloads the real branch; a cancelled
compaction leaves no trace."""

from __future__ import annotations

import asyncio

import pytest

from contextfold.runtime import Conversation
from contextfold.summarize.llm import LlmSummarizer
from tests.fakeserver import Reply
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    GatedSummarizer,
    capacity,
    chat_model,
    fill,
    open_conversation,
    runtime_fixtures,
    tree_checkpoints,
)

store, close_models, fake = runtime_fixtures()


async def _second_client(store, conv):
    """Another UI (or worker) with the same session open."""
    return await Conversation.open(store, conv.session_id, model=conv.model,
                                   capacity=conv.capacity)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("change", ["retry", "edit"])
async def test_branch_change_during_slow_summary_makes_the_commit_stale(
        fake, store, protocol, change):  # C1 C2 C3 C5 O1 O2
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, protocol, window=200_000, summarizer=gate)
    events = conv.events()
    await fill(conv, 3, size=20)
    compacting = asyncio.create_task(conv.compact())
    await gate.started.wait()

    other = await _second_client(store, conv)
    fake.enqueue(Reply(text="a regenerated answer"))
    if change == "retry":
        await other.retry()
    else:
        await other.edit("an edited last question")
    gate.release.set()
    outcome = await compacting

    assert outcome.status == "stale" and outcome.code == "stale"
    assert await tree_checkpoints(store, conv.session_id) == []  # nothing committed
    stored = await store.load_branch(conv.session_id)
    # C3/C5: the conversation reloaded the real branch, so UI and database agree.
    assert conv.branch.leaf_id == stored.leaf_id == other.branch.leaf_id
    assert conv.branch.nodes[-1].message.text == "a regenerated answer"
    stale = [e for e in events.pending() if e.kind == "compaction_stale"]
    assert stale and stale[0].outcome is outcome and conv.state.phase == "idle"

    # The next compaction plans on the real branch and commits.
    gate.release.set()
    again = await conv.compact()
    assert again.status == "compacted"
    await other.close()
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_mid_summary_leaves_no_trace(fake, store, protocol):  # C4 U1 U3
    model = chat_model(fake, protocol, "fake-200k")
    conv = await Conversation.open(store, model=model, capacity=capacity(200_000),
                                   summarizer=LlmSummarizer(model, capacity(200_000)))
    await fill(conv, 3, size=20)
    info = await store.get_session(conv.session_id)
    fake.enqueue(Reply(delay=30), kind="summary")  # the summariser model is slow
    compacting = asyncio.create_task(conv.compact())
    deadline = asyncio.get_running_loop().time() + 60  # a bound, not a margin
    while not fake.summary_requests and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert fake.summary_requests and conv.state.compacting
    assert conv.cancel_compaction()
    outcome = await compacting
    assert outcome.status == "noop" and outcome.code == "cancelled"
    after = await store.get_session(conv.session_id)
    assert (after.leaf_id, after.branch_revision) == (info.leaf_id, info.branch_revision)
    assert await tree_checkpoints(store, conv.session_id) == []
    assert await store.lease_holder(conv.session_id) is None
    assert conv.state.phase == "idle" and conv.branch.leaf_id == info.leaf_id
    await conv.close()


async def test_cancel_inside_the_commit_transaction_rolls_back(fake, store):  # C4
    conv = await open_conversation(store, fake, "openai", window=200_000)
    await fill(conv, 3, size=20)
    info = await store.get_session(conv.session_id)
    inserted = asyncio.Event()

    async def hold_after_insert(step: str) -> None:
        if step == "inserted":  # the checkpoint row exists inside the open transaction
            inserted.set()
            await asyncio.sleep(30)

    store._step_hook = hold_after_insert  # the store's own test hook
    compacting = asyncio.create_task(conv.compact())
    await asyncio.wait_for(inserted.wait(), 10)
    assert conv.cancel_compaction()
    outcome = await compacting
    store._step_hook = None
    assert outcome.code == "cancelled"
    after = await store.get_session(conv.session_id)
    assert (after.leaf_id, after.branch_revision) == (info.leaf_id, info.branch_revision)
    assert await tree_checkpoints(store, conv.session_id) == []
    assert (await conv.compact()).status == "compacted"  # nothing left half-done
    await conv.close()
