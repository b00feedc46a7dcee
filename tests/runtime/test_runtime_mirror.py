"""The content mirror (runtime/mirror.py): client-held histories mapped onto the tree by
content (Y1), what is sent fits (Y2, P1-P3) or is refused (Y3), a stable prefix (Y4), usage
on the reply (E1), auto compaction after a reply (A1)."""

from __future__ import annotations

import asyncio

import pytest

from contextfold.core.models.budget import ModelCapacity
from contextfold.core.render.export import to_openai
from contextfold.core.render.validity import openai_problems
from contextfold.core.values.content_chain import ChainMemo, chain_hashes
from contextfold.core.values.held import Held
from contextfold.core.values.messages import (
    Message,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    Usage,
)
from contextfold.runtime import RequestTooLargeError
from contextfold.runtime.mirror import Mirror
from contextfold.store import open_store
from contextfold.store.audit.invariants import check_store
from contextfold.store.audit.verify import verify_tree
from tests.builders import assistant, tool_call, tool_result, user

pytest_plugins = ["tests.store_fixtures"]  # backend / db_url / store fixtures

BIG = ModelCapacity(model="test-model", context_window=200_000, max_output=8_000)
SMALL = ModelCapacity(model="test-model", context_window=8_000, max_output=1_000)


def usage(n: int) -> Usage:
    return Usage(input=n, output=20, model="test-model")


async def tree_messages(store, session_id: str) -> list[str]:
    return sorted(str(n.payload.parts[0]) for n in await store.load_tree(session_id)
                  if n.message is not None)


async def test_same_prefix_continues_the_branch_and_nothing_is_stored_twice_y1(store):
    mirror = Mirror(store, background=False)
    first = await mirror.sync([user("hello")], capacity=BIG, system="be brief")
    assert first.created and first.appended == 1
    await mirror.record_reply(first, assistant("hi there", usage=usage(50)))
    # The client resends the reply without usage and with its reasoning dropped: same content.
    second = await mirror.sync([user("hello"), assistant("hi there "), user("how are you?")],
                               capacity=BIG, system="be brief")
    assert second.session_id == first.session_id and not second.created
    assert second.appended == 1 and second.moved == "append"
    assert len(await store.load_tree(first.session_id)) == 3
    # The stored reply kept its usage (E1): the estimate starts from it.
    assert second.estimate.method == "usage+delta"
    again = await mirror.sync([user("hello"), assistant("hi there"), user("how are you?")],
                              capacity=BIG, system="be brief")
    assert again.appended == 0 and again.moved is None
    assert again.node_ids == second.node_ids
    assert len(await store.load_tree(first.session_id)) == 3


async def test_first_difference_starts_a_branch_there_y1(store):
    mirror = Mirror(store, background=False)
    base = [user("plan the trip"), assistant("where to?"), user("Kyoto")]
    s1 = await mirror.sync(base, capacity=BIG)
    await mirror.record_reply(s1, assistant("Kyoto it is"))
    # An edit of the last user message: a sibling of "Kyoto", under the same reply.
    s2 = await mirror.sync([*base[:2], user("Osaka")], capacity=BIG)
    assert s2.session_id == s1.session_id and s2.moved == "branch"
    assert s2.node_ids[:2] == s1.node_ids[:2] and s2.node_ids[2] != s1.node_ids[2]
    tree = {n.id: n for n in await store.load_tree(s1.session_id)}
    assert tree[s2.node_ids[2]].parent_id == s1.node_ids[1]
    assert len(tree) == 5  # 3 + reply + the edited message; nothing copied
    # Back to the first branch: nothing new is stored, the leaf moves (a retry).
    s3 = await mirror.sync(base, capacity=BIG)
    assert s3.appended == 0 and s3.moved == "switch" and s3.node_ids == s1.node_ids
    assert len(await store.load_tree(s1.session_id)) == 5
    branch = await store.load_branch(s1.session_id)
    assert branch.leaf_id == s1.node_ids[2]


async def test_scopes_and_first_messages_separate_conversations_y1(store):
    mirror = Mirror(store, background=False)
    a = await mirror.sync([user("task A")], capacity=BIG, scope="client-1")
    b = await mirror.sync([user("task A")], capacity=BIG, scope="client-2")
    c = await mirror.sync([user("task C")], capacity=BIG, scope="client-1")
    assert len({a.session_id, b.session_id, c.session_id}) == 3
    assert chain_hashes("x", [user("a")]) != chain_hashes("y", [user("a")])


async def test_reasoning_usage_and_whitespace_do_not_change_identity_y1():
    with_reasoning = Message(role="assistant", parts=(ReasoningPart(text="hmm"),
                                                      TextPart(text="done\n")),
                             usage=usage(10))
    plain = Message(role="assistant", parts=(TextPart(text="done"),))
    assert chain_hashes("s", [with_reasoning]) == chain_hashes("s", [plain])
    assert chain_hashes("s", [plain]) != chain_hashes("s", [assistant("done!")])


async def test_a_restarted_process_continues_the_same_session_y1(db_url):
    store1 = await open_store(db_url)
    s1 = await Mirror(store1, background=False).sync([user("one")], capacity=BIG)
    await Mirror(store1, background=False).record_reply(s1, assistant("two"))
    await store1.close()
    store2 = await open_store(db_url)
    try:
        s2 = await Mirror(store2).sync([user("one"), assistant("two"), user("three")],
                                       capacity=BIG)
        assert s2.session_id == s1.session_id and s2.appended == 1
    finally:
        await store2.close()


def long_history(turns: int, size: int = 900) -> list[Message]:
    msgs: list[Message] = []
    for i in range(turns):
        msgs.append(user(f"step {i}: look at file_{i}.py " + "x" * size))
        msgs.append(tool_call(f"call_{i}", "read", {"path": f"file_{i}.py"}))
        msgs.append(tool_result(f"call_{i}", f"contents of file_{i} " + "r" * size))
        msgs.append(assistant(f"file_{i}.py read " + "y" * size))
    return msgs


async def test_an_oversized_history_is_compacted_and_what_is_sent_fits_y2(store):
    mirror = Mirror(store, background=False)
    msgs = [*long_history(12), user("now summarise what you found")]
    synced = await mirror.sync(msgs, capacity=SMALL, system="You are a coder.",
                               tools=[{"name": "read", "description": "read a file",
                                       "input_schema": {"type": "object"}}])
    assert [c.status for c in synced.compactions] == ["compacted"]
    assert synced.estimate.tokens <= synced.budget.safe_input_limit
    assert synced.estimate.breakdown["system"] > 0 and synced.estimate.breakdown["tools"] > 0
    items = synced.items()
    assert items[0].index is None and "[contextfold checkpoint]" in items[0].message.parts[0].text
    # The client's latest message is sent as sent; the tail is a suffix of the client's list.
    assert items[-1].index == len(msgs) - 1 and items[-1].verbatim
    indices = [i.index for i in items[1:]]
    assert indices == list(range(indices[0], len(msgs)))
    # Tool pairs stay whole: the request is valid.
    assert not openai_problems(to_openai(synced.projection).messages)
    # Durable history keeps everything (compaction never deletes).
    assert len([n for n in await store.load_tree(synced.session_id)
                if n.message is not None]) == len(msgs)


async def test_after_a_compaction_the_resent_history_continues_after_the_checkpoint_y1_y4(store):
    mirror = Mirror(store, background=False)
    msgs = [*long_history(12), user("next step")]
    s1 = await mirror.sync(msgs, capacity=SMALL)
    assert s1.compactions
    await mirror.record_reply(s1, assistant("ok, next", usage=usage(3_000)))
    s2 = await mirror.sync([*msgs, assistant("ok, next"), user("and then?")], capacity=SMALL)
    assert not s2.compactions and s2.appended == 1
    assert s2.projection.checkpoint is not None
    assert s2.projection.checkpoint.id == s1.projection.checkpoint.id
    # Y4: same checkpoint, byte-identical prefix; the tail only grew.
    assert s2.prefix_text == s1.prefix_text
    # (L5's recall block is per request, right before its request: not part of the tail.)
    tail1 = [i.index for i in s1.items()[1:] if not i.recall]
    assert tail1 == [i.index for i in s2.items()[1:] if not i.recall][:-2]


async def test_a_message_that_cannot_fit_is_refused_y3(store):
    mirror = Mirror(store, background=False)
    huge = user("z " * 20_000)
    with pytest.raises(RequestTooLargeError) as err:
        await mirror.sync([user("hi"), assistant("hello"), huge], capacity=SMALL)
    assert err.value.overflow_tokens > 0
    assert err.value.safe_input_limit < err.value.estimated_tokens


async def test_auto_compaction_after_a_reply_a1(store):
    mirror = Mirror(store, background=True)
    cap = ModelCapacity(model="test-model", context_window=16_000, max_output=1_000)
    msgs = long_history(5)[:-1]
    synced = await mirror.sync(msgs, capacity=cap)
    assert not synced.compactions  # it fits: nothing compacted before sending
    await mirror.record_reply(synced, assistant("done " + "y" * 900, usage=usage(14_500)))
    await mirror.wait_idle(synced.session_id)
    assert [o.status for o in mirror.auto_outcomes] == ["compacted"]
    nxt = await mirror.sync([*msgs, assistant("done " + "y" * 900), user("go on")],
                            capacity=cap)
    assert nxt.projection.checkpoint is not None and nxt.appended == 1 and not nxt.compactions


async def test_auto_compaction_defers_to_a_provider_the_client_asks_to_compact_y7_a1(store):
    # The same turn as above, over the auto threshold but within the safe limit: when the
    # client asked its provider to compact, contextfold's own automatic compaction waits
    # for the provider's (SPEC Y7) ...
    mirror = Mirror(store, background=True)
    cap = ModelCapacity(model="test-model", context_window=16_000, max_output=1_000)
    msgs = long_history(5)[:-1]
    synced = await mirror.sync(msgs, capacity=cap, provider_compaction=True)
    await mirror.record_reply(synced, assistant("done " + "y" * 900, usage=usage(14_500)))
    await mirror.wait_idle(synced.session_id)
    assert list(mirror.auto_outcomes) == []
    # ... also on a later request of the session that does not repeat the parameter
    # (Anthropic's on-demand compaction is a request of its own) ...
    nxt = await mirror.sync([*msgs, assistant("done " + "y" * 900), user("go on")],
                            capacity=cap)
    assert nxt.projection.checkpoint is None and not nxt.compactions
    await mirror.record_reply(nxt, assistant("more " + "z" * 900, usage=usage(15_000)))
    await mirror.wait_idle(nxt.session_id)
    assert list(mirror.auto_outcomes) == []
    # ... while what the window forces is still compacted (P1): a request over the safe
    # limit is never sent as it is.
    big = [*msgs, assistant("done " + "y" * 900), user("go on"), assistant("more " + "z" * 900),
           user("please continue with the next file. " * 120)]
    forced = await mirror.sync(big, capacity=cap)
    assert [c.status for c in forced.compactions] == ["compacted"]
    assert forced.estimate.tokens <= forced.budget.safe_input_limit


def _block(content: str = "summary of a, b, c") -> Message:
    return Message(role="assistant", parts=(ProviderCompactionPart(provider="anthropic", data={
        "type": "compaction", "content": content, "signature": "sig_" + content[:8]}),))


async def test_a_swapped_in_provider_block_continues_its_session_y7_y1(store):
    # SPEC Y7: the client asks its provider to compact a, b, c and gets a signed block; it
    # then sends the block in their place. The list shares no message with the stored one,
    # yet it is the same conversation, continued from the provider's checkpoint.
    mirror = Mirror(store, background=False)
    msgs = [user("a"), assistant("b"), user("c"), assistant("d")]
    asked = await mirror.sync(msgs, capacity=BIG, provider_compaction=True)
    mirror.expect_reply(asked, compaction=True)
    # Background compaction: a turn of the session sent while the block is written does
    # not wait for it.
    turn = await asyncio.wait_for(mirror.sync([*msgs, user("e")], capacity=BIG), 5)
    assert turn.session_id == asked.session_id
    # The swapped list arrives before the compaction's answer is recorded: it waits for
    # it rather than starting a session of its own.
    swapped = asyncio.create_task(mirror.sync([_block(), user("e")], capacity=BIG))
    await asyncio.sleep(0.05)
    assert not swapped.done()
    await mirror.record_reply(asked, _block())
    after = await swapped
    assert after.session_id == asked.session_id and len(await store.list_sessions()) == 1
    cp = after.projection.summary
    assert cp is not None and cp.summarizer == "provider:anthropic" and cp.summary == ""
    assert [m.parts for m in cp.provider_base] == [_block().parts]
    assert [n.payload for n in after.projection.messages] == [user("e")]
    # What the block replaced is still the session's history (nothing is lost).
    branch = await store.load_full_branch(asked.session_id)
    assert [n.message.text for n in branch.nodes if n.message is not None] == \
        ["a", "b", "c", "d", "", "e"]
    # `contextfold verify` agrees: the block's chain starts from the client's scope root,
    # which it cannot recompute, and every other row follows from its node (D1).
    report = await verify_tree(store, asked.session_id)
    assert report.ok, report.problems


async def test_a_session_going_on_from_a_provider_compaction_defers_without_asking_y7_a1(
        store):
    # The session's history holds a provider's compaction (a proxy restarted, or a client
    # that asked in a request this process never saw): its auto compaction is left to the
    # provider too, with no request saying so.
    mirror = Mirror(store, background=True)
    cap = ModelCapacity(model="test-model", context_window=16_000, max_output=1_000)
    msgs = [_block(), *long_history(5)[:-1]]
    synced = await mirror.sync(msgs, capacity=cap)
    assert synced.projection.summary is not None  # taken up: the branch goes on from it
    await mirror.record_reply(synced, assistant("done " + "y" * 900, usage=usage(14_500)))
    await mirror.wait_idle(synced.session_id)
    assert list(mirror.auto_outcomes) == []


async def test_a_session_bound_mirror_keeps_one_session_y1(store):
    mirror = Mirror(store, background=False)
    info = await store.create_session(title="langchain thread")
    s1 = await mirror.sync([user("a")], capacity=BIG, session_id=info.id)
    s2 = await mirror.sync([user("a"), assistant("b"), user("c")], capacity=BIG,
                           session_id=info.id)
    assert s1.session_id == s2.session_id == info.id and s2.appended == 2
    # A list that shares nothing with the stored one starts a new root in the same session.
    s3 = await mirror.sync([user("something else")], capacity=BIG, session_id=info.id)
    assert s3.session_id == info.id and s3.moved == "branch"
    sessions = await store.list_sessions()
    assert [s.id for s in sessions] == [info.id]


async def test_a_retry_after_a_compaction_keeps_the_checkpoint_y1(store):
    mirror = Mirror(store, background=False)
    msgs = [*long_history(12), user("next step")]
    s1 = await mirror.sync(msgs, capacity=SMALL)
    checkpoint = s1.projection.checkpoint
    assert checkpoint is not None
    await mirror.record_reply(s1, assistant("first answer"))
    s2 = await mirror.sync([*msgs, assistant("first answer"), user("more")], capacity=SMALL)
    # The agent retries its last step with another wording: a branch after the checkpoint,
    # which still applies (its summary covers only what both branches share).
    s3 = await mirror.sync([*msgs[:-1], user("the next step, please")], capacity=SMALL)
    assert s3.moved == "branch" and not s3.compactions
    assert s3.projection.checkpoint is not None and s3.projection.checkpoint.id == checkpoint.id
    assert s3.node_ids[:-1] == s2.node_ids[:len(msgs) - 1]
    report = await check_store(store)
    assert report.ok, report.problems


async def test_known_node_ids_skip_the_lookup_and_wrong_ones_are_not_trusted_y1(store):
    mirror = Mirror(store, background=False)
    msgs = [user("plan the trip"), assistant("where to?"), user("Kyoto")]
    synced = await mirror.sync(msgs, capacity=BIG)
    more = [*msgs, assistant("Kyoto it is"), user("book it")]
    hashes = chain_hashes("default", more)  # the scope of a mirror without session_id
    other = await mirror.sync([user("something else")], capacity=BIG)
    # ids of another session's messages: not in this tree, so every hash is looked up.
    wrong = await store.mirror_extend(synced.session_id, hashes[:3], msgs,
                                      known=(other.node_ids[0],) * 3)
    assert wrong.node_ids == synced.node_ids and wrong.nodes == ()
    right = await store.mirror_extend(synced.session_id, hashes, more, known=synced.node_ids)
    assert right.node_ids[:3] == synced.node_ids and len(right.nodes) == 2
    assert right.nodes[0].parent_id == synced.node_ids[2]
    await check_store(store)


def test_the_chain_memo_hashes_like_chain_hashes_and_only_what_is_new_y1():
    memo = ChainMemo()
    msgs = long_history(10)
    assert memo.hashes("s", msgs) == chain_hashes("s", msgs) and memo.hashed == 40
    grown = [*msgs, assistant("done"), user("next")]
    assert memo.hashes("s", grown) == chain_hashes("s", grown)
    assert memo.hashed == 40 + 1 + 2  # the first message (the key) and the two new ones
    # An edit in the middle, a resend with different reasoning, a shorter list (a retry),
    # another scope: each hashed as chain_hashes does.
    edited = [*grown[:5], user("changed"), *grown[6:]]
    resent = [*grown[:-2], Message(role="assistant", parts=(ReasoningPart(text="hmm"),
                                                            TextPart(text="done"))), user("next")]
    for scope, case in [("s", edited), ("s", resent), ("s", grown[:7]), ("t", grown)]:
        assert memo.hashes(scope, case) == chain_hashes(scope, case)
    assert ChainMemo(Held(0)).hashes("s", grown) == chain_hashes("s", grown)


async def test_the_chain_memo_does_not_change_the_mapping_y1(store):
    # The same client behaviour through a mirror with the memo and one without: every call
    # maps onto the tree alike (the sessions differ by scope only). SQLite and PostgreSQL.
    mirrors = {"memo": Mirror(store, background=False), "plain": Mirror(store, background=False)}
    mirrors["plain"]._chains = ChainMemo(Held(0))
    runs = {}
    for name, mirror in mirrors.items():
        steps, ids = [], {}
        msgs = long_history(3)
        script = [msgs, [*msgs, assistant("ok"), user("more")], msgs[:6], msgs,
                  [*msgs[:5], user("edited"), *msgs[6:]], msgs,
                  [*long_history(14), user("summarise")]]
        for case in script:
            synced = await mirror.sync(case, capacity=SMALL, scope=name)
            assert list(synced.hashes) == chain_hashes(name, case)
            if case[-1].role == "user":
                await mirror.record_reply(synced, assistant(f"reply to {len(case)}"))
            steps.append((synced.appended, synced.moved, synced.created, synced.tail_start,
                          [ids.setdefault(n, len(ids)) for n in synced.node_ids],
                          [c.status for c in synced.compactions], synced.estimate.tokens))
        runs[name] = steps
    assert runs["memo"] == runs["plain"]
    assert mirrors["memo"]._chains.hashed < mirrors["plain"]._chains.hashed
    assert any(step[5] == ["compacted"] for step in runs["memo"])  # a compaction is covered


async def test_over_the_auto_threshold_but_fitting_is_not_compacted_on_the_request_path_a1(
        store):
    # A1, A4, issue 26: while the request still fits the safe limit, compaction waits for
    # the background check after the reply; in line only when the request would not fit.
    from contextfold.core.models.budget import derive_budget

    msgs = [*long_history(8), user("what next?")]
    tokens = (await Mirror(store).sync(msgs, capacity=BIG, scope="probe")).estimate.tokens
    window = next(w for w in range(tokens, 4 * tokens, 50)
                  if (b := derive_budget(ModelCapacity(model="test-model", context_window=w,
                                                       max_output=1_000))).auto_threshold
                  < tokens < b.safe_input_limit)
    cap = ModelCapacity(model="test-model", context_window=window, max_output=1_000)
    mirror = Mirror(store, background=True)
    synced = await mirror.sync(msgs, capacity=cap, scope="fits")
    assert synced.estimate.tokens > synced.budget.auto_threshold  # over the threshold ...
    assert not synced.compactions  # ... yet nothing compacted before sending
    await mirror.record_reply(synced, assistant("ok"))
    await mirror.wait_idle(synced.session_id)
    assert [o.status for o in mirror.auto_outcomes] == ["compacted"]  # after the reply
    # The same history under a window it does not fit: compacted in line, and it fits.
    tight = ModelCapacity(model="test-model", context_window=tokens - 500, max_output=1_000)
    inline = await Mirror(store).sync(msgs, capacity=tight, scope="tight")
    assert [c.status for c in inline.compactions] == ["compacted"]
    assert inline.estimate.tokens <= inline.budget.safe_input_limit


async def test_a_steady_append_reads_nothing_twice_y1(store):
    # Y1, issue 26: a resent list with one new message is one write transaction, and the
    # node rows it needs are read once (the new node's depth is not read back).
    from sqlalchemy import event

    mirror = Mirror(store, background=False)
    msgs = [user("hi"), assistant("hello"), user("next")]
    first = await mirror.sync(msgs, capacity=BIG)
    await mirror.record_reply(first, assistant("ok"))
    statements: list[str] = []

    def seen(_conn, _cursor, sql, *_args):
        statements.append(" ".join(sql.split()))

    engine = store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        await mirror.sync([*msgs, assistant("ok"), user("and then?")], capacity=BIG)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    begins = [s for s in statements if s.upper().startswith("BEGIN")]
    node_reads = [s for s in statements if s.startswith("SELECT nodes.id, nodes.parent_id")]
    assert len(begins) <= 1  # one write transaction (PostgreSQL's BEGIN is implicit)
    assert len(node_reads) <= 1, node_reads


async def test_sessions_of_one_scope_each_keep_what_they_stored_y1(store):
    # Y1, issue 26: two conversations under one scope (one client key), in turns: each
    # request tells the store the node ids its session stored last (`known`), so the store
    # looks up the list from its last known message only, not all of it again.
    mirror = Mirror(store, background=False)
    big = ModelCapacity(model="test-model", context_window=200_000, max_output=1_000)
    seen: list[tuple[int, int]] = []
    extend = store.mirror_extend

    async def spy(session_id, hashes, messages, **kwargs):
        seen.append((len(hashes), len(kwargs.get("known", ()))))
        return await extend(session_id, hashes, messages, **kwargs)

    store.mirror_extend = spy
    lists = {c: [user(f"conversation {c}"), *long_history(2, size=20)] for c in "ab"}
    for turn in range(3):
        for c, msgs in lists.items():
            msgs.append(user(f"{c} turn {turn}"))
            seen.clear()
            synced = await mirror.sync(msgs, capacity=big, scope="one-key")
            if turn:  # all but the new user message were known (the reply was recorded)
                assert seen[0] == (len(msgs), len(msgs) - 1), (turn, c, seen)
            await mirror.record_reply(synced, assistant(f"ok {turn}"))
            msgs.append(assistant(f"ok {turn}"))
    await check_store(store)


def _shape(nodes) -> list[tuple]:
    """A tree's structure and content, independent of node ids and times."""
    from contextfold.core.values.content_chain import message_key

    order = {n.id: i for i, n in enumerate(nodes)}
    return [(order.get(n.parent_id), n.kind,
             None if n.message is None else message_key(n.message)) for n in nodes]


async def test_a_deferred_user_message_is_stored_with_its_reply_y1(store):
    # Y1, E1, issue 26 (`Mirror(defer=True)`, the proxy's): in the steady loop a new user
    # message is named and sent, and stored with its reply in the reply's one write; the
    # tree is the one a mirror that stores it at once builds, node for node.
    trees = {}
    for defer in (False, True):
        mirror = Mirror(store, background=False, defer=defer)
        calls: list[str] = []
        extend = store.mirror_extend

        async def spy(*args, _calls=calls, _extend=extend, **kwargs):
            _calls.append("write")
            return await _extend(*args, **kwargs)

        store.mirror_extend = spy
        msgs = [user("open"), assistant("ok"), user("first")]
        synced = await mirror.sync(msgs, capacity=BIG, scope=f"d{defer}")
        await mirror.record_reply(synced, assistant("one", usage=usage(40)))
        msgs.append(assistant("one"))
        writes = []
        for turn in range(4):
            msgs.append(user(f"turn {turn}"))
            calls.clear()
            synced = await mirror.sync(msgs, capacity=BIG, scope=f"d{defer}")
            in_sync = len(calls)
            node = await mirror.record_reply(synced, assistant(f"r{turn}", usage=usage(60)))
            writes.append((in_sync, len(calls) - in_sync))
            assert synced.deferred is None or synced.deferred.id == synced.node_ids[-1]
            if synced.deferred is not None:  # stored under the id it was sent with
                assert node.parent_id == synced.deferred.id
            msgs.append(assistant(f"r{turn}"))
        store.mirror_extend = extend
        assert writes == ([(0, 1)] * 4 if defer else [(1, 1)] * 4)
        trees[defer] = _shape(await store.load_tree(synced.session_id))
        branch = await store.load_branch(synced.session_id)
        assert [n.message.usage.input for n in branch.nodes
                if n.message is not None and n.message.role == "assistant" and
                n.message.usage is not None][-1] == 60  # E1: the usage came with the reply
    assert trees[True] == trees[False]
    await check_store(store)


async def test_a_deferred_message_without_a_reply_is_stored_alone_y1(store):
    # Y1, issue 26: no reply comes (an upstream error): the deferred message is stored by
    # itself, under its id, before the session's next request is looked at; resent, it is
    # not stored twice.
    mirror = Mirror(store, background=False, defer=True)
    msgs = [user("open"), assistant("ok"), user("first")]
    synced = await mirror.sync(msgs, capacity=BIG)
    await mirror.record_reply(synced, assistant("one"))
    msgs += [assistant("one"), user("this one fails upstream")]
    failed = await mirror.sync(msgs, capacity=BIG)
    assert failed.deferred is not None
    mirror.expect_reply(failed)
    mirror.no_reply(failed)
    await mirror.wait_idle(failed.session_id)
    tree = await store.load_tree(failed.session_id)
    stored = [n for n in tree if n.id == failed.deferred.id]
    assert stored and stored[0].message.parts[0].text == "this one fails upstream"
    again = await mirror.sync(msgs, capacity=BIG)  # the client retries the same list
    assert again.deferred is None and again.appended == 0
    assert again.node_ids[-1] == failed.deferred.id
    assert len(await store.load_tree(failed.session_id)) == len(tree)
    await check_store(store)


async def test_a_background_compaction_is_seen_before_deferring_a1(store):
    # A1, issue 26: after the auto check compacted between turns, the next request is sized
    # from the branch with its checkpoint (read again), never from the one held before.
    mirror = Mirror(store, background=True, defer=True)
    cap = ModelCapacity(model="test-model", context_window=16_000, max_output=1_000)
    msgs = long_history(5)[:-1]
    synced = await mirror.sync(msgs, capacity=cap)
    await mirror.record_reply(synced, assistant("done " + "y" * 900, usage=usage(14_500)))
    await mirror.wait_idle(synced.session_id)
    assert [o.status for o in mirror.auto_outcomes] == ["compacted"]
    nxt = await mirror.sync([*msgs, assistant("done " + "y" * 900), user("go on")],
                            capacity=cap)
    assert nxt.projection.checkpoint is not None and not nxt.compactions
