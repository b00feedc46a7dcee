"""`--summarizer llm` and `--summarizer-model`: summarise with a chat model through the
official SDKs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
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


def summarizer_options(served_by: str) -> tuple[Any, Any, Any]:
    """`--summarizer-model`, `--summarizer-base-url`, `--summarizer-provider` of the commands
    that serve others (`proxy`, `serve`), with one meaning in both; `served_by` says where the
    model is served when no --summarizer-base-url is given."""
    return (
        typer.Option(None, "--summarizer-model", help="Model that writes checkpoint summaries "
                     "(default: the offline summariser, no model call). Served by "
                     f"{served_by} unless --summarizer-base-url names another server; its key "
                     "is the server's own (e.g. OPENAI_API_KEY), never a client's. When it "
                     "fails, the offline summary is used."),
        typer.Option(None, "--summarizer-base-url", help="Where --summarizer-model is served, "
                     f"with or without /v1 (default: {served_by})."),
        typer.Option(None, "--summarizer-provider", help="Provider of --summarizer-model, e.g. "
                     "'anthropic' (default: from the model name; a bare name on a "
                     "--summarizer-base-url is an OpenAI-compatible server's)."),
    )
