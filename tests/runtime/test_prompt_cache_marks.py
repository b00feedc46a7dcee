"""Anthropic prompt-cache marks (SPEC Q3): the library's requests carry `cache_control` on the
system prompt, on the checkpoint that opens the messages after a compaction, and on the last
block, so each turn reads the previous request back from the cache; the prefix before the
moving last mark is byte-stable from one turn to the next (Y4)."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

from contextfold.runtime import Conversation
from contextfold.wire.anthropic_messages import mark_cache_breakpoints
from tests.runtime.test_runtime_support import capacity, chat_model, fill, runtime_fixtures

store, close_models, fake = runtime_fixtures()

SYSTEM = "You are a careful research assistant. " * 20


def marks(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


def unmarked(value: Any) -> Any:
    value = copy.deepcopy(value)

    def strip(v: Any) -> None:
        if isinstance(v, dict):
            v.pop("cache_control", None)
            for x in v.values():
                strip(x)
        elif isinstance(v, list):
            for x in v:
                strip(x)

    strip(value)
    return value


def chats(fake) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.protocol == "anthropic" and not r.is_summary]


async def test_q3_marks_on_system_checkpoint_and_last_block(fake, store):
    conv = await Conversation.open(store, model=chat_model(fake, "anthropic", "fake-200k"),
                                   capacity=capacity(200_000), system=SYSTEM)
    await fill(conv, 3, size=40)
    bodies = chats(fake)
    assert len(bodies) == 3
    for body in bodies:
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert marks(body) == 2
    # Y4: each request is the previous one plus what the turn added (marks aside)
    for before, after in itertools.pairwise(bodies):
        n = len(before["messages"])
        assert unmarked(after["messages"][:n]) == unmarked(before["messages"])
        assert unmarked(after["system"]) == unmarked(before["system"])
    outcome = await conv.compact()
    assert outcome.status == "compacted"
    await fill(conv, 2, size=40)
    after = chats(fake)[-2:]
    for body in after:
        first = body["messages"][0]["content"][0]
        assert "checkpoint" in first["text"] and first["cache_control"]["type"] == "ephemeral"
        assert marks(body) == 3 <= 4
    n = len(after[0]["messages"])
    assert unmarked(after[1]["messages"][:n]) == unmarked(after[0]["messages"])
    await conv.close()


def test_q3_marks_never_on_thinking_or_empty_blocks_and_at_most_three() -> None:
    body = {"system": "s", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "summary"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                          {"type": "thinking", "thinking": "t"}]},
    ]}
    assert mark_cache_breakpoints(body, checkpoint=True) == 3
    last = body["messages"][-1]["content"]
    assert "cache_control" not in last[1] and last[0]["cache_control"]["type"] == "ephemeral"
    empty = {"messages": [{"role": "user", "content": ""}]}
    assert mark_cache_breakpoints(empty, checkpoint=False) == 0
    assert marks(empty) == 0
