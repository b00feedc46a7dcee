"""Any summariser, made safe to commit: a valid summary or the offline one, and a record of it.

A `Conversation` accepts a `Summarize` callable (`plan -> (text, name)`), an object with an
async `summarize(plan)` (e.g. `summarize.llm.LlmSummarizer`, which returns a
`SummaryOutcome`), or None for the offline extractive summariser. Whatever it is, the
runtime wraps it in a `GuardedSummarizer`, so that a summary that is garbage, an error
text, over budget, late (timeout) or an exception never reaches `commit_checkpoint`: the
offline summary of the same plan is committed instead, named "extractive-fallback" in the
checkpoint, and the reason is reported to the caller (an event).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..core.plan import Plan
from ..summarize.extractive import summarize_extractive, summary_token_budget
from ..summarize.llm import FALLBACK
from ..summarize.validate import validate_summary
from .compaction import Summarize, extractive_summarize

EXTRACTIVE = "extractive"


@dataclass(frozen=True)
class FallbackNote:
    """Why a plan was summarised offline instead of by the configured summariser."""

    summarizer: str  # what was configured
    problems: tuple[str, ...]


@dataclass(frozen=True)
class _Summary:
    text: str
    name: str
    problems: tuple[str, ...] = ()  # why a summariser fell back on its own, if it did


_Detailed = Callable[[Plan], Awaitable[_Summary]]


def as_summarize(summarizer: Any) -> tuple[Summarize, str]:
    """(`Summarize` callable, display name) for anything a `Conversation` accepts.

    The callable returns `(text, name)`; `name` is "extractive-fallback" when an
    `LlmSummarizer` fell back to the offline summary itself.
    """
    detailed, name = _detailed(summarizer)
    if detailed is None:
        return extractive_summarize, EXTRACTIVE

    async def summarize(plan: Plan) -> tuple[str, str]:
        result = await detailed(plan)
        return result.text, result.name

    return summarize, name


def _detailed(summarizer: Any) -> tuple[_Detailed | None, str]:
    if summarizer is None:
        return None, EXTRACTIVE
    method = getattr(summarizer, "summarize", None)
    if method is not None and inspect.iscoroutinefunction(method):
        name = str(getattr(summarizer, "name", type(summarizer).__name__))

        async def call_object(plan: Plan) -> _Summary:
            return _unpack(await method(plan), name)

        return call_object, name
    if callable(summarizer):
        name = getattr(summarizer, "__name__", type(summarizer).__name__)

        async def call_function(plan: Plan) -> _Summary:
            result = summarizer(plan)
            if inspect.isawaitable(result):
                result = await result
            return _unpack(result, name)

        return call_function, name
    raise TypeError(
        "summarizer must be None (offline), an async callable plan -> (text, name), or an "
        f"object with an async summarize(plan) method; got {type(summarizer).__name__}")


def _unpack(result: Any, name: str) -> _Summary:
    """Accept `(text, name)`, a `SummaryOutcome`-like object, or a bare string."""
    if isinstance(result, tuple) and len(result) == 2:
        return _Summary(str(result[0]), str(result[1]))
    text = getattr(result, "text", None)
    if isinstance(text, str):
        produced = str(getattr(result, "summarizer", None) or name)
        problems = tuple(getattr(result, "problems", ()) or ()) if produced == FALLBACK else ()
        return _Summary(text, produced, problems)
    if isinstance(result, str):
        return _Summary(result, name)
    raise TypeError(f"the summariser returned {type(result).__name__}, not a summary")


class GuardedSummarizer:
    """A `Summarize` that only ever returns a valid summary (SPEC S2, S5)."""

    def __init__(self, summarizer: Any = None, *, timeout: float | None = None,
                 on_fallback: Callable[[FallbackNote], None] | None = None) -> None:
        self._inner, self.name = _detailed(summarizer)
        self.timeout = timeout
        self.on_fallback = on_fallback

    async def __call__(self, plan: Plan) -> tuple[str, str]:
        if self._inner is None:
            return await self._offline(plan)
        budget = summary_token_budget(plan)
        try:
            if self.timeout is None:
                result = await self._inner(plan)
            else:
                result = await asyncio.wait_for(self._inner(plan), self.timeout)
        except TimeoutError:
            return self._fallback(plan, [f"the summariser did not answer within "
                                         f"{self.timeout:g} s"])
        except Exception as exc:  # any failure must end in the offline summary
            return self._fallback(plan, [f"the summariser failed: {type(exc).__name__}: {exc}"])
        problems = validate_summary(result.text, plan.profile, budget)
        if problems:
            return self._fallback(plan, [*result.problems, f"{result.name} returned an invalid "
                                         "summary: " + "; ".join(problems)])
        if result.name == FALLBACK:  # the summariser fell back by itself: say so
            self._note(result.problems)
        return result.text, result.name

    async def _offline(self, plan: Plan) -> tuple[str, str]:
        """The configured summariser is the offline one: validate it, nothing to fall to."""
        text, name = await extractive_summarize(plan)
        problems = validate_summary(text, plan.profile, summary_token_budget(plan))
        if problems:
            raise RuntimeError("the extractive summary is invalid: " + "; ".join(problems))
        return text, name

    def _fallback(self, plan: Plan, problems: list[str]) -> tuple[str, str]:
        self._note(tuple(problems))
        return summarize_extractive(plan), FALLBACK

    def _note(self, problems: tuple[str, ...]) -> None:
        if self.on_fallback is not None:
            self.on_fallback(FallbackNote(self.name, problems))
