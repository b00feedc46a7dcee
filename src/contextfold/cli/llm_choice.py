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
    from ..providers import make_chat_model
    from ..runtime.summarizers import FallbackNote, GuardedSummarizer
    from ..summarize.llm import LlmSummarizer

    def note(fallback: FallbackNote) -> None:
        if fallback_reasons is not None:
            fallback_reasons.append("; ".join(fallback.problems) or "no reason given")

    chat = make_chat_model(model or capacity.model, base_url=base_url, provider=provider)
    return GuardedSummarizer(LlmSummarizer(chat, capacity), on_fallback=note)
