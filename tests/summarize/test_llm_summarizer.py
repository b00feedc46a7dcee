"""The LLM summariser against the fake provider: real SDKs, real HTTP, real token counts."""

from __future__ import annotations

import pytest

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.render.serialize import serialize_nodes, split_into_chunks
from contextfold.core.sizing.estimator import estimate_text
from contextfold.core.values.messages import Ledger, Node
from contextfold.providers import AnthropicModel, OpenAICompatModel, RetryPolicy
from contextfold.summarize.extractive import summarize_extractive, summary_token_budget
from contextfold.summarize.llm import FALLBACK, LlmSummarizer
from contextfold.summarize.prompts import SUMMARY_SYSTEM_PROMPT
from contextfold.summarize.validate import validate_summary
from tests.builders import chain, turn
from tests.fakeserver import Reply, server_fixture

fake = server_fixture()

CHAT = ModelCapacity(model="chat-model", context_window=200_000, max_output=16_384)
SMALL_SUMMARISER = ModelCapacity(model="small-summariser", context_window=6_000,
                                 max_output=1_000)
GARBAGE = "I'm sorry, but I can't summarise this conversation."


def history(turns: int, size: int = 60) -> list[Node]:
    messages = []
    for i in range(turns):
        messages += turn(i, tools=1, size=size)
    return chain(messages)


def make_plan(nodes: list[Node], *, summariser: ModelCapacity = CHAT, chunk_tokens: int = 50_000,
              previous: str | None = None, instructions: str | None = None,
              profile: str = "research") -> Plan:
    budget = derive_budget(CHAT)
    return Plan(
        trigger="manual", session_leaf_id=nodes[-1].id, branch_revision=3,
        first_kept_id=None, previous_checkpoint_id=None, previous_summary=previous,
        previous_ledger=Ledger(), newly_old=tuple(nodes), kept=(),
        chunks=split_into_chunks(nodes, chunk_tokens), tokens_before=10_000, kept_tokens=0,
        newly_old_tokens=10_000, budget=budget, summarizer_budget=derive_budget(summariser),
        profile=profile, instructions=instructions,  # type: ignore[arg-type]
    )


def openai_model(server, **options):
    options.setdefault("retry", RetryPolicy(max_attempts=1))
    return OpenAICompatModel("gpt-summariser", base_url=server.openai_url, api_key="k",
                             **options)


def assert_valid(outcome, plan):
    assert validate_summary(outcome.text, plan.profile, summary_token_budget(plan)) == []


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_good_summary_first_time(fake, protocol):  # S1, S2, S5
    plan = make_plan(history(3))
    model = (openai_model(fake) if protocol == "openai" else
             AnthropicModel("claude-summariser", base_url=fake.anthropic_url, api_key="k"))
    outcome = await LlmSummarizer(model, CHAT).summarize(plan)
    assert outcome.summarizer == f"llm:{model.model}" and not outcome.fell_back
    assert outcome.attempts == 1 and outcome.problems == ()
    assert_valid(outcome, plan)
    (sent,) = fake.requests
    assert sent.is_summary and sent.system == SUMMARY_SYSTEM_PROMPT
    prompt = sent.messages[-1]["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    assert "<conversation>" in prompt and "question 2 y" not in prompt
    assert "question 2 x" in prompt and "[Assistant]" in prompt
    budget = LlmSummarizer(model, CHAT).output_tokens(plan)
    assert sent.max_tokens == budget  # the hard cap is the whole budget ...
    assert f"under about {budget // 2} tokens" in prompt  # ... the model is asked for half


async def test_garbage_then_good_uses_the_strict_prompt(fake):  # S1
    fake.enqueue(Reply(text=GARBAGE), kind="summary")
    plan = make_plan(history(2))
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert outcome.summarizer == "llm:gpt-summariser" and outcome.attempts == 2
    assert len(outcome.problems) == 1 and "rejected" in outcome.problems[0]
    assert_valid(outcome, plan)
    first, second = (r.messages[-1]["content"] for r in fake.requests)
    assert "IMPORTANT: an earlier answer" not in first
    assert "IMPORTANT: an earlier answer" in second


async def test_garbage_twice_falls_back_to_extractive(fake):  # S1, S5
    fake.enqueue(Reply(text=GARBAGE), Reply(text="## Research Goal\nonly one section"),
                 kind="summary")
    plan = make_plan(history(2))
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert outcome.fell_back and outcome.summarizer == FALLBACK
    assert outcome.attempts == 2 and len(outcome.problems) == 2
    assert "missing sections" in outcome.problems[1]
    assert outcome.text == summarize_extractive(plan)
    assert_valid(outcome, plan)


async def test_timeout_falls_back_without_a_strict_retry(fake):  # S1
    fake.enqueue(Reply(hang=True), kind="summary")
    plan = make_plan(history(2))
    model = openai_model(fake, timeout=0.3)
    outcome = await LlmSummarizer(model, CHAT).summarize(plan)
    assert outcome.fell_back and outcome.attempts == 1
    assert "did not answer in time" in outcome.problems[0]
    assert len(fake.requests) == 1
    assert_valid(outcome, plan)


async def test_provider_errors_are_retried_by_the_adapter_first(fake):  # S1
    fake.enqueue(Reply(status=503), kind="summary")
    model = openai_model(fake, retry=RetryPolicy(max_attempts=2, base_delay=0, jitter=0))
    outcome = await LlmSummarizer(model, CHAT).summarize(make_plan(history(2)))
    assert not outcome.fell_back and outcome.attempts == 1
    assert [r.status for r in fake.requests] == [503, 200]


async def test_multi_chunk_plan_runs_in_order_within_the_summariser_window(fake):  # S4, R3
    window = SMALL_SUMMARISER.context_window
    fake.configure(context_window=window)  # the server refuses anything larger
    nodes = history(12, size=300)
    plan = make_plan(nodes, summariser=SMALL_SUMMARISER, chunk_tokens=1_500)
    assert len(plan.chunks) >= 3
    outcome = await LlmSummarizer(openai_model(fake), SMALL_SUMMARISER).summarize(plan)
    assert not outcome.fell_back and outcome.attempts == len(plan.chunks)
    sent = fake.summary_requests
    assert len(sent) == len(plan.chunks)
    replies: list[str] = []
    for i, (request, chunk) in enumerate(zip(sent, plan.chunks, strict=True)):
        assert request.status == 200
        assert request.prompt_tokens + request.max_tokens <= window
        prompt = request.messages[-1]["content"]
        first_user = next(n.message.text for n in chunk if n.message.role == "user")
        assert first_user[:14] in prompt, f"request {i} carries chunk {i}"
        if i:
            # The running summary of the earlier chunks is what this request updates.
            previous = prompt.split("<previous-summary>\n")[1].split("\n</previous-summary>")[0]
            assert previous == replies[-1]
        else:
            assert "<previous-summary>" not in prompt
        replies.append(request.reply_text)
    assert outcome.text == replies[-1]


async def test_failure_in_a_later_chunk_falls_back_for_the_whole_plan(fake):  # S4
    plan = make_plan(history(8, size=300), chunk_tokens=1_500)
    assert len(plan.chunks) >= 2
    fake.enqueue(Reply(), Reply(status=500), kind="summary")
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert outcome.fell_back and outcome.attempts == 2
    assert outcome.problems[0].startswith(f"chunk 2/{len(plan.chunks)}")
    assert outcome.text == summarize_extractive(plan)


async def test_update_carries_the_previous_summary_and_instructions(fake):  # S4, M6
    previous = summarize_extractive(make_plan(history(1)))
    plan = make_plan(history(2), previous=previous, instructions="keep all DOIs")
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert not outcome.fell_back
    prompt = fake.requests[-1].messages[-1]["content"]
    assert "<previous-summary>" in prompt and previous.splitlines()[0] in prompt
    assert "keep all DOIs" in prompt


async def test_coding_profile_gets_coding_sections(fake):  # S2
    plan = make_plan(history(2), profile="coding")
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert not outcome.fell_back and "## Files Modified" in outcome.text
    assert_valid(outcome, plan)


async def test_fenced_markdown_answer_is_unwrapped(fake):  # S5
    plan = make_plan(history(2))
    good = summarize_extractive(plan)
    fake.enqueue(Reply(text=f"```markdown\n{good}\n```"), kind="summary")
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert not outcome.fell_back and outcome.text == good.strip()


async def test_over_budget_answer_is_rejected(fake):  # B3, S5
    plan = make_plan(history(2))
    budget = LlmSummarizer(openai_model(fake), CHAT).output_tokens(plan)
    bloated = summarize_extractive(plan) + "\n- (inferred) " + "padding " * budget
    fake.enqueue(Reply(text=bloated), kind="summary")
    outcome = await LlmSummarizer(openai_model(fake), CHAT).summarize(plan)
    assert outcome.attempts == 2 and "over its budget" in outcome.problems[0]
    assert estimate_text(outcome.text) <= budget


def test_output_tokens_respect_the_summariser_reserve_and_max_output():  # B3
    plan = make_plan(history(1), summariser=SMALL_SUMMARISER)
    never_called = OpenAICompatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    summariser = LlmSummarizer(never_called, SMALL_SUMMARISER)
    assert summariser.output_tokens(plan) == min(summary_token_budget(plan),
                                                 plan.summarizer_budget.reserve, 1_000)


async def test_chunks_too_big_for_the_summariser_are_clipped_to_fit(fake):  # R3, P3
    # A plan made for a larger summariser: each request must still fit the small window.
    window = SMALL_SUMMARISER.context_window
    fake.configure(context_window=window)
    plan = make_plan(history(20, size=400), summariser=SMALL_SUMMARISER, chunk_tokens=40_000)
    assert len(plan.chunks) == 1
    assert estimate_text(serialize_nodes(plan.newly_old)) > 2 * window
    outcome = await LlmSummarizer(openai_model(fake), SMALL_SUMMARISER).summarize(plan)
    assert not outcome.fell_back, outcome.problems
    (sent,) = fake.summary_requests
    assert sent.status == 200 and sent.prompt_tokens + sent.max_tokens <= window
    assert "characters omitted …]" in sent.messages[-1]["content"]
