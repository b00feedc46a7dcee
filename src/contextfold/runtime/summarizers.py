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
from collections.abc import Callable
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


def as_summarize(summarizer: Any) -> tuple[Summarize, str]:
    """(`Summarize` callable, display name) for anything a `Conversation` accepts."""
    if summarizer is None:
        return extractive_summarize, EXTRACTIVE
    method = getattr(summarizer, "summarize", None)
    if method is not None and inspect.iscoroutinefunction(method):
        name = str(getattr(summarizer, "name", type(summarizer).__name__))

        async def call_object(plan: Plan) -> tuple[str, str]:
            return _unpack(await method(plan), name)

        return call_object, name
    if callable(summarizer):
        name = getattr(summarizer, "__name__", type(summarizer).__name__)

        async def call_function(plan: Plan) -> tuple[str, str]:
            result = summarizer(plan)
            if inspect.isawaitable(result):
                result = await result
            return _unpack(result, name)

        return call_function, name
    raise TypeError(
        "summarizer must be None (offline), an async callable plan -> (text, name), or an "
        f"object with an async summarize(plan) method; got {type(summarizer).__name__}")


def _unpack(result: Any, name: str) -> tuple[str, str]:
    """Accept `(text, name)`, a `SummaryOutcome`-like object, or a bare string."""
    if isinstance(result, tuple) and len(result) == 2:
        return str(result[0]), str(result[1])
    text = getattr(result, "text", None)
    if isinstance(text, str):
        produced = getattr(result, "summarizer", None) or name
        if produced == FALLBACK:
            problems = tuple(getattr(result, "problems", ()) or ())
            raise _AlreadyFellBack(text, problems)
        return text, str(produced)
    if isinstance(result, str):
        return result, name
    raise TypeError(f"the summariser returned {type(result).__name__}, not a summary")


class _AlreadyFellBack(Exception):
    """The wrapped summariser used the offline fallback itself; carry its text and reasons."""

    def __init__(self, text: str, problems: tuple[str, ...]) -> None:
        super().__init__(text)
        self.text = text
        self.problems = problems


class GuardedSummarizer:
    """A `Summarize` that only ever returns a valid summary (SPEC S2, S5)."""

    def __init__(self, summarizer: Any = None, *, timeout: float | None = None,
                 on_fallback: Callable[[FallbackNote], None] | None = None) -> None:
        self._inner, self.name = as_summarize(summarizer)
        self.timeout = timeout
        self.on_fallback = on_fallback

    async def __call__(self, plan: Plan) -> tuple[str, str]:
        budget = summary_token_budget(plan)
        try:
            if self.timeout is None:
                text, name = await self._inner(plan)
            else:
                text, name = await asyncio.wait_for(self._inner(plan), self.timeout)
        except _AlreadyFellBack as inner:
            problems = validate_summary(inner.text, plan.profile, budget)
            if not problems:
                self._note(inner.problems)
                return inner.text, FALLBACK
            return self._fallback(plan, [*inner.problems, *problems])
        except TimeoutError:
            return self._fallback(plan, [f"the summariser did not answer within "
                                         f"{self.timeout:g} s"])
        except Exception as exc:  # any failure must end in the offline summary
            return self._fallback(plan, [f"the summariser failed: {type(exc).__name__}: {exc}"])
        problems = validate_summary(text, plan.profile, budget)
        if problems:
            return self._fallback(plan, [f"{name} returned an invalid summary: "
                                         + "; ".join(problems)])
        return text, name

    def _fallback(self, plan: Plan, problems: list[str]) -> tuple[str, str]:
        if self._inner is extractive_summarize:
            # The offline summariser itself failed: there is nothing safer to fall back to.
            raise RuntimeError("the extractive summariser failed: " + "; ".join(problems))
        self._note(tuple(problems))
        return summarize_extractive(plan), FALLBACK

    def _note(self, problems: tuple[str, ...]) -> None:
        if self.on_fallback is not None:
            self.on_fallback(FallbackNote(self.name, problems))
