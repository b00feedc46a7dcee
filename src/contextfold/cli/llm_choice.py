"""`--summarizer llm`: summarise with a chat model through the official SDKs."""

from __future__ import annotations

from ..core.budget import ModelCapacity
from ..runtime.compaction import Summarize


def llm_summarize_for(
    capacity: ModelCapacity,
    *,
    model: str | None = None,
    base_url: str | None = None,
    provider: str | None = None,
    fallback_reasons: list[str] | None = None,
) -> Summarize:
    """A `Summarize` that asks `model` (default: the chat model) for the checkpoint.

    The LLM summariser validates every answer, retries once with a stricter prompt and falls
    back to the offline summary, so what it returns is always safe to commit. Why it fell
    back (a rejected key, a timeout, an invalid answer) is appended to `fallback_reasons`.
    """
    from ..runtime.summarizers import FallbackNote, GuardedSummarizer
    from ..summarize.llm import make_llm_summarizer

    def note(fallback: FallbackNote) -> None:
        if fallback_reasons is not None:
            fallback_reasons.append("; ".join(fallback.problems) or "no reason given")

    summarizer = make_llm_summarizer(model or capacity.model, capacity, base_url=base_url,
                                     provider=provider)
    return GuardedSummarizer(summarizer, on_fallback=note)
