"""`summarizer_for(...)`: the one way every face builds its LLM summariser.

The CLI (`compact --summarizer llm`, `chat --summarizer-model`), `contextfold serve` and
`contextfold proxy` (`--summarizer-model`, `--summarizer-base-url`, `--summarizer-provider`)
all call it. It sizes the summariser model through the face's model resolver (the same
overrides, window maps and caps as the chat models), with one rule for a summariser the
catalog lacks: the chat model's window. It makes the model through `providers` with the
face's key binding (`EndpointPolicy`: a server's key goes only to its provider's own endpoint
or one bound to it), and returns an unguarded `LlmSummarizer` — or None when no model is
named (the offline summariser). The runtime guards it: an invalid, late or failed summary
falls back to the offline one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.models.catalog import UnknownModelError
from ..core.sizing.resolver import ModelResolver, ResolvedModel

if TYPE_CHECKING:
    from ..core.models.budget import ModelCapacity
    from ..providers.endpoints import EndpointPolicy
    from .llm import LlmSummarizer


def summarizer_capacity(model: str, resolver: ModelResolver,
                        chat: ResolvedModel | None = None) -> ModelCapacity:
    """The summariser model's capacity: the chat model's own when it is the same model, else
    the resolver's (catalog, overrides, the face's windows and cap), else — a model the
    catalog lacks — the chat model's window. Without a chat model, an unknown model raises
    `UnknownModelError`."""
    if chat is not None and model == chat.name:
        return chat.capacity
    try:
        return resolver.resolve(model).capacity
    except UnknownModelError:
        if chat is None:
            raise
        return resolver.resolve(model, context_window=chat.context_window).capacity


def summarizer_for(model: str | None, resolver: ModelResolver, *,
                   chat: ResolvedModel | None = None, base_url: str | None = None,
                   provider: str | None = None, default_base_url: str | None = None,
                   endpoints: EndpointPolicy | None = None) -> LlmSummarizer | None:
    """The LLM summariser for `model` (None: no model named, the offline summariser).

    `base_url` / `provider`: where and by whom it is served, as the operator (or the CLI's
    user) named them, the way the SDK wants the URL (`sdk_base_url` turns a server named
    with or without /v1 into that). `default_base_url`: where a model that takes no
    server key is served when no `base_url` is given (the proxy's upstream); a keyed
    provider's model goes to its own endpoint instead. `endpoints`: the key binding of a face
    that serves others (None: the user's own keys, the CLI's). Under it, the operator's own
    `base_url` is bound to the provider the model resolves to there (a bare name there is an
    OpenAI-compatible server's and gets no key); the upstream default is only ever keyless.
    Raises `UnknownModelError`, `ValueError` (an unknown provider, a refused endpoint) or
    `ImportError` (the provider's SDK is not installed).
    """
    if not model:
        return None
    from ..providers.endpoints import COMPATIBLE
    from ..providers.factory import make_chat_model, resolve_provider
    from .llm import LlmSummarizer

    capacity = summarizer_capacity(model, resolver, chat)
    url = base_url
    if url is None and default_base_url is not None and \
            not resolve_provider(model, provider, default_base_url)[0].key_required:
        url = default_base_url
    if url is not None:
        info, _ = resolve_provider(model, provider, url)
        if endpoints is not None:
            keyed = base_url is not None and info.key_required and info.name != COMPATIBLE
            endpoints = replace(endpoints, bound={**endpoints.bound, info.name: url}) \
                if keyed else replace(endpoints, keyless=(*endpoints.keyless, url))
    if endpoints is None:
        chat_model = make_chat_model(model, base_url=url, provider=provider)
    else:
        chat_model = endpoints.chat_model(model, base_url=url, provider=provider)
    # SPEC Q3: the session's own model summarises after the session's exact prefix, so its
    # provider's prompt cache serves that input.
    return LlmSummarizer(chat_model, capacity,
                         session_prefix=chat is not None and model == chat.name)
