"""Acceptance (issue 11): a 60-turn Zotero research session on a 16k model keeps >= 90% of
its identifiers in the next request, with the offline and with the LLM summariser.

The session is the benchmark's (`bench.continuity_sessions.research_session`): every user
message names one Zotero key and a DOI or a file path (120 identifiers), tool results are
2-6k tokens (by contextfold's estimator for gpt-4o; about a third fewer by o200k). The
model is gpt-4o from the packaged catalog with an override of its window to 16,000, served
by the fake provider over real HTTP (OpenAI wire protocol).

Honesty of the LLM case: the fake model's summaries are "canned" (no identifier, no quote
from the request), and the test checks that they are; so every identifier in the next
request is there because contextfold put it there (ledger, raw tail), not because the
fake echoed what it was sent.
"""

from __future__ import annotations

import re

import pytest
from bench.continuity import _tool_runner
from bench.continuity_sessions import long_research_session, research_session

from contextfold.core.models.catalog import capacity_for, default_catalog
from contextfold.runtime import Conversation
from contextfold.summarize.llm import LlmSummarizer
from tests.fakeserver import Reply, ToolCallSpec, server_fixture
from tests.fakeserver.summaries import request_text
from tests.runtime.test_runtime_support import (
    assert_requests_fit,
    chat_model,
    models_closer,
    store_fixture,
)

WINDOW = 16_000
TURNS = 60

store = store_fixture()
close_models = models_closer()
fake = server_fixture(context_window=WINDOW, summary_style="canned")


async def _play(conv, fake, session) -> None:
    """Every scripted turn of `session` through `conv`: the model's tool calls, then its
    reply; each turn complete and the automatic compaction after it settled."""
    for t, turn in enumerate(session.turns):
        replies = [Reply(tool_calls=(ToolCallSpec(r.name, r.arguments, id=f"call_{t}_{i}"),),
                         text=r.text or None) for i, r in enumerate(turn.rounds)]
        fake.enqueue(*replies, Reply(text=turn.reply), kind="chat")
        assert (await conv.send(turn.user)).turn_complete
        await conv.wait_idle()


def _gpt4o_16k():
    catalog = default_catalog().with_overrides({"gpt-4o": {"context_window": WINDOW}})
    return capacity_for("gpt-4o", catalog=catalog)


@pytest.mark.parametrize("summariser", ["offline", "llm"])
async def test_60_turn_research_session_on_16k_keeps_its_identifiers(fake, store, summariser):
    session = research_session(TURNS)
    identifiers = [f.text for f in session.facts if f.identifier]
    assert len(identifiers) == 2 * TURNS  # one key + one DOI or path per user message
    capacity = _gpt4o_16k()
    assert (capacity.model, capacity.context_window) == ("gpt-4o", WINDOW)
    model = chat_model(fake, "openai", "gpt-4o")
    conv = await Conversation.open(
        store, model=model, capacity=capacity, system=session.system,
        run_tools=_tool_runner(session),
        summarizer=LlmSummarizer(chat_model(fake, "openai", "gpt-4o"), capacity)
        if summariser == "llm" else None)
    await _play(conv, fake, session)
    fake.enqueue(Reply(text="We continue with the bibliography."), kind="chat")
    await conv.send("Where are we? Continue.")
    history = await conv.history()
    checkpoints = [n.checkpoint for n in history.nodes if n.checkpoint is not None]
    assert len(checkpoints) >= 15  # the session really went through many compactions
    assert_requests_fit(fake, WINDOW)

    last = [r for r in fake.requests if not r.is_summary][-1]
    sent = request_text(last.body)
    kept = [i for i in identifiers if i in sent]
    assert len(kept) >= 0.9 * len(identifiers), sorted(set(identifiers) - set(kept))

    summaries = [r for r in fake.requests if r.is_summary]
    if summariser == "llm":
        assert summaries and {c.summarizer for c in checkpoints} == {"llm:gpt-4o"}
        # The fake model's summaries carry none of the identifiers: the ledger did it.
        for r in summaries:
            assert not any(i in (r.reply_text or "") for i in identifiers)
    else:
        assert not summaries and {c.summarizer for c in checkpoints} == {"extractive"}
    await conv.close()


# --------------------------------------------------------------------------- issue 27


@pytest.mark.parametrize("window", [16_000, 32_000])
async def test_80_turn_session_keeps_the_users_decision_and_next_step(fake, store, window):
    """Issue 27's done-when: facts planted once each, early, inside long user messages
    (1-3k tokens of English, Japanese and code; tool results 2-6k) are in the request that
    follows an 80-turn session, through `Conversation` with the offline summariser: the
    decision stated in passing and the next step with its two Zotero keys too (S6)."""
    fake.reset(context_window=window, summary_style="canned")
    session = long_research_session(80)
    catalog = default_catalog().with_overrides({"gpt-4o": {"context_window": window}})
    capacity = capacity_for("gpt-4o", catalog=catalog)
    conv = await Conversation.open(store, model=chat_model(fake, "openai", "gpt-4o"),
                                   capacity=capacity, system=session.system,
                                   run_tools=_tool_runner(session))
    await _play(conv, fake, session)
    fake.enqueue(Reply(text="We continue."), kind="chat")
    await conv.send("Where are we? Continue with what we planned.")
    assert_requests_fit(fake, window)
    history = await conv.history()
    checkpoints = [n.checkpoint for n in history.nodes if n.checkpoint is not None]
    assert len(checkpoints) >= 20
    sent = request_text([r for r in fake.requests if not r.is_summary][-1].body)
    planted = {f.category: f.text for f in session.facts if not f.identifier}
    missing = {c: text for c, text in planted.items() if text not in sent}
    assert not missing, missing  # S6: decision, next step, constraint, language, error
    for key in (f.text for f in session.facts if f.turn == 4 and f.identifier):
        assert key in sent
    # S6: every checkpoint after the planting carried the decision and the next step (or
    # named them as evicted); each check is stored with its checkpoint.
    for cp in checkpoints[2:]:
        check = cp.details["check"]
        assert check["ungrounded"] == []
        evicted = {e["text"]: e["node_id"] for e in check["evicted"]}
        for fact in (planted["decision"], planted["continuation"]):
            assert fact in cp.summary or (fact in evicted and evicted[fact] in cp.summary)
    await conv.close()


# --------------------------------------------------------------------------- issue 37


# A line of content (not a "(none)" or an "omitted" note).
_CONTENT = r"^- (?:\[.\] )?(?:\((?:user|tool|inferred|pasted)\)|\[Recall\])"


def _pressured_session(turns: int):
    """Issue 37's session: 1-3k-token user messages (English, Japanese and code) each
    naming a Zotero key and a DOI or a file path, a natural rule (written by hand before the
    code, no cue word in common) in most of them."""
    import dataclasses
    import json
    import random
    from pathlib import Path

    from contextfold.evaluate.material import Prose

    rules = json.loads((Path(__file__).parents[1] / "fixtures" / "user_words" /
                        "natural_rules.json").read_text(encoding="utf-8"))
    session = research_session(turns)
    prose = Prose(random.Random(37))
    out = []
    for t, turn in enumerate(session.turns):
        said = [rules[t % len(rules)]["text"]] if t % 4 != 3 else []
        body = prose.paragraph(random.Random(t).randint(1_000, 3_000), said)
        out.append(dataclasses.replace(turn, user=f"{turn.user}\n\n{body}"))
    return dataclasses.replace(session, turns=out)


@pytest.mark.parametrize("summariser", ["offline", "llm"])
async def test_s9_fair_shares_under_pressure_at_16k(fake, store, summariser):
    """S9: long user messages with a rule in most of them do not take the identifiers'
    room: >= 90% of the identifiers are in the next request at 16k, with either
    summariser, and every kind of content is present in the latest checkpoint."""
    turns = 40
    session = _pressured_session(turns)
    identifiers = [f.text for f in session.facts if f.identifier]
    assert len(identifiers) == 2 * turns
    capacity = _gpt4o_16k()
    conv = await Conversation.open(
        store, model=chat_model(fake, "openai", "gpt-4o"), capacity=capacity,
        system=session.system, run_tools=_tool_runner(session),
        summarizer=LlmSummarizer(chat_model(fake, "openai", "gpt-4o"), capacity)
        if summariser == "llm" else None)
    await _play(conv, fake, session)
    fake.enqueue(Reply(text="We continue."), kind="chat")
    await conv.send("Where are we? Continue.")
    assert_requests_fit(fake, WINDOW)
    sent = request_text([r for r in fake.requests if not r.is_summary][-1].body)
    kept = [i for i in identifiers if i in sent]
    assert len(kept) >= 0.9 * len(identifiers), sorted(set(identifiers) - set(kept))
    history = await conv.history()
    latest = [n.checkpoint for n in history.nodes if n.checkpoint is not None][-1]
    from contextfold.summarize.prompts import parse_sections

    sections = parse_sections(latest.summary, latest.profile)
    kinds = {"goal and the user's words": ("Research Goal", "User Requirements and Constraints"),
             "progress": ("Research Progress",),
             "findings": ("Findings and Evidence", "Key Zotero Resources"),
             "decisions": ("Decisions",), "next steps": ("Next Steps",),
             "critical context": ("Critical Context",)}
    absent = [kind for kind, names in kinds.items()
              if not any(re.search(_CONTENT, sections[name], re.MULTILINE) for name in names)]
    if summariser == "offline":
        # Known miss (issue 37, docs/benchmarks.md): at 16k the offline summary of these
        # 1-3k-token messages keeps the user's words, decisions, next steps and critical
        # context, but its many small lists' "omitted" notes leave progress and findings
        # no item. Held apart as a strict xfail below, so the day it passes is noticed.
        absent = [kind for kind in absent if kind not in ("progress", "findings")]
    assert not absent, (absent, latest.summary)
    assert latest.ledger.entries  # the identifiers kept their share
    await conv.close()


@pytest.mark.xfail(strict=True, reason="issue 37: at 16k the offline summary of 1-3k-token "
                   "messages leaves progress and findings no item (their notes cost more)")
async def test_s9_offline_keeps_every_kind_at_16k(fake, store):
    session = _pressured_session(24)
    capacity = _gpt4o_16k()
    conv = await Conversation.open(
        store, model=chat_model(fake, "openai", "gpt-4o"), capacity=capacity,
        system=session.system, run_tools=_tool_runner(session))
    await _play(conv, fake, session)
    history = await conv.history()
    latest = [n.checkpoint for n in history.nodes if n.checkpoint is not None][-1]
    from contextfold.summarize.prompts import parse_sections

    sections = parse_sections(latest.summary, latest.profile)
    await conv.close()
    for name in ("Research Progress", "Findings and Evidence"):
        assert re.search(_CONTENT, sections[name], re.MULTILINE), name
