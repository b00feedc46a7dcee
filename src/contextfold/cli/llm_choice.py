"""The summariser options of the commands that serve others (`serve`, `proxy`), and the
guarded LLM summariser of the commands that compact for the user (`compact`, `eval`); the
summariser itself is built by `summarize.factory.summarizer_for`, as for every face."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from ..core.sizing.resolver import ResolvedModel


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
                     f"with or without /v1 (default: {served_by}). The server's key for the "
                     "model's provider goes there only when the provider is named too."),
        typer.Option(None, "--summarizer-provider", help="Provider of --summarizer-model, e.g. "
                     "'anthropic' (default: from the model name; a bare name on a base URL, "
                     "claude-* too, is an OpenAI-compatible server's and gets no key)."),
    )


def guarded_llm_summarizer(chat: ResolvedModel, model: str | None, base_url: str | None,
                           fallbacks: list[str]) -> Any:
    """`--summarizer llm` of `compact` and `eval`: `summarizer_for` the chosen model
    (default: the chat model), with the user's own keys; guarded, so what it returns is
    always safe to commit. Why it fell back (a rejected key, a timeout, an invalid answer)
    is appended to `fallbacks`."""
    from ..core.sizing.resolver import ModelResolver
    from ..runtime.summarizers import FallbackNote, GuardedSummarizer
    from ..summarize.factory import summarizer_for

    def note(fallback: FallbackNote) -> None:
        fallbacks.append("; ".join(fallback.problems) or "no reason given")

    llm = summarizer_for(model or chat.name, ModelResolver(), chat=chat, base_url=base_url)
    return GuardedSummarizer(llm, on_fallback=note)


SUMMARIZERS = ("extractive", "llm")


def summarizer_choice_problem(summarizer: str) -> str | None:
    """What is wrong with a `--summarizer` value of `compact` and `eval` (None: nothing)."""
    if summarizer in SUMMARIZERS:
        return None
    return f"--summarizer must be 'extractive' or 'llm', not {summarizer!r}"
