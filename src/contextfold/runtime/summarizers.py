"""Any summariser, made safe to commit: a valid `Summary` or the offline one, and a record of it.

Every face accepts the same summarisers: None for the offline extractive summariser, an
object with an async `summarize(plan)` returning a `Summary` (e.g. `summarize.llm.LlmSummarizer`),
or a callable `plan -> Summary`, `(text, name)` or `str` (sync or async; the shapes a user's
own function may return are read once, here). Whatever it is, the runtime wraps it in a
`GuardedSummarizer`, so that a summary that is garbage, an error text, over budget, late
(timeout) or an exception never reaches `commit_checkpoint`: the offline summary of the same
plan is committed instead, named "extractive-fallback" in the checkpoint, and the reason is
reported to the caller (`on_fallback`, an event in `Conversation`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..core.planning.plan import Plan
from ..summarize.extractive import summarize_extractive, summary_token_budget
from ..summarize.summary import EXTRACTIVE, FALLBACK, Summary
from ..summarize.validate import validate_summary

# Turns a plan into its summary: what the one compaction path calls (`compact_session`).
Summarize = Callable[[Plan], Awaitable[Summary]]


@dataclass(frozen=True)
class FallbackNote:
    """Why a plan was summarised offline instead of by the configured summariser."""

    summarizer: str  # what was configured
    problems: tuple[str, ...]


async def offline_summarize(plan: Plan) -> Summary:
    """The offline summariser as a `Summarize` (no model, no network): the default of every
    face, and what replaces a failed summary."""
    return Summary(summarize_extractive(plan), EXTRACTIVE)


def as_summarize(summarizer: Any) -> tuple[Summarize, str]:
    """(`Summarize`, display name) for anything a face accepts as a summariser, unguarded:
    its `Summary` is returned as it is (`Summary.fell_back` says when an `LlmSummarizer`
    fell back to the offline summary itself)."""
    if summarizer is None:
        return offline_summarize, EXTRACTIVE
    method = getattr(summarizer, "summarize", None)
    if method is not None and inspect.iscoroutinefunction(method):
        name = str(getattr(summarizer, "name", type(summarizer).__name__))

        async def call_object(plan: Plan) -> Summary:
            return summary_of(await method(plan), name)

        return call_object, name
    if callable(summarizer):
        name = getattr(summarizer, "__name__", type(summarizer).__name__)

        async def call_function(plan: Plan) -> Summary:
            result = summarizer(plan)
            if inspect.isawaitable(result):
                result = await result
            return summary_of(result, name)

        return call_function, name
    raise TypeError(
        "summarizer must be None (offline), an async callable plan -> Summary or (text, "
        "name), or an object with an async summarize(plan) method; got "
        f"{type(summarizer).__name__}")


def summary_of(result: Any, name: str) -> Summary:
    """A user summariser's answer as a `Summary`: a `Summary` (or an object with its
    fields), `(text, name)`, or a bare string named `name`."""
    if isinstance(result, Summary):
        return result
    if isinstance(result, tuple) and len(result) == 2:
        return Summary(str(result[0]), str(result[1]))
    text = getattr(result, "text", None)
    if isinstance(text, str):
        produced = str(getattr(result, "summarizer", None) or name)
        problems = tuple(getattr(result, "problems", ()) or ()) if produced == FALLBACK else ()
        return Summary(text, produced, int(getattr(result, "attempts", 0) or 0), problems)
    if isinstance(result, str):
        return Summary(result, name)
    raise TypeError(f"the summariser returned {type(result).__name__}, not a summary")


class GuardedSummarizer:
    """A `Summarize` that only ever returns a valid summary (SPEC S2, S5)."""

    def __init__(self, summarizer: Any = None, *, timeout: float | None = None,
                 on_fallback: Callable[[FallbackNote], None] | None = None) -> None:
        self._offline = summarizer is None
        self._inner, self.name = as_summarize(summarizer)
        # The object configured (None: offline); the runtime reads its `capacity` to size
        # a separate summariser model's chunks.
        self.summarizer = summarizer
        self.timeout = timeout
        self.on_fallback = on_fallback

    async def __call__(self, plan: Plan) -> Summary:
        budget = summary_token_budget(plan)
        if self._offline:
            # The configured summariser is the offline one: nothing to fall back to.
            result = await offline_summarize(plan)
            problems = validate_summary(result.text, plan.profile, budget)
            if problems:
                raise RuntimeError("the extractive summary is invalid: " + "; ".join(problems))
            return result
        try:
            if self.timeout is None:
                result = await self._inner(plan)
            else:
                result = await asyncio.wait_for(self._inner(plan), self.timeout)
        except TimeoutError:
            return self._fallback(plan, (f"the summariser did not answer within "
                                         f"{self.timeout:g} s",))
        except Exception as exc:  # any failure must end in the offline summary
            return self._fallback(plan, (f"the summariser failed: {type(exc).__name__}: "
                                         f"{exc}",))
        problems = validate_summary(result.text, plan.profile, budget)
        if problems:
            return self._fallback(plan, (*result.problems, f"{result.summarizer} returned an "
                                         "invalid summary: " + "; ".join(problems)))
        if result.fell_back:  # the summariser fell back by itself: say so
            self._note(result.problems)
        return result

    def _fallback(self, plan: Plan, problems: tuple[str, ...]) -> Summary:
        self._note(problems)
        return Summary(summarize_extractive(plan), FALLBACK, problems=problems)

    def _note(self, problems: tuple[str, ...]) -> None:
        if self.on_fallback is not None:
            self.on_fallback(FallbackNote(self.name, problems))


def guarded(summarizer: Any, timeout: float | None = None,
            on_fallback: Callable[[FallbackNote], None] | None = None) -> GuardedSummarizer:
    """`summarizer` guarded (SPEC S2, S5), unless it is guarded already."""
    if isinstance(summarizer, GuardedSummarizer):
        if on_fallback is None:
            return summarizer
        return GuardedSummarizer(summarizer.summarizer, timeout=summarizer.timeout,
                                 on_fallback=on_fallback)
    return GuardedSummarizer(summarizer, timeout=timeout, on_fallback=on_fallback)
