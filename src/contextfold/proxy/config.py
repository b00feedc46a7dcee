"""What `contextfold proxy` is configured with, and the model capacities it resolves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.sizing.resolver import ModelResolver


@dataclass
class ProxyConfig:
    """`upstream`: base URL of the OpenAI- or Anthropic-compatible server (with or without
    `/v1`). `windows`: model name -> the upstream's real context window (`*` for every
    model not named); it wins over the catalog, which is the fallback. `protocol`: serve
    only this protocol (None: both). `db`: store URL (None: the default SQLite file).
    `auth`: require a tenant's token in `x-contextfold-token` (SPEC W2; needed for a
    non-loopback bind). `allowed_hosts`: host names answered besides the loopback names and
    the bind address (SPEC Y8). `max_body_bytes`: the largest request body (SPEC Y8; 64 MiB:
    twice the largest request a provider accepts, Anthropic's 32 MB, so every request an
    agent can send passes and the history the proxy compacts may grow past it).
    `identity_salt`: the salt of client key fingerprints (None: `identity.default_salt()`).
    `memory_bytes`: the most the process holds of the conversations it serves (SPEC Y14,
    `runtime.held`: their memos, least recently used out, read again from the store)."""

    upstream: str
    windows: Mapping[str, int] = field(default_factory=dict)
    protocol: str | None = None
    db: str | None = None
    summarizer: Any = None  # None: the offline summariser
    settings: CompactionSettings | None = None
    timeout: float = 600.0
    auth: bool = False
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = 64 << 20
    identity_salt: str | None = None
    memory_bytes: int = 256 << 20
    # Windows the upstream named in its own context-overflow errors (SPEC Y9, learning.py).
    learned: dict[str, int] = field(default_factory=dict)

    @cached_property
    def resolver(self) -> ModelResolver:
        """The proxy's model resolver: `--model-window` over the catalog and overrides."""
        return ModelResolver(windows=dict(self.windows), settings=self.settings)

    def capacity(self, model: str) -> ModelCapacity:
        """The capacity of `model` on this upstream (UnknownModelError if none is known)."""
        return self.resolver.resolve(model, learned=self.learned.get(model)).capacity


def llm_summarizer(config: ProxyConfig, model: str, *, base_url: str | None = None,
                   provider: str | None = None) -> Any:
    """An LLM summariser for the proxy (`summarizer_for`): `model` served at `base_url`, else
    — a model that takes no server key — at the upstream, else at its provider's own endpoint.

    Its key is the server's own (the provider's environment variable, e.g. OPENAI_API_KEY),
    never a client's: client keys live for one forwarded request only (SPEC Y5); and it goes
    only to that provider's endpoint or the `base_url` the operator named with its provider
    (SPEC Y8): a bare name on the upstream is an OpenAI-compatible server's and gets no key.
    Its window comes from `--model-window` like the chat models', else the catalog.
    """
    from ..providers.endpoints import EndpointPolicy
    from ..providers.factory import sdk_base_url
    from ..summarize.factory import summarizer_for

    return summarizer_for(
        model, config.resolver, provider=provider, endpoints=EndpointPolicy(),
        base_url=sdk_base_url(base_url, model, provider) if base_url else None,
        default_base_url=sdk_base_url(config.upstream, model, provider))


def parse_windows(values: list[str]) -> dict[str, int]:
    """`MODEL=N` pairs (a bare `N` means every model) into a mapping; ValueError if bad."""
    out: dict[str, int] = {}
    for value in values:
        name, _, number = value.rpartition("=")
        try:
            window = int(number.replace("_", "").replace(",", ""))
        except ValueError:
            raise ValueError(f"--model-window {value!r}: expected MODEL=TOKENS, e.g. "
                             "local-model=32768") from None
        if window < 1024:
            raise ValueError(f"--model-window {value!r}: a window under 1024 tokens leaves "
                             "no room for a request")
        out[name or "*"] = window
    return out
