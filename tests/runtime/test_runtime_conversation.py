"""Conversation basics over real HTTP (both wire protocols): send, tool turns, manual and
automatic compaction, busy rules, cancellation, overflow policy, retry / edit / fork, events."""

from __future__ import annotations

import asyncio

import pytest

from contextfold.core.values.messages import ToolResultPart, text_message
from contextfold.core.values.tree import Branch
from contextfold.providers import ContextOverflowError
from contextfold.runtime import (
    BusyError,
    DraftTooLargeError,
    SendAbortedError,
    ToolWorkflowError,
)
from contextfold.store import InvalidOperationError
from tests.fakeserver import Reply, ToolCallSpec
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    GatedSummarizer,
    assert_requests_fit,
    chat_requests,
    fill,
    open_conversation,
    runtime_fixtures,
    send_until_compacting,
    send_waiting,
    tree_checkpoints,
    words,
)

store, close_models, fake = runtime_fixtures()


# --------------------------------------------------------------------------- sending


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_send_persists_user_message_and_reply_with_usage(fake, store, protocol):  # A1 E1
    fake.enqueue(Reply(text="Hello from the fake model."))
    conv = await open_conversation(store, fake, protocol, system="Be brief.")
    result = await conv.send("Hi there")
    assert result.text == "Hello from the fake model." and result.turn_complete
    branch = await store.load_branch(conv.session_id)
    roles = [n.message.role for n in branch.nodes]
    assert roles == ["user", "assistant"]
    usage = branch.nodes[-1].message.usage
    assert usage is not None and usage.prompt == fake.requests[-1].prompt_tokens
    assert fake.requests[-1].system == "Be brief."
    assert fake.requests[-1].max_tokens <= conv.budget.reserve  # prompt + reply fit: B1
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_streamed_reply_reaches_on_text(fake, store, protocol):  # U1
    fake.enqueue(Reply(text="streamed answer text"))
    conv = await open_conversation(store, fake, protocol)
    pieces: list[str] = []
    result = await conv.send("stream please", on_text=pieces.append)
    assert "".join(pieces) == "streamed answer text" == result.text
    assert fake.requests[-1].stream
    await conv.close()


async def test_bad_drafts_are_refused_by_name(fake, store):  # P1
    conv = await open_conversation(store, fake, "openai")
    with pytest.raises(ValueError, match="empty"):
        await conv.send("   ")
    with pytest.raises(ValueError, match="role 'assistant'"):
        await conv.send(text_message("assistant", "not mine"))
    assert fake.requests == []
    await conv.close()


# --------------------------------------------------------------------------- tool turns


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tool_turn_without_runner_waits_for_results(fake, store, protocol):  # A2 K1
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("zotero_search", {"q": "holmes"}),)),
                 Reply(text="Found it."))
    conv = await open_conversation(store, fake, protocol)
    first = await conv.send("search holmes")
    assert not first.turn_complete
    (call,) = first.pending_tool_calls
    assert conv.open_tool_calls == (call,)

    # Never compact, and never start a new turn, while a call waits for its result.
    outcome = await conv.compact()
    assert outcome.status == "noop" and outcome.code == "unstable"
    with pytest.raises(ToolWorkflowError, match="wait for results"):
        await conv.send("another question")
    with pytest.raises(ToolWorkflowError, match="still wait"):
        await conv.continue_turn()
    with pytest.raises(ToolWorkflowError, match="answers no open call"):
        await conv.add_tool_results([ToolResultPart(call_id="nope", output="x")])

    await conv.add_tool_results([ToolResultPart(call_id=call.id, output='[{"key": "ABCD2345"}]')])
    done = await conv.continue_turn()
    assert done.text == "Found it." and done.turn_complete
    with pytest.raises(ToolWorkflowError, match="nothing to continue"):
        await conv.continue_turn()
    assert_requests_fit(fake, 10**9)
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_run_tools_callback_drives_the_loop(fake, store, protocol):  # A4
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("a", {}), ToolCallSpec("b", {}))),
                 Reply(tool_calls=(ToolCallSpec("c", {}),)), Reply(text="all done"))
    seen: list[list[str]] = []

    async def run_tools(calls):
        seen.append([c.name for c in calls])
        return [ToolResultPart(call_id=c.id, name=c.name, output=f"{c.name} ok") for c in calls]

    conv = await open_conversation(store, fake, protocol, run_tools=run_tools)
    result = await conv.send("go")
    assert seen == [["a", "b"], ["c"]] and result.text == "all done"
    roles = [n.message.role for n in result.nodes]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert len(chat_requests(fake)) == 3
    assert_requests_fit(fake, 10**9)
    await conv.close()


# --------------------------------------------------------------------------- manual compaction


async def test_manual_compaction_single_turn_is_a_noop(fake, store):  # M3
    conv = await open_conversation(store, fake, "openai")
    events = conv.events()
    await conv.send("only one turn")
    outcome = await conv.compact()
    assert outcome.status == "noop" and outcome.code == "single_turn"
    assert [e.kind for e in events.pending()] == ["compaction_started", "compaction_noop"]
    assert await tree_checkpoints(store, conv.session_id) == []
    await conv.close()


async def test_manual_compaction_of_two_turns_keeps_the_second(fake, store):  # M1 M2 M6 C5
    conv = await open_conversation(store, fake, "openai", window=200_000)
    await fill(conv, 2, size=10)
    branch = conv.branch
    second_user = [n for n in branch.nodes if n.is_user_message][1]
    outcome = await conv.compact(instructions="keep all DOIs")
    assert outcome.status == "compacted" and outcome.first_kept_id == second_user.id
    # In-memory state synced with the database (C5): the checkpoint is the leaf.
    stored = await store.load_branch(conv.session_id)
    assert conv.branch.leaf_id == stored.leaf_id == outcome.checkpoint_id
    assert conv.branch.leaf.checkpoint.details["instructions"] == "keep all DOIs"
    # The next request carries the summary and the kept turn, and nothing older.
    await conv.send("third")
    sent = chat_requests(fake)[-1].messages
    text = str(sent)
    assert "[contextfold checkpoint]" in text and "question 1" in text
    assert "question 0" not in text.split("[contextfold checkpoint]")[0]
    await conv.close()


# --------------------------------------------------------------------------- auto compaction


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_auto_compaction_runs_after_the_turn_in_background(fake, store, protocol):  # A1 A3 A4
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, protocol, summarizer=gate)
    await send_until_compacting(conv, gate)
    # send() returned before the compaction finished: the user did not wait for it.
    assert conv.state.compacting and conv.state.cancellable
    assert conv.state.trigger == "auto" and conv.state.started_at is not None
    gate.release.set()
    finished = await conv.wait_idle()
    assert finished.status == "compacted" and conv.state.phase == "idle"
    checkpoint = conv.branch.leaf
    assert checkpoint.checkpoint.details["trigger"] == "auto"
    # Between turns: its parent is the final reply of the last turn.
    parent = next(n for n in conv.branch.nodes if n.id == checkpoint.parent_id)
    assert parent.message.role == "assistant" and not parent.message.tool_calls
    assert conv.gauge().tokens < conv.budget.auto_threshold
    await conv.close()


async def test_send_waits_for_a_running_compaction_then_sends(fake, store):  # U2 A4
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, "openai", summarizer=gate)
    await send_until_compacting(conv, gate)
    before = len(fake.requests)
    waiting = send_waiting(conv)
    sending = asyncio.create_task(conv.send("the next question"))
    await waiting.wait()
    assert not sending.done() and len(fake.requests) == before  # frozen, waiting
    gate.release.set()
    result = await sending
    assert result.turn_complete
    assert "[contextfold checkpoint]" in str(fake.requests[-1].messages)
    await conv.close()


async def test_busy_while_compacting(fake, store):  # U4
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, "openai", summarizer=gate)
    await send_until_compacting(conv, gate)
    reply_id = conv.branch.nodes[-1].id
    for attempt in (conv.retry(), conv.edit("changed"), conv.fork(reply_id), conv.compact()):
        with pytest.raises(BusyError):
            await attempt
    with pytest.raises(BusyError):
        conv.switch_model(conv.model, conv.capacity)
    gate.release.set()
    await conv.wait_idle()
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_keeps_the_draft_and_writes_nothing(fake, store, protocol):  # U3 C4 U1
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, protocol, summarizer=gate)
    events = conv.events()
    await send_until_compacting(conv, gate)
    info = await store.get_session(conv.session_id)
    requests = len(fake.requests)
    waiting = send_waiting(conv)
    sending = asyncio.create_task(conv.send("my carefully typed draft"))
    await waiting.wait()
    assert conv.cancel_compaction()
    with pytest.raises(SendAbortedError) as aborted:
        await sending
    assert aborted.value.reason == "cancelled"
    assert aborted.value.draft.text == "my carefully typed draft"
    after = await store.get_session(conv.session_id)
    assert (after.leaf_id, after.branch_revision) == (info.leaf_id, info.branch_revision)
    assert len(fake.requests) == requests and conv.state.phase == "idle"
    assert await tree_checkpoints(store, conv.session_id) == []
    assert await store.lease_holder(conv.session_id) is None
    assert "compaction_cancelled" in [e.kind for e in events.pending()]
    assert not conv.cancel_compaction()  # nothing left to cancel
    await conv.close()


async def test_failed_compaction_aborts_the_waiting_send(fake, store, monkeypatch):  # U3
    gate = GatedSummarizer()
    conv = await open_conversation(store, fake, "openai", summarizer=gate)
    await send_until_compacting(conv, gate)

    async def broken_commit(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(store, "commit_checkpoint", broken_commit)
    waiting = send_waiting(conv)
    sending = asyncio.create_task(conv.send("draft kept on failure"))
    await waiting.wait()
    gate.release.set()
    with pytest.raises(SendAbortedError) as aborted:
        await sending
    assert aborted.value.reason == "failed" and "disk full" in aborted.value.detail
    assert aborted.value.draft.text == "draft kept on failure"
    assert conv.state.phase == "failed" and "disk full" in conv.state.reason
    monkeypatch.undo()
    result = await conv.send("draft kept on failure")  # the next send clears the failure
    assert result.turn_complete and conv.state.phase != "failed"
    await conv.close()


# --------------------------------------------------------------------------- overflow (P4)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_provider_overflow_is_surfaced_by_default(fake, store, protocol):  # P4
    conv = await open_conversation(store, fake, protocol, window=200_000)
    events = conv.events()
    await fill(conv, 3, size=200)
    fake.configure(context_window=300, count_max_tokens=False)  # the catalog was wrong
    before = len(fake.requests)
    with pytest.raises(ContextOverflowError):
        await conv.send("one more")
    assert len(fake.requests) == before + 1  # no silent compact-and-retry
    assert await tree_checkpoints(store, conv.session_id) == []
    assert "overflow" in [e.kind for e in events.pending()]
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_overflow_compact_and_retry_once(fake, store, protocol):  # P4
    conv = await open_conversation(store, fake, protocol, window=200_000,
                                   overflow_policy="compact_and_retry_once")
    await fill(conv, 6, size=300)
    real = fake.requests[-1].prompt_tokens
    fake.configure(context_window=real, count_max_tokens=False)
    before = len(chat_requests(fake))
    result = await conv.send("one more")
    assert result.turn_complete
    assert [c.status for c in result.compactions] == ["compacted"]
    assert len(chat_requests(fake)) == before + 2  # the overflow, then one retry
    assert fake.requests[-1].status == 200

    # The guard: when even the compacted request overflows, it surfaces; no loop.
    fake.configure(context_window=50, count_max_tokens=False)
    before = len(chat_requests(fake))
    with pytest.raises(ContextOverflowError):
        await conv.send("and another")
    assert len(chat_requests(fake)) <= before + 2
    await conv.close()


# --------------------------------------------------------------------------- retry / edit / fork


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_retry_regenerates_and_keeps_the_old_reply(fake, store, protocol):  # O1
    fake.enqueue(Reply(text="first answer"), Reply(text="second answer"))
    conv = await open_conversation(store, fake, protocol)
    await conv.send("question")
    result = await conv.retry()
    assert result.text == "second answer"
    assert [n.message.text for n in conv.branch.nodes] == ["question", "second answer"]
    texts = {n.message.text for n in await store.load_tree(conv.session_id)}
    assert {"first answer", "second answer"} <= texts  # nothing deleted
    await conv.close()


async def test_edit_moves_the_branch_and_resends(fake, store):  # O2
    conv = await open_conversation(store, fake, "openai")
    await conv.send("original question")
    result = await conv.edit("edited question")
    assert result.turn_complete
    users = [n.message.text for n in conv.branch.nodes if n.is_user_message]
    assert users == ["edited question"]
    assert "original question" not in str(fake.requests[-1].messages)
    await conv.close()


async def test_edit_that_cannot_fit_is_refused_before_writing(fake, store):  # O2 P3
    conv = await open_conversation(store, fake, "openai")
    await conv.send("original question")
    info = await store.get_session(conv.session_id)
    requests = len(fake.requests)
    with pytest.raises(DraftTooLargeError) as refused:
        await conv.edit(words(4_000))
    assert refused.value.overflow_tokens > 0
    after = await store.get_session(conv.session_id)
    assert after.leaf_id == info.leaf_id and len(fake.requests) == requests
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_fork_from_a_reply_starts_an_independent_conversation(fake, store, protocol):  # O3 T5
    conv = await open_conversation(store, fake, protocol, window=200_000)
    await fill(conv, 2, size=10)
    first_reply = next(n for n in conv.branch.nodes if n.message.role == "assistant")
    forked = await conv.fork(first_reply.id)
    assert forked.session_id != conv.session_id and forked.branch.leaf_id == first_reply.id
    await forked.send("a different follow-up")
    assert len([n for n in forked.branch.nodes if n.is_user_message]) == 2
    original = await store.load_branch(conv.session_id)
    assert original.leaf_id == conv.branch.leaf_id  # untouched
    user_node = conv.branch.nodes[0]
    with pytest.raises(InvalidOperationError):
        await conv.fork(user_node.id)
    await conv.compact()
    with pytest.raises(InvalidOperationError, match="checkpoint"):
        await conv.fork(conv.branch.leaf_id)
    await forked.close()
    await conv.close()


# --------------------------------------------------------------------------- events


async def test_event_stream_and_callbacks(fake, store):  # U1
    conv = await open_conversation(store, fake, "openai", window=200_000)
    seen: list[str] = []
    unsubscribe = conv.subscribe(lambda e: seen.append(e.kind))
    collected: list[str] = []

    async def consume():
        async for event in conv.events():
            collected.append(event.kind)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    await fill(conv, 2, size=10)
    await conv.compact()
    unsubscribe()
    await conv.compact()
    await conv.close()
    await asyncio.wait_for(consumer, 2)  # close() ends the stream
    assert seen == ["compaction_started", "compaction_finished"]
    assert collected == ["compaction_started", "compaction_finished",
                         "compaction_started", "compaction_noop"]


async def test_open_resumes_a_stored_session(fake, store):  # C5
    conv = await open_conversation(store, fake, "openai")
    await fill(conv, 2, size=10)
    again = await open_conversation(store, fake, "openai")
    assert again.session_id != conv.session_id
    resumed = await type(conv).open(store, conv.session_id, model=conv.model,
                                    capacity=conv.capacity)
    assert isinstance(resumed.branch, Branch)
    assert resumed.branch.leaf_id == conv.branch.leaf_id
    for c in (conv, again, resumed):
        await c.close()


# --------------------------------------------------------------------------- one class, parts


async def test_a_store_wrapped_after_opening_serves_the_branch_and_its_pins(fake, store):
    """`conv.store = wrapper` (the service's `on_conversation` hook, a test's failing
    commits) reaches every part: the branch's appends and reloads, the pins (issue 39: the
    parts share one value, so none keeps the store it was opened with)."""
    from contextfold.runtime.conversation import Conversation

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def __getattr__(self, name):
            self.calls.append(name)
            return getattr(self.inner, name)

    fake.enqueue(Reply(text="noted"))
    conv = await open_conversation(store, fake, "openai")
    assert isinstance(conv, Conversation)
    wrapped = Counting(conv.store)
    conv.store = wrapped
    assert conv.store is wrapped
    await conv.send("remember the launch date")
    pin = await conv.pin("launch on 12 May")
    await conv.reload()
    assert {"append", "append_pin_event", "load_branch"} <= set(wrapped.calls)
    assert conv.pins() == (pin,)
    await conv.close()
