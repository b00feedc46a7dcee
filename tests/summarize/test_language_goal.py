"""The user's language (SPEC G1) and the Goal section (issue 11): the LLM summary's content
follows the language the user writes in, headings stay canonical, explicit instructions
override; the offline summary keeps the source text; Goal = original goal + the latest
restatement; the demo's ledger shows no titles of papers the session never discussed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.values.messages import text_message
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import checkpoint_text
from contextfold.demo_session import build_research_session
from contextfold.providers.base import ChatRequest, ChatResponse
from contextfold.replay import replay_messages
from contextfold.runtime.summarizers import offline_summarize
from contextfold.summarize.extractive import summarize_extractive
from contextfold.summarize.language import text_language, user_language
from contextfold.summarize.llm import LlmSummarizer
from contextfold.summarize.prompts import (
    RESEARCH_SECTIONS,
    build_summary_request,
    parse_sections,
    summary_skeleton,
)
from tests.builders import assistant, chain, user
from tests.summarize.test_extractive import make_plan

FIXTURES = Path(__file__).parents[1] / "fixtures"
SEED = next((FIXTURES / "seeds").glob("000_*.txt"))


def _japanese_lines() -> list[str]:
    text = SEED.read_text(encoding="utf-8")
    # Prose lines (with kana), not the diagrams between them ("U1 → A1 → U2").
    return [ln.strip() for ln in text.splitlines()
            if len(ln.strip()) > 20 and re.search("[\u3040-\u30ff]", ln)]


# ------------------------------------------------------------------ detection


def test_language_of_real_japanese_and_english_text():  # G1
    lines = _japanese_lines()
    assert lines and all(text_language(ln) == "Japanese" for ln in lines[:30])
    assert text_language("Please open Zotero item K7QX4M2P and check the DOI for me.") == \
        "English"
    # A Japanese request with an English file name and key in it is still Japanese.
    assert text_language("refs/library.bib は上書きしないでください。K7QX4M2P を読んで。") == \
        "Japanese"
    assert text_language("ok") is None


def test_user_language_follows_the_latest_user_messages():  # G1
    nodes = chain([user("Find the papers on plasma physics in my library."),
                   assistant("Found 3."),
                   *[user(line) for line in _japanese_lines()[:4]]])
    assert user_language(nodes) == "Japanese"
    assert user_language(chain([assistant("これは日本語です。")])) is None  # not the user's


# ------------------------------------------------------------------ the LLM summariser


class _ScriptedModel:
    """A local chat model that answers a summary request with a Japanese checkpoint."""

    model = "scripted-ja"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        body = "\n\n".join(f"## {name}\n- (user) 論文 K7QX4M2P を読む。"
                           for name in RESEARCH_SECTIONS)
        return ChatResponse(message=text_message("assistant", body), stop_reason="end_turn")

    def stream(self, request: ChatRequest):  # pragma: no cover - not used by the summariser
        raise NotImplementedError


def _japanese_plan(instructions: str | None = None) -> Plan:
    lines = _japanese_lines()
    nodes = chain([user(lines[0]), assistant("了解しました。"), user(lines[1]),
                   assistant("調べます。")])
    return make_plan(nodes, profile="research", instructions=instructions)


async def test_llm_summary_request_asks_for_the_users_language():  # G1
    model = _ScriptedModel()
    outcome = await LlmSummarizer(model).summarize(_japanese_plan())
    assert not outcome.fell_back  # canonical headings + Japanese content is a valid summary
    assert "論文" in outcome.text
    assert list(parse_sections(outcome.text, "research")) == list(RESEARCH_SECTIONS)
    prompt = model.requests[0].pending[0].text
    assert "Write the bullets in Japanese, the language the user writes in" in prompt
    assert "keep the headings below exactly, in English" in prompt
    assert prompt.endswith(summary_skeleton("research"))  # headings stay canonical


async def test_explicit_instructions_override_the_language():  # G1
    model = _ScriptedModel()
    await LlmSummarizer(model).summarize(_japanese_plan("Write the summary in English."))
    prompt = model.requests[0].pending[0].text
    assert "unless the user's instructions say otherwise" in prompt
    assert "Write the summary in English." in prompt


def test_unknown_language_asks_the_model_to_follow_the_user():  # G1
    req = build_summary_request(profile="coding", conversation_text="x", max_tokens=100)
    assert "Write the bullets in the language the user writes in" in req.prompt


async def test_extractive_summary_keeps_the_source_text():  # G1
    lines = _japanese_lines()
    rule = "引用はAPA形式で書いてください。"
    nodes = chain([user(lines[0]), assistant("了解しました。"), user(rule),
                   assistant("APA形式にします。")])
    text = (await offline_summarize(make_plan(nodes, profile="research"))).text
    sections = parse_sections(text, "research")
    assert lines[0][:40] in sections["Research Goal"]
    assert "(user) 引用はAPA形式で書いてください。" in sections["User Requirements and Constraints"]


# ------------------------------------------------------------------ Goal


def test_goal_is_the_original_and_the_latest_restatement():
    requests = [f"Now compare the findings of paper {i} with the earlier ones, please."
                for i in range(6)]
    msgs = [user("Find the plasma physics papers in my library and summarise them.")]
    for r in requests:
        msgs += [user(r), assistant("Done.")]
    text = summarize_extractive(make_plan(chain(msgs), profile="research"))
    goal = parse_sections(text, "research")["Research Goal"]
    assert goal.splitlines() == [
        "- (user) Find the plasma physics papers in my library and summarise them.",
        f"- (user) Later request: {requests[-1]}",
    ]


def test_goal_update_replaces_the_previous_restatement():  # S4
    previous = "\n\n".join([
        "## Research Goal\n- (user) ORIGINAL GOAL\n- (user) Later request: OLD RESTATEMENT",
        *[f"## {name}\n- (none)" for name in RESEARCH_SECTIONS[1:]],
    ])
    nodes = chain([user("Now write the related-work section from the notes, please."),
                   assistant("Written.")])
    text = summarize_extractive(make_plan(nodes, profile="research", previous_summary=previous))
    goal = parse_sections(text, "research")["Research Goal"]
    assert goal.splitlines() == [
        "- (user) ORIGINAL GOAL",
        "- (user) Later request: Now write the related-work section from the notes, please.",
    ]


# ------------------------------------------------------------------ demo ledger


def test_demo_ledger_shows_no_titles_of_papers_never_discussed():
    messages = build_research_session()
    cap = ModelCapacity(model="demo-16k", context_window=16_384, max_output=4_096)
    report = replay_messages([(f"d{i}", m) for i, m in enumerate(messages)], cap,
                             derive_budget(cap), lambda plan: (summarize_extractive(plan),
                                                               "extractive"))
    last = [n for n in report.chain if n.checkpoint is not None][-1].checkpoint
    assert last is not None
    items = {i["key"]: i["data"]["title"] for i in
             json.loads((FIXTURES / "zotero" / "items_doc.json").read_text())}
    # Discussed: named by the user or the assistant, or read one by one with a tool call.
    said = " ".join(json.dumps(m.model_dump(mode="json"), ensure_ascii=False)
                    for m in messages if m.role in ("user", "assistant"))
    never = [k for k in items if k not in said]
    assert len(never) >= 10
    ledger = checkpoint_text(last).split("## Identifier Ledger")[1]
    for key in never:
        assert key in ledger  # the key itself is kept...
        assert f"{key} (" not in ledger  # ... without the title of a paper never discussed
    assert Branch(nodes=tuple(report.chain))  # the replayed history is a valid branch
