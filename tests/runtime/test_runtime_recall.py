"""Recall in the runtime (SPEC L2, L3, L4) over real HTTP on both wire protocols: the tools are
offered by default, answered inside the tool loop, bounded, and confined to the branch; the
checkpoint tells the model about them and names what the ledger evicted."""

from __future__ import annotations

import json

import pytest

from contextfold.core.values.messages import (
    Checkpoint,
    Ledger,
    LedgerEntry,
    ToolCallPart,
    ToolResultPart,
)
from contextfold.core.view.projection import EVICTED_LIST_CHARS, RECALL_NOTE, checkpoint_text
from contextfold.providers import ToolSpec
from contextfold.runtime.recall import HISTORY_EXPAND, HISTORY_SEARCH, Recall
from tests.builders import assistant, user
from tests.fakeserver import Reply, ToolCallSpec
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    chat_requests,
    open_conversation,
    runtime_fixtures,
)

store, close_models, fake = runtime_fixtures()

KEY = "K7QX4M2P"


def _tool_names(request) -> list[str]:
    tools = request.body.get("tools") or []
    return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


def _tool_outputs(request) -> list[str]:
    """Tool result texts in a recorded request, whatever the wire shape."""
    out = []
    for m in request.messages:
        if m.get("role") == "tool":
            out.append(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
        elif isinstance(m.get("content"), list):
            for block in m["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    out.append(content if isinstance(content, str) else
                               "".join(b.get("text", "") for b in content or []))
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tools_offered_by_default_in_both_wire_shapes(fake, store, protocol):  # L2
    fake.enqueue(Reply(text="hi"))
    conv = await open_conversation(store, fake, protocol, tools=[ToolSpec("zotero_get")])
    await conv.send("hello")
    names = _tool_names(chat_requests(fake)[-1])
    assert names == ["zotero_get", HISTORY_SEARCH, HISTORY_EXPAND]
    shape = chat_requests(fake)[-1].body["tools"][1]
    if protocol == "openai":
        assert shape["type"] == "function" and "query" in shape["function"]["parameters"][
            "properties"]
    else:
        assert "query" in shape["input_schema"]["properties"]
    await conv.close()


async def test_opting_out_offers_no_recall_tools(fake, store):  # L2
    fake.enqueue(Reply(text="hi"))
    conv = await open_conversation(store, fake, "openai", recall=False)
    await conv.send("hello")
    assert _tool_names(chat_requests(fake)[-1]) == []
    assert conv.recall is None and conv.tools == ()
    await conv.close()


async def test_a_tool_named_like_recall_is_refused(fake, store):  # L2
    with pytest.raises(ValueError, match="recall tools"):
        await open_conversation(store, fake, "openai", tools=[ToolSpec(HISTORY_SEARCH)])


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_model_searches_and_expands_compacted_history(fake, store, protocol):  # L2 L1
    conv = await open_conversation(store, fake, protocol)
    fake.enqueue(Reply(text="Opened it."), Reply(text="ok"), Reply(text="ok"))
    await conv.send(f"Please open Zotero item {KEY}; never overwrite notes/plan.md")
    await conv.send("second question about methods")
    await conv.send("third question about results")
    outcome = await conv.compact()
    assert outcome.status == "compacted"
    first = (await conv.history()).nodes[0]
    assert first.id not in {n.id for n in conv.projection().messages}

    fake.enqueue(Reply(tool_calls=(ToolCallSpec(HISTORY_SEARCH, {"query": KEY}),)))
    fake.enqueue(Reply(tool_calls=(ToolCallSpec(HISTORY_EXPAND, {"node_id": first.id}),)))
    fake.enqueue(Reply(text=f"The item was {KEY}."))
    result = await conv.send("Which Zotero item did I ask about first?")
    assert result.turn_complete and KEY in result.text
    roles = [n.message.role for n in result.nodes]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]

    search = json.loads(result.nodes[2].message.tool_results[0].output)
    (match,) = search["matches"]
    assert match["node_id"] == first.id and match["turn"] == 1 and match["position"] == 0
    assert KEY in match["snippet"] and match["in_context"] is False
    expand = json.loads(result.nodes[4].message.tool_results[0].output)
    assert expand["truncated"] is False
    assert expand["messages"][0]["node_id"] == first.id
    assert "never overwrite notes/plan.md" in expand["messages"][0]["text"]
    # The model really received both results.
    outputs = " ".join(_tool_outputs(chat_requests(fake)[-1]))
    assert first.id in outputs and "never overwrite" in outputs
    await conv.close()


async def test_recall_calls_are_answered_even_without_a_tool_runner(fake, store):  # L2
    conv = await open_conversation(store, fake, "openai")
    fake.enqueue(Reply(text="ok"))
    await conv.send("the magic word is xylophone")
    fake.enqueue(Reply(tool_calls=(ToolCallSpec(HISTORY_SEARCH, {"query": "xylophone"}),
                                   ToolCallSpec("zotero_get", {"key": KEY}))))
    result = await conv.send("search and fetch")
    # Recall answered by the runtime; only the application's call waits.
    assert [c.name for c in result.pending_tool_calls] == ["zotero_get"]
    answered = result.nodes[-1].message.tool_results[0]
    assert answered.name == HISTORY_SEARCH and "xylophone" in answered.output
    assert json.loads(answered.output)["matches"][0]["in_context"] is True
    await conv.add_tool_results([ToolResultPart(call_id=result.pending_tool_calls[0].id,
                                                output="item")])
    fake.enqueue(Reply(text="done"))
    assert (await conv.continue_turn()).text == "done"
    await conv.close()


async def test_bad_recall_arguments_come_back_as_tool_errors(fake, store):  # L2
    conv = await open_conversation(store, fake, "anthropic")
    fake.enqueue(Reply(tool_calls=(ToolCallSpec(HISTORY_EXPAND, {"node_id": "nope"}),
                                   ToolCallSpec(HISTORY_SEARCH, {"query": "?!"}),
                                   ToolCallSpec(HISTORY_SEARCH, {}))),
                 Reply(text="sorry"))
    result = await conv.send("look something up")
    errors = result.nodes[2].message.tool_results
    assert all(r.is_error for r in errors)
    assert "not on the branch" in errors[0].output
    assert "nothing to search" in errors[1].output
    assert "query is required" in errors[2].output
    assert result.text == "sorry"
    await conv.close()


async def test_fork_recall_never_sees_the_parent_branch(fake, store):  # L4
    conv = await open_conversation(store, fake, "openai")
    fake.enqueue(Reply(text="shared answer"), Reply(text="original only walrus"))
    shared = await conv.send("shared question")
    await conv.send("original branch")
    forked = await conv.fork(shared.nodes[-1].id)
    found = await forked.recall.search("walrus")
    assert found["matches"] == [] and found["match"] == "none"
    assert (await forked.recall.search("shared"))["matches"]
    assert (await conv.recall.search("walrus"))["matches"]
    assert [t.name for t in forked.tools] == [HISTORY_SEARCH, HISTORY_EXPAND]
    await forked.close()
    await conv.close()


# --------------------------------------------------------------------------- expand budget


async def test_expand_is_bounded_and_says_when_it_cut(store):  # L2
    info = await store.create_session()
    big = "word " * 3000
    nodes = await store.append_many(info.id, [user("start"), assistant(big), user("end")])
    recall = Recall(store, info.id, expand_tokens=300)
    out = await recall.expand(nodes[0].id, after=2)
    assert out["truncated"] is True and "cut at the budget of 300 tokens" in out["note"]
    assert [m["node_id"] for m in out["messages"]] == [nodes[0].id, nodes[1].id]
    assert "omitted" in out["messages"][1]["text"]
    total = sum(recall.count(m["text"]) for m in out["messages"])
    assert total <= 300 + 50  # the clip marker may overshoot by a little
    whole = await Recall(store, info.id, expand_tokens=10_000).expand(nodes[0].id, after=2)
    assert whole["truncated"] is False and len(whole["messages"]) == 3
    # A call may ask for less than the cap, never for more.
    call = ToolCallPart(id="c", name=HISTORY_EXPAND,
                        input={"node_id": nodes[0].id, "after": 2, "max_tokens": 10**6})
    answered = json.loads((await recall.run(call)).output)
    assert answered["budget_tokens"] == 300


# --------------------------------------------------------------------------- L3 checkpoint


def test_checkpoint_tells_the_model_about_recall_and_names_evictions():  # L3
    evicted = tuple(LedgerEntry(kind="path", value=f"/data/file{i}.csv") for i in range(80))
    cp = Checkpoint(summary="summary", first_kept_id=None, tokens_before=10,
                    ledger=Ledger(entries=(LedgerEntry(kind="doi", value="10.1/x"),),
                                  evicted=evicted))
    body = checkpoint_text(cp)
    assert RECALL_NOTE in body and "history_search" in body
    line = next(ln for ln in body.splitlines() if ln.startswith("In the history"))
    assert "/data/file79.csv" in line  # the last evicted (most critical) first
    assert line.endswith("more") and len(line) <= EVICTED_LIST_CHARS + 120
    plain = checkpoint_text(cp.model_copy(update={"ledger": Ledger()}))
    assert RECALL_NOTE in plain and "In the history" not in plain
