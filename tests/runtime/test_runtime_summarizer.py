"""A summariser that returns garbage, an error text, an HTTP error or nothing in time never
gets an invalid checkpoint committed: the offline summary is used and recorded (SPEC S2, S5)."""

from __future__ import annotations

import pytest

from contextfold.core.planning.plan import Plan
from contextfold.runtime import Conversation, GuardedSummarizer
from contextfold.runtime.summarizers import as_summarize
from contextfold.summarize.llm import FALLBACK, LlmSummarizer, SummaryOutcome
from contextfold.summarize.prompts import sections_for
from contextfold.summarize.summary import Summary
from contextfold.summarize.validate import validate_summary
from tests.fakeserver import Reply
from tests.runtime.test_runtime_support import (
    PROTOCOLS,
    capacity,
    chat_model,
    fill,
    runtime_fixtures,
)

store, close_models, fake = runtime_fixtures()

WINDOW = 200_000


async def _open(store, fake, protocol, **options):
    model = chat_model(fake, protocol, "fake-200k")
    summarizer = LlmSummarizer(model, capacity(WINDOW))
    conv = await Conversation.open(store, model=model, capacity=capacity(WINDOW),
                                   summarizer=summarizer, **options)
    await fill(conv, 3, size=30)
    return conv


def _committed(conv):
    checkpoint = conv.branch.leaf.checkpoint
    assert checkpoint is not None
    return checkpoint


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_llm_summary_is_committed_when_valid(fake, store, protocol):  # S1 S2
    conv = await _open(store, fake, protocol)
    outcome = await conv.compact()
    assert outcome.status == "compacted" and outcome.summarizer == "llm:fake-200k"
    checkpoint = _committed(conv)
    assert checkpoint.summarizer == "llm:fake-200k"
    # A chat without tools gets the general profile (S10): no library, no files.
    assert checkpoint.profile == "general"
    assert all(f"## {s}" in checkpoint.summary for s in sections_for("general"))
    assert "## Key Zotero Resources" not in checkpoint.summary
    assert len(fake.summary_requests) == 1
    await conv.close()


BAD_ANSWERS = {
    "garbage": [Reply(text="lorem ipsum, no sections at all"), Reply(text="still nothing")],
    "error_text": [Reply(text="I'm sorry, but I can't help with that request.")] * 2,
    "http_error": [Reply(status=500)],
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("bad", sorted(BAD_ANSWERS))
async def test_bad_summaries_fall_back_to_the_offline_one(fake, store, protocol, bad):  # S2 S5
    conv = await _open(store, fake, protocol)
    events = conv.events()
    fake.enqueue(*BAD_ANSWERS[bad], kind="summary")
    outcome = await conv.compact()
    assert outcome.status == "compacted" and outcome.summarizer == FALLBACK
    checkpoint = _committed(conv)
    assert checkpoint.summarizer == FALLBACK  # recorded durably
    assert validate_summary(checkpoint.summary, checkpoint.profile, conv.budget.summary_budget) \
        == []
    assert "lorem ipsum, no sections" not in checkpoint.summary
    assert "I'm sorry" not in checkpoint.summary
    fallback = [e for e in events.pending() if e.kind == "summarizer_fallback"]
    assert len(fallback) == 1 and fallback[0].reason
    assert fake.pending_replies == 0  # the strict retry was asked for where it applies
    await conv.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_summary_timeout_falls_back(fake, store, protocol):  # S5 C4
    conv = await _open(store, fake, protocol, summarizer_timeout=0.5)
    events = conv.events()
    fake.enqueue(Reply(delay=20), kind="summary")
    outcome = await conv.compact()
    assert outcome.status == "compacted" and outcome.summarizer == FALLBACK
    (note,) = [e for e in events.pending() if e.kind == "summarizer_fallback"]
    assert "did not answer within 0.5 s" in note.reason
    assert _committed(conv).summarizer == FALLBACK
    await conv.close()


async def _garbage(plan: Plan) -> tuple[str, str]:
    return "## Research Goal\nonly one section", "custom"


async def _raises(plan: Plan) -> tuple[str, str]:
    raise RuntimeError("summariser crashed")


@pytest.mark.parametrize("summarizer", [_garbage, _raises])
async def test_any_summariser_is_guarded(fake, store, summarizer):  # S2 S5
    model = chat_model(fake, "openai", "fake-200k")
    conv = await Conversation.open(store, model=model, capacity=capacity(WINDOW),
                                   summarizer=summarizer)
    await fill(conv, 3, size=30)
    notes = []
    conv.subscribe(lambda e: notes.append(e) if e.kind == "summarizer_fallback" else None)
    outcome = await conv.compact()
    assert outcome.summarizer == FALLBACK and _committed(conv).summarizer == FALLBACK
    assert notes and notes[0].data["summarizer"] in ("_garbage", "_raises")
    await conv.close()


async def test_guard_rejects_objects_that_are_not_summarisers():  # S5
    with pytest.raises(TypeError, match="summarizer must be"):
        GuardedSummarizer(42)


async def test_as_summarize_passes_an_llm_fallback_through():  # S5
    # `contextfold compact --summarizer llm` uses as_summarize without the guard: an
    # LlmSummarizer that fell back must come out as a normal, named result.
    class FellBack:
        async def summarize(self, plan):
            return SummaryOutcome(text="offline text", summarizer=FALLBACK, attempts=2,
                                  problems=("answer rejected",))

    summarize, _ = as_summarize(FellBack())
    summary = await summarize(None)
    assert (summary.text, summary.summarizer) == ("offline text", FALLBACK)
    assert summary.fell_back and summary.fallback_reason == "answer rejected"


@pytest.mark.parametrize("answer", [("text", "mine"), "text", Summary("text", "mine")])
async def test_every_summariser_shape_becomes_one_summary(answer):  # S5
    # A user's own summariser may answer (text, name), a string or a Summary; every face
    # gets one `Summary` from it.
    summarize, name = as_summarize(lambda plan: answer)
    summary = await summarize(None)
    assert isinstance(summary, Summary) and summary.text == "text"
    assert summary.summarizer == ("mine" if not isinstance(answer, str) else name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_q4_the_summarising_requests_cost_is_recorded_and_shown(
        fake, store, protocol, tmp_path, monkeypatch):
    prices = tmp_path / "models.toml"
    prices.write_text('[prices."fake-200k"]\ninput = 1.0\noutput = 2.0\n')
    monkeypatch.setenv("CONTEXTFOLD_MODELS", str(prices))
    conv = await _open(store, fake, protocol)
    outcome = await conv.compact()
    used = _committed(conv).details["summarizer_usage"]
    # the fake server counts the summarising request with a real tokenizer
    assert used["input"] + used["cache_read"] > 500 and used["output"] > 20
    cost = outcome.to_json()["cost"]["summarizer"]
    assert cost["input_tokens"] == used["input"] and cost["output_tokens"] == used["output"]
    assert cost["usd"] == pytest.approx(
        (used["input"] * 1.0 + used["cache_read"] * 1.0 + used["output"] * 2.0) / 1e6)
    await conv.close()


async def test_q4_the_offline_summary_costs_nothing(fake, store):
    model = chat_model(fake, "openai", "fake-200k")
    conv = await Conversation.open(store, model=model, capacity=capacity(WINDOW))
    await fill(conv, 3, size=30)
    outcome = await conv.compact()
    assert outcome.status == "compacted" and outcome.summarizer == "extractive"
    assert outcome.to_json()["cost"]["summarizer"] == {
        "input_tokens": 0, "cached_tokens": 0, "cache_write_tokens": 0,
        "output_tokens": 0, "usd": 0.0, "requests": 0}
    assert "summarizer_usage" not in _committed(conv).details
    assert fake.summary_requests == []
    await conv.close()
