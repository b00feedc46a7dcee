"""The LLM summariser: chunked, validated, one stricter retry, then the offline fallback.

For each chunk of a plan, in order, the model gets one summarisation request (SPEC S1):
the first chunk updates the plan's previous summary (or starts fresh), every later chunk
updates the running summary of the chunks before it (S4: one summary, never a stack).
Each answer is validated; an invalid one is asked for once more with the strict prompt.
An answer whose only fault is its size is fitted instead (trimmed by priority, by the
extractive summariser's rules, every trimmed item counted): at once when it is at most
`FIT_SLACK` over, else after the strict retry. If the retry fails too, or the provider
fails (after its own bounded retries), the whole plan is summarised by
`summarize_extractive`, and the outcome says so. A summary is never returned invalid.

Every request is sized to the summariser's window: prompt overhead + running summary +
instructions + one serialised chunk stay under the summariser's safe input limit (by the
conservative estimator), and the answer's `max_tokens` under its reserve.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ..core.models.budget import ModelCapacity
from ..core.planning.plan import Plan
from ..core.render.serialize import SerializeLimits, serialize_chunk
from ..core.sizing.estimator import estimate_text
from ..core.text.text_estimate import Count
from ..core.values.messages import Node, Usage, summed_usage, text_message
from ..providers.base import ChatModel, ChatRequest, ToolSpec
from ..providers.errors import ProviderError
from .extractive import (
    SummaryBudgetTooSmall,
    fit_summary,
    summarize_extractive,
    summary_token_budget,
)
from .language import user_language
from .prompts import PROMPT_OVERHEAD_TOKENS, build_prefix_summary_prompt, build_summary_request
from .summary import FALLBACK, Summary
from .validate import SummaryInvalid, ensure_valid, validate_summary

# Below this many tokens for the serialised chunk a summary request is pointless; the chunk
# is then clipped to it anyway (serialize_chunk never drops a message) and the provider
# decides. Plans made by the planner never get here: it sizes chunks to the window.
MIN_CHUNK_TOKENS = 256
# An answer at most this share over its budget, valid otherwise, is fitted at once (no
# strict retry): a model asked for half the budget that overshoots the whole by a little
# wrote a good summary, and a second request costs as much as the first.
FIT_SLACK = 0.10

_FENCE = re.compile(r"^\s*```[\w-]*\s*\n(.*)\n\s*```\s*$", re.S)


# The LLM summariser's outcome is the one `Summary` value; the old name stays importable.
SummaryOutcome = Summary


# Room for the instruction message's own framing (role, separators) beside its text.
PREFIX_FRAMING_TOKENS = 64


def prefix_fits(tokens_before: int, instruction_tokens: int, answer_tokens: int,
                window: int) -> bool:
    """SPEC Q3: does a summarising request that starts with the session's prefix fit the
    summariser's window: the prefix (`tokens_before`), the instruction with its framing and
    the answer it may write. The one rule `LlmSummarizer.prefix_request` and the replay's
    same-model figure both apply."""
    return tokens_before + instruction_tokens + PREFIX_FRAMING_TOKENS + answer_tokens <= window


class _ChunkFailed(Exception):
    """One chunk could not be summarised by the model; the plan falls back."""


def _unwrap(text: str) -> str:
    """The answer without a code fence some models wrap Markdown in."""
    match = _FENCE.match(text)
    return (match.group(1) if match else text).strip()


class LlmSummarizer:
    """Summarise compaction plans with a chat model (the summariser model)."""

    def __init__(self, model: ChatModel, capacity: ModelCapacity | None = None, *,
                 count: Count = estimate_text, target_share: float = 0.5,
                 session_prefix: bool = False) -> None:
        if not 0 < target_share <= 1:
            raise ValueError(f"target_share must be within (0, 1], got {target_share}")
        self.model = model
        self.capacity = capacity
        self.count = count
        # The validator measures with the conservative estimator, which counts English at
        # about twice a real tokenizer: a model told "under N tokens" that used all N real
        # tokens would be rejected. So the prompt asks for a share of the budget, while
        # max_tokens (the hard cap) and validation use the whole budget.
        self.target_share = target_share
        # SPEC Q3: this model is the session's own, so a summarising request may start with
        # the session's exact prefix and be served from the prompt cache.
        self.session_prefix = session_prefix

    @property
    def name(self) -> str:
        return f"llm:{self.model.model}"

    def __repr__(self) -> str:
        return f"LlmSummarizer(model={self.model!r})"

    # ------------------------------------------------------------------ sizing

    def output_tokens(self, plan: Plan) -> int:
        """`max_tokens` of each request: the summary's share of the budget (SPEC B3),
        capped by the summariser's reserve and its max output."""
        limit = min(summary_token_budget(plan), plan.summarizer_budget.reserve)
        if self.capacity is not None:
            limit = min(limit, self.capacity.max_output)
        return max(1, limit)

    def chunk_tokens(self, plan: Plan, running: str | None) -> int:
        """Room for one serialised chunk next to the prompt, summary and instructions."""
        used = PROMPT_OVERHEAD_TOKENS + self.count(running or "")
        used += self.count(plan.instructions or "")
        return max(MIN_CHUNK_TOKENS, plan.summarizer_budget.safe_input_limit - used)

    # ------------------------------------------------------------------ summarising

    async def summarize(self, plan: Plan) -> Summary:
        """A valid summary of `plan`: from the model if it can, else the offline one."""
        problems: list[str] = []
        attempts = 0
        used: list[Usage] = []  # SPEC Q4: every summarising request's usage
        running = plan.previous_summary
        chunks = plan.chunks or ((plan.newly_old,) if plan.newly_old else ())
        # SPEC G1: the summary's content follows the language the user writes in lately.
        language = user_language((*plan.newly_old, *plan.kept))
        prefixed = self.prefix_request(plan, language)
        if prefixed is not None:  # SPEC Q3: one request, its input read from the cache
            chunks = ()
            try:
                running, attempts = await self._ask(prefixed, plan, self.output_tokens(plan),
                                                    "session prefix", problems, used)
            except _ChunkFailed as failed:
                return self._fallback(plan, failed.args[0], problems, used)
            return Summary(text=running, summarizer=self.name, attempts=attempts,
                           problems=tuple(problems), usage=summed_usage(used))
        try:
            for index, chunk in enumerate(chunks, start=1):
                label = f"chunk {index}/{len(chunks)}"
                # K6: the last chunk ends inside the unfinished turn whose rounds stay raw.
                split = plan.turn_context is not None and index == len(chunks)
                running, tries = await self._chunk(plan, chunk, running, label, problems,
                                                   language, split_turn=split, used=used)
                attempts += tries
        except _ChunkFailed as failed:
            attempts += failed.args[0]
            return self._fallback(plan, attempts, problems, used)
        if running is None or not chunks:
            problems.append("nothing to summarise with the model")
            return self._fallback(plan, attempts, problems, used)
        return Summary(text=running, summarizer=self.name, attempts=attempts,
                       problems=tuple(problems), usage=summed_usage(used))

    async def _chunk(self, plan: Plan, chunk: Sequence[Node], running: str | None,
                     label: str, problems: list[str],
                     language: str | None = None, *, split_turn: bool = False,
                     used: list[Usage] | None = None) -> tuple[str, int]:
        """Summarise one chunk onto `running`; at most two requests (normal, strict)."""
        limit = self.chunk_tokens(plan, running)
        text = serialize_chunk(chunk, limit, SerializeLimits.for_budget(limit), self.count)
        budget = self.output_tokens(plan)
        target = max(1, int(budget * self.target_share))

        def request(strict: bool) -> ChatRequest:
            summary_request = build_summary_request(
                profile=plan.profile, conversation_text=text, previous_summary=running,
                instructions=plan.instructions, max_tokens=target, strict=strict,
                language=language, split_turn=split_turn)
            return ChatRequest(system=summary_request.system,
                               pending=(text_message("user", summary_request.prompt),),
                               max_tokens=budget)

        return await self._ask(request, plan, budget, label, problems, used)

    async def _ask(self, request: Callable[[bool], ChatRequest], plan: Plan, budget: int,
                   label: str, problems: list[str], used: list[Usage] | None
                   ) -> tuple[str, int]:
        """Ask for a summary, then once more strictly if the answer is not a valid one;
        the answer (fitted when only its size was wrong) and the requests it took."""
        for attempt, strict in enumerate((False, True), start=1):
            try:
                reply = await self.model.complete(request(strict))
                if reply.message.usage is not None and used is not None:
                    used.append(reply.message.usage)
            except ProviderError as exc:
                problems.append(f"{label}: the model failed: {exc}")
                raise _ChunkFailed(attempt) from exc
            answer = _unwrap(reply.text)
            found = validate_summary(answer, plan.profile, budget, self.count)
            if not found:
                return answer, attempt
            kind = "strict retry" if strict else "answer"
            fitted = self._fit(answer, plan, budget, slack=None if strict else FIT_SLACK)
            if fitted is not None:
                # Only its size was wrong: keep the model's work, trimmed by priority
                # (the extractive rules), rather than a retry or the offline summary.
                problems.append(f"{label}: {kind} over budget, fitted: " + "; ".join(found))
                return fitted, attempt
            problems.append(f"{label}: {kind} rejected: " + "; ".join(found))
        raise _ChunkFailed(2)

    def prefix_request(self, plan: Plan, language: str | None = None
                       ) -> Callable[[bool], ChatRequest] | None:
        """SPEC Q3: the summarising request that starts with the session's own prefix (its
        projection, system prompt and tools, exactly as the session sends them) and ends with
        the instruction, so a provider's prompt cache serves its input; None when this
        summariser is not the session's model, the plan carries no request, or the prefix
        with the instruction and the answer would not fit the window (a preflight plan's
        request is over the limit by definition)."""
        prefix = plan.request
        if not self.session_prefix or prefix is None or plan.trigger == "preflight" or \
                not plan.newly_old:
            return None
        budget = self.output_tokens(plan)
        target = max(1, int(budget * self.target_share))
        tools = tuple(ToolSpec(name=str(t.get("name", "")),
                               description=str(t.get("description", "")),
                               input_schema=dict(t.get("input_schema") or {}))
                      for t in prefix.tools)
        kept = len([n for n in plan.kept if n.message is not None])

        def request(strict: bool) -> ChatRequest:
            prompt = build_prefix_summary_prompt(
                profile=plan.profile, kept=kept, carries_summary=plan.previous_summary is not None,
                instructions=plan.instructions, max_tokens=target, strict=strict,
                language=language, split_turn=plan.turn_context is not None)
            return ChatRequest(projection=prefix.projection, system=prefix.system, tools=tools,
                               pending=(text_message("user", prompt),), max_tokens=budget)

        window = self.capacity.context_window if self.capacity is not None else None
        if window is not None and not prefix_fits(
                plan.tokens_before, self.count(request(True).pending[0].text), budget, window):
            return None
        return request

    def _fit(self, answer: str, plan: Plan, budget: int, slack: float | None) -> str | None:
        """`answer` fitted to `budget` when size is its only problem (and it is at most
        `slack` over, if given); else None."""
        if validate_summary(answer, plan.profile, 1 << 40, self.count):
            return None  # not a usable summary at any size
        if slack is not None and self.count(answer) > budget * (1 + slack):
            return None  # far over: the strict prompt may get a better-chosen summary
        try:
            text = fit_summary(answer, plan.profile, budget, self.count)
        except SummaryBudgetTooSmall:
            return None
        return text if not validate_summary(text, plan.profile, budget, self.count) else None

    def _fallback(self, plan: Plan, attempts: int, problems: list[str],
                  used: Sequence[Usage] = ()) -> Summary:
        text = summarize_extractive(plan, self.count)
        try:
            ensure_valid(text, plan.profile, summary_token_budget(plan), self.count)
        except SummaryInvalid as exc:  # pragma: no cover - the extractive summariser's contract
            raise SummaryInvalid([*problems, *exc.problems]) from exc
        return Summary(text=text, summarizer=FALLBACK, attempts=attempts,
                       problems=tuple(problems), usage=summed_usage(used))


def make_llm_summarizer(model: str, capacity: ModelCapacity, *, provider: str | None = None,
                        base_url: str | None = None,
                        api_key: str | None = None) -> LlmSummarizer:
    """An `LlmSummarizer` asking `model` (named as for `make_chat_model`) for checkpoints,
    its requests sized to `capacity` (the summariser model's window).

    The key is `api_key` or the provider's environment variable: whoever runs the summariser
    pays for it, never a client of a service or proxy. It is returned unguarded: pass it as
    the `summarizer` of `Conversation` (or wrap it in `GuardedSummarizer`), which falls back
    to the offline summary when it fails, is late or answers something invalid.
    """
    from ..providers.factory import make_chat_model

    chat = make_chat_model(model, base_url=base_url, api_key=api_key, provider=provider)
    return LlmSummarizer(chat, capacity)
