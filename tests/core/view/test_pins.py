"""Pins (SPEC N1-N2): projected verbatim after the checkpoint, within the pin budget; pin
and unpin are durable events whose effect follows ancestry (retry, edit, fork)."""

from __future__ import annotations

import pytest

from contextfold.core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.sizing.estimator import estimate_request
from contextfold.core.values.messages import Node, PinEvent, Usage
from contextfold.core.values.tree import Branch, build_branch
from contextfold.core.view.pins import (
    PINS_HEADER,
    PinRefusedError,
    check_pin_fits,
    fold_pins,
    pin_event,
    pins_text,
)
from contextfold.core.view.projection import project
from tests.builders import (
    assistant,
    branch_of,
    chain,
    extend,
    tool_call,
    tool_result,
    turn,
    user,
)
from tests.runtime.test_runtime_support import (
    chat_requests,
    open_conversation,
    runtime_fixtures,
    words,
)

store, close_models, fake = runtime_fixtures()

CAP = ModelCapacity(model="m", context_window=16_384, max_output=4_096)


def pin_node(node_id: str, text: str, parent: str) -> Node:
    return Node(id=node_id, parent_id=parent, payload=pin_event(node_id, text))


def unpin_node(node_id: str, pin_id: str, parent: str) -> Node:
    return Node(id=node_id, parent_id=parent, payload=PinEvent(action="unpin", pin_id=pin_id))


def session_with_pin(text: str = "Never overwrite data/raw.csv") -> list[Node]:
    nodes = chain(turn(0) + turn(1))
    nodes.append(pin_node("pin-a", text, nodes[-1].id))
    return extend(nodes, turn(2) + turn(3), "b")


def test_pin_is_projected_after_the_checkpoint_verbatim():  # N1
    nodes = session_with_pin("Never overwrite data/raw.csv\n  keep   spacing")
    budget = derive_budget(CAP)
    result = plan_compaction(branch_of(nodes), budget, "manual", capacity=CAP)
    assert isinstance(result, Plan) and [p.pin_id for p in result.pins] == ["pin-a"]
    cp = build_checkpoint(result, "## Goal\nsummary", summarizer="test")
    assert [p.text for p in cp.pins] == ["Never overwrite data/raw.csv\n  keep   spacing"]
    nodes.append(Node(id="cp", parent_id=nodes[-1].id, payload=cp))
    projection = project(branch_of(nodes))
    assert [p.pin_id for p in projection.pins] == ["pin-a"]
    for export, oracle in ((to_openai, openai_problems), (to_anthropic, anthropic_problems)):
        messages = export(projection).messages
        assert oracle(messages) == []
    first = to_openai(projection).messages[0]["content"]
    summary_at = first.index("[contextfold checkpoint]")
    pins_at = first.index(PINS_HEADER)
    assert summary_at < pins_at  # after the checkpoint, before the raw tail
    assert "Never overwrite data/raw.csv\n  keep   spacing" in first
    blocks = to_anthropic(projection).messages[0]["content"]
    assert blocks[1]["text"] == pins_text(projection.pins)


def test_pins_are_projected_without_a_checkpoint_too():  # N1 Q5
    """Without a checkpoint the pin goes where it was made (after turn 1, before turn 2):
    the requests before it keep their cached prefix (SPEC Q5)."""
    projection = project(branch_of(session_with_pin()))
    assert projection.checkpoint is None and len(projection.pins) == 1
    sent = [m["content"] for m in to_openai(projection).messages]
    at = next(i for i, text in enumerate(sent) if PINS_HEADER in text)
    assert "question 1" in " ".join(map(str, sent[:at]))
    assert sent[at].index(PINS_HEADER) < sent[at].index("question 2")
    assert "Never overwrite data/raw.csv" in sent[at]


def test_a_pin_made_in_a_tool_loop_waits_for_the_next_user_message():  # N1 Q5 K1
    """A pin made between a tool call and its result (an agent's own pin_add, over MCP) is
    never anchored between them: that split a call from its result, an invalid request (the
    proxy sent one). It is anchored to the next user message, which comes after everything
    sent meanwhile (SPEC Q5); until then a request's export carries it last, where every
    request is valid."""
    nodes = chain([user("question 0"), tool_call("c1", "read")])
    nodes.append(pin_node("pin-a", "deploy only on Fridays", nodes[-1].id))
    nodes = extend(nodes, [tool_result("c1", "file body"), tool_call("c2", "read"),
                           tool_result("c2", "more")], "a")
    looping = project(branch_of(nodes))
    assert looping.pin_notes[0].before_id is None
    for export, oracle in ((to_openai, openai_problems), (to_anthropic, anthropic_problems)):
        assert oracle(export(looping).messages) == []
    nodes = extend(nodes, [assistant("done"), user("ship it")], "b")
    projection = project(branch_of(nodes))
    assert projection.pin_notes[0].before_id == nodes[-1].id
    for export, oracle in ((to_openai, openai_problems), (to_anthropic, anthropic_problems)):
        messages = export(projection).messages
        assert oracle(messages) == []
        text = str(messages)
        assert text.index("done") < text.index("deploy only on Fridays") < text.index("ship it")
    # Grown at its leaf (a mirrored session), the projection anchors the waiting note the
    # same way: not at a tool result, at the next user message.
    before = branch_of(nodes[:-3])
    assert project(before).pin_notes[0].before_id is None
    grown = before.grown(nodes[-3:-1])
    assert project(grown).pin_notes[0].before_id is None
    assert project(grown.grown(nodes[-1:])).pin_notes == projection.pin_notes


def test_pins_count_in_the_estimate():  # N1 E2
    with_pin = project(branch_of(session_with_pin("keep this " * 50)))
    without = project(branch_of(chain(turn(0) + turn(1) + turn(2) + turn(3))))
    diff = estimate_request(with_pin, CAP).tokens - estimate_request(without, CAP).tokens
    assert diff >= len("keep this " * 50) // 4


def test_pin_after_the_usage_baseline_is_added_to_it():  # N1 E1 E2
    nodes = chain([*turn(0), user("q1"), assistant("a1", usage=Usage(input=500, output=20))])
    before = estimate_request(project(branch_of(nodes)), CAP)
    assert before.method == "usage+delta"
    nodes.append(pin_node("pin-a", "a fact to keep " * 40, nodes[-1].id))
    after = estimate_request(project(branch_of(nodes)), CAP)
    assert after.method == "usage+delta"
    assert after.tokens - before.tokens >= len("a fact to keep " * 40) // 4
    # A reply after the pin was produced with the pin in its request: its usage covers it.
    nodes = extend(nodes, [user("q2"), assistant("a2", usage=Usage(input=900, output=20))], "c")
    covered = estimate_request(project(branch_of(nodes)), CAP)
    assert covered.tokens == 920


def test_pin_budget_refuses_with_the_numbers():  # N1
    budget = derive_budget(CAP)
    assert budget.pin_budget == int(budget.safe_input_limit * 0.1)
    check_pin_fits((), "short note", budget.pin_budget)
    with pytest.raises(PinRefusedError) as info:
        check_pin_fits((), words(budget.pin_budget), budget.pin_budget)
    err = info.value
    assert err.budget_tokens == budget.pin_budget and err.pin_tokens > budget.pin_budget
    assert str(budget.pin_budget) in str(err) and str(err.pin_tokens) in str(err)
    small = derive_budget(CAP, CompactionSettings(pin_share=0.01))
    assert small.pin_budget < budget.pin_budget


def test_pin_budget_counts_the_pins_already_there():  # N1
    pins = fold_pins((), [pin_event("p1", words(120))])
    used = check_pin_fits((), words(120), 10_000)
    with pytest.raises(PinRefusedError) as info:
        check_pin_fits(pins, words(120), used + 10)
    assert info.value.used_tokens == used


def test_unpin_removes_and_the_event_stays():  # N2
    nodes = session_with_pin()
    nodes.append(unpin_node("unpin-a", "pin-a", nodes[-1].id))
    branch = branch_of(nodes)
    assert project(branch).pins == ()
    assert [n.id for n in branch.nodes if n.pin_event is not None] == ["pin-a", "unpin-a"]


def test_checkpoint_carries_pins_so_a_tail_load_projects_them():  # N2 T2
    nodes = session_with_pin()
    budget = derive_budget(CAP)
    first = plan_compaction(branch_of(nodes), budget, "manual", capacity=CAP)
    nodes.append(Node(id="cp1", parent_id=nodes[-1].id,
                      payload=build_checkpoint(first, "## Goal\ns", summarizer="t")))
    nodes = extend(nodes, turn(4) + turn(5), "c")
    second = plan_compaction(branch_of(nodes), budget, "manual", capacity=CAP)
    nodes.append(Node(id="cp2", parent_id=nodes[-1].id,
                      payload=build_checkpoint(second, "## Goal\ns2", summarizer="t")))
    full = branch_of(nodes)
    # The O(tail) load starts at cp2's first kept node: the pin event is not in it.
    tail = build_branch(nodes, "cp2", stop_at=second.first_kept_id)
    assert isinstance(tail, Branch) and not tail.complete
    assert all(n.pin_event is None for n in tail.nodes)
    assert project(tail).pins == project(full).pins and len(project(full).pins) == 1


def test_pin_events_follow_ancestry():  # N2 O1 O3 T5
    base = chain(turn(0) + turn(1))
    fork_point = base[-1].id
    pinned = [*base, pin_node("pin-a", "pinned later", fork_point)]
    pinned = extend(pinned, turn(2), "b")
    assert len(project(branch_of(pinned)).pins) == 1
    # A fork (or retry) from before the pin event does not see it; nothing was copied.
    sibling = extend(base, turn(2), "other")
    assert project(branch_of(sibling)).pins == ()


# --------------------------------------------------------------------------- store + runtime


async def test_conversation_pin_reaches_every_request_and_survives_compaction(fake, store):
    # N1 N2 (runtime, both wire formats' validity checked by the fake server)
    conv = await open_conversation(store, fake, "openai", window=16_000, max_output=2_000)
    await conv.send("first question")
    pin = await conv.pin("Never overwrite data/raw.csv")
    assert conv.pins() == (pin,)
    await conv.send("second question")
    assert "Never overwrite data/raw.csv" in str(chat_requests(fake)[-1].messages)
    outcome = await conv.compact()
    assert outcome.status == "compacted"
    await conv.send("third question")
    last = chat_requests(fake)[-1]
    assert "Never overwrite data/raw.csv" in str(last.messages) and last.status == 200
    await conv.reload()  # O(tail) load from the store: still pinned
    assert [p.pin_id for p in conv.pins()] == [pin.pin_id]
    await conv.unpin(pin.pin_id)
    await conv.send("fourth question")
    # SPEC Q5: the unpin is said where it happened; the pin leaves the cached prefix with
    # the next checkpoint, not before (that would re-bill every message after it).
    sent = str(chat_requests(fake)[-1].messages)
    assert sent.index("unpinned pin 1") > sent.index("third question")
    assert (await conv.compact()).status == "compacted"
    await conv.send("fifth question")
    assert "Never overwrite data/raw.csv" not in str(chat_requests(fake)[-1].messages)
    history = await conv.history()
    events = [n.pin_event.action for n in history.nodes if n.pin_event is not None]
    assert events == ["pin", "unpin"]
    await conv.close()


async def test_conversation_pins_a_message_by_id(fake, store):  # N1
    conv = await open_conversation(store, fake, "anthropic", window=16_000, max_output=2_000)
    result = await conv.send("The deadline is 14 March; cite DOI 10.1000/xyz123.")
    user_id = result.nodes[0].id
    pin = await conv.pin(node_id=user_id)
    assert pin.source_id == user_id and "10.1000/xyz123" in pin.text
    with pytest.raises(ValueError, match="not a message"):
        await conv.pin(node_id="no-such-node")
    with pytest.raises(ValueError, match="no active pin"):
        await conv.unpin("no-such-pin")
    await conv.close()


async def test_conversation_refuses_a_pin_over_budget_and_stores_nothing(fake, store):  # N1
    conv = await open_conversation(store, fake, "openai", window=8_000, max_output=1_000)
    await conv.send("hello")
    before = await conv.history()
    with pytest.raises(PinRefusedError) as info:
        await conv.pin(words(conv.budget.pin_budget))
    assert info.value.budget_tokens == conv.budget.pin_budget
    after = await conv.history()
    assert after.nodes == before.nodes and after.revision == before.revision
    await conv.close()


async def test_retry_after_a_pin_leaves_it_with_the_old_reply(fake, store):  # N2 O1
    conv = await open_conversation(store, fake, "openai", window=16_000, max_output=2_000)
    await conv.send("question")
    await conv.pin("made after the reply")
    assert len(conv.pins()) == 1
    await conv.retry()
    assert conv.pins() == ()  # the pin event is off the new branch, still in the tree
    tree = await store.load_tree(conv.session_id)
    assert any(n.pin_event is not None for n in tree)
    await conv.close()


async def test_fork_inherits_pins_on_its_ancestry(fake, store):  # N2 O3 T5
    conv = await open_conversation(store, fake, "openai", window=16_000, max_output=2_000)
    first = await conv.send("question one")
    await conv.pin("early pin")
    second = await conv.send("question two")
    await conv.pin("late pin")
    late = await conv.fork(second.nodes[-1].id)
    early = await conv.fork(first.nodes[-1].id)
    assert [p.text for p in late.pins()] == ["early pin"]
    assert early.pins() == ()
    assert [p.text for p in conv.pins()] == ["early pin", "late pin"]
    for c in (conv, late, early):
        await c.close()
