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
) -> Summarize:
    """A `Summarize` that asks `model` (default: the chat model) for the checkpoint.

    The LLM summariser validates every answer, retries once with a stricter prompt and falls
    back to the offline summary, so what it returns is always safe to commit.
    """
    from ..providers import make_chat_model
    from ..runtime.summarizers import as_summarize
    from ..summarize.llm import LlmSummarizer

    chat = make_chat_model(model or capacity.model, base_url=base_url, provider=provider)
    summarize, _ = as_summarize(LlmSummarizer(chat, capacity))
    return summarize
