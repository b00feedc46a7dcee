"""The fit promise at the margin (SPEC P1-P3, P5): a compaction makes room; a refusal is only
for what no compaction can fit.

A 60-turn research session on a 16k-window model, with user messages of 1-3k tokens (English,
Japanese and code) and tool results of 2-6k, run through `Conversation` with the default
offline summariser against the fake provider over real HTTP (the official OpenAI SDK; the
server counts every request with a real tokenizer and reports usage, so the estimate runs on
usage + delta as in production). The agent's system prompt carries its library's collection
list (~1.5k tokens), as research agents' prompts do. Before P5 this session stopped after a
few turns with `DraftTooLargeError` ("about 12,012 tokens, the safe limit is 12,000; shorten
the message by at least 1 tokens") although the message alone, next to a checkpoint, fitted
with thousands of tokens to spare: the preflight sized the raw tail as if the system prompt
were not in the request (a usage baseline holds it) and as if the checkpoint were no larger
than its summary budget (its header and recall note come on top), and a second compaction
could not move the boundary.
"""

from __future__ import annotations

import json
import random

import pytest

from contextfold.core.models.catalog import capacity_for, default_catalog
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.values.messages import ToolResultPart
from contextfold.evaluate.material import SENTENCES, fulltext
from contextfold.runtime import Conversation
from tests.fakeserver import Reply, ToolCallSpec
from tests.runtime.test_runtime_support import (
    FIXTURES,
    assert_requests_fit,
    chat_model,
    runtime_fixtures,
)

WINDOW = 16_000
TURNS = 60

store, close_models, fake = runtime_fixtures()

_CODE = ("def merge(a, b):\n    out = []\n    while a and b:\n"
         "        out.append(a.pop(0) if a[0] <= b[0] else b.pop(0))\n    return out + a + b\n")
_JA = "この論文の方法論を先行研究と比較し、結論を日本語で三行にまとめてください。"


def _system_prompt() -> str:
    """A research agent's instructions with the user's library listed (real Zotero records)."""
    items = json.loads((FIXTURES / "zotero" / "items_doc.json").read_text())
    lines = ["You are a research assistant working in the user's Zotero library. Cite items "
             "by their Zotero key, quote page numbers, and never invent a reference.",
             "The library holds these items:"]
    for entry in items:
        data = entry["data"]
        creators = ", ".join(c.get("lastName", c.get("name", "")) for c in
                             data.get("creators", []))
        lines.append(f"- {data['key']}: {data.get('title', '')} ({creators}; "
                     f"{data.get('date', '')}) {data.get('abstractNote', '')[:300]}")
    return "\n".join(lines)


def _user_message(rng: random.Random, turn: int, target: int) -> str:
    """A long user message of about `target` tokens: prose, a code paste and Japanese."""
    parts = [f"Turn {turn}: please read item K{turn:03d} and compare it with "
             f"doi:10.{rng.randint(1000, 9999)}/x.{turn}."]
    while estimate_text("\n".join(parts), "gpt") < target:
        parts.append(rng.choice([" ".join(rng.choice(SENTENCES) for _ in range(5)), _CODE,
                                 _JA]))
    return "\n".join(parts)


@pytest.mark.parametrize("seed", [1, 2])
async def test_60_turns_of_long_messages_on_16k_complete_with_the_offline_summary(fake, store,
                                                                                  seed):
    # P1 P2 P3 P5
    rng = random.Random(seed)
    catalog = default_catalog().with_overrides({"gpt-4o": {"context_window": WINDOW}})
    capacity = capacity_for("gpt-4o", catalog=catalog)

    async def run_tools(calls):
        return [ToolResultPart(call_id=c.id, output=fulltext(rng, f"K{c.id}", "Item",
                                                               rng.randint(2_000, 6_000)))
                for c in calls]

    conv = await Conversation.open(
        store, model=chat_model(fake, "openai", "gpt-4o"), capacity=capacity,
        system=_system_prompt(),
        run_tools=run_tools)
    for t in range(TURNS):
        rounds = rng.randint(1, 2)
        fake.enqueue(*[Reply(tool_calls=(ToolCallSpec("zotero_fulltext", {"item": t},
                                                      id=f"c{t}_{r}"),))
                       for r in range(rounds)],
                     Reply(text=f"Read item {t}; next I compare it with the others."),
                     kind="chat")
        result = await conv.send(_user_message(rng, t, rng.randint(1_000, 3_000)))
        assert result.turn_complete
        await conv.wait_idle()
    assert_requests_fit(fake, WINDOW)
    history = await conv.history()
    assert sum(1 for n in history.nodes if n.checkpoint is not None) >= 10
    await conv.close()
