"""Acceptance: a scripted Zotero research agent runs 200 turns with tool calls on a 32k-window
model over real HTTP, for both wire protocols, with the store in SQLite."""

from __future__ import annotations

import json

import pytest

from contextfold.core.models.budget import CompactionSettings
from contextfold.core.render.export import to_openai
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import checkpoint_text
from contextfold.runtime import Conversation
from tests.fakeserver import server_fixture
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    ResearchAgent,
    assert_requests_fit,
    capacity,
    chat_model,
    models_closer,
    store_fixture,
)

WINDOW = 32_000
TURNS = 200
# 200 turns touch about 95 Zotero identifiers (20 items, their DOIs and PDFs, 50
# annotations). With the default settings the ledger (one line per kind, titles dropped
# before any identifier) keeps every one of them on a 32k model.
RESEARCH_SETTINGS = CompactionSettings()

store = store_fixture()
close_models = models_closer()
fake = server_fixture(context_window=WINDOW)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_research_agent_200_turns_on_32k(fake, store, protocol):  # A1 A2 A3 A4 P1 K1 R6
    agent = ResearchAgent()
    conv = await Conversation.open(
        store, model=chat_model(fake, protocol, "fake-32k"), capacity=capacity(WINDOW),
        system="You are a research assistant working inside the user's Zotero library.",
        run_tools=agent.run_tools, settings=RESEARCH_SETTINGS)
    events = conv.events()
    for turn in range(TURNS):
        agent.script(fake, turn)
        result = await conv.send(agent.question(turn))
        assert result.turn_complete and result.compactions == ()  # none at send time
    await conv.wait_idle()
    assert fake.pending_replies == 0  # every scripted tool call was made and answered

    # Never over the window, never an invalid tool sequence (server + independent oracle).
    assert_requests_fit(fake, WINDOW)

    # Compacted automatically, only between turns: every checkpoint hangs off a final reply.
    history = await conv.history()
    assert isinstance(history, Branch)
    checkpoints = [(i, n) for i, n in enumerate(history.nodes) if n.checkpoint is not None]
    assert len(checkpoints) >= 10
    for i, node in checkpoints:
        assert node.checkpoint.details["trigger"] == "auto"
        parent = history.nodes[i - 1].message
        assert parent is not None and parent.role == "assistant" and not parent.tool_calls
    kinds = [e.kind for e in events.pending()]
    assert kinds.count("compaction_finished") == len(checkpoints)
    assert "preflight_blocked" not in kinds and "overflow" not in kinds

    # Every Zotero key the agent used survives: in the latest checkpoint or the raw tail.
    projection = conv.projection()
    visible = checkpoint_text(projection.summary) + json.dumps(
        to_openai(projection).messages, ensure_ascii=False)
    missing = sorted(k for k in agent.used_keys if k not in visible)
    assert missing == []
    await conv.close()
