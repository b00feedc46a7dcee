"""The summariser options of the commands that serve others (`serve`, `proxy`); the
summariser itself is built by `summarize.factory.summarizer_for`, as for every face."""

from __future__ import annotations

from typing import Any

import typer


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
