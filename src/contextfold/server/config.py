"""What a running service is configured with: server-side only, never from clients."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MODEL = "offline/echo"
DEFAULT_PORT = 8765


@dataclass
class ServiceConfig:
    """Settings of one service process (the CLI builds it from `contextfold serve` flags).

    db            store URL (None: `$CONTEXTFOLD_DB` or the embedded SQLite file)
    auth          require bearer tokens (SPEC W2); without it every caller is the
                  "default" tenant and the server binds loopback only
    model         default model of new sessions; context_window its default window
    allow_base_urls  the only `base_url` values a client may choose (SPEC W2: a client must
                  not point the server's provider key at a host of its choosing)
    allowed_hosts  host names (`name` or `name:port`) answered besides the loopback names
                  and the server's own address (SPEC Y8: no DNS rebinding; `--allowed-host`)
    summarizer    the runtime's summarizer option (None: `summarizer_model`'s, else offline
                  extractive); tests pass a slow one to make the compaction window visible
    summarizer_model  a model that writes the checkpoint summaries (`--summarizer-model`),
                  served at `summarizer_base_url` (default: its provider's) by
                  `summarizer_provider`; the server's key, never a client's
    max_*, rate_limit  SPEC W3 limits (bytes, characters, requests per minute per tenant)
    """

    db: str | None = None
    auth: bool = False
    model: str = DEFAULT_MODEL
    context_window: int | None = None
    allow_base_urls: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    summarizer: Any = None
    summarizer_model: str | None = None
    summarizer_base_url: str | None = None
    summarizer_provider: str | None = None
    summarizer_timeout: float | None = 300.0
    max_body_bytes: int = 1 << 20
    max_import_bytes: int = 32 << 20
    max_message_chars: int = 200_000
    rate_limit: int = 600
    offline_delay: float = 0.0  # seconds per streamed word of the offline model (demos)
    keepalive_seconds: float = 15.0
    # Test hook: called with each new Conversation (e.g. to observe its events).
    on_conversation: Callable[[Any], Awaitable[None] | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def base_url_allowed(self, url: str) -> bool:
        """Whether a client-chosen `base_url` is on the server's allowlist (exact match)."""
        wanted = url.rstrip("/")
        return any(wanted == allowed.rstrip("/") for allowed in self.allow_base_urls)

    def llm_summarizer(self) -> Any:
        """The summariser `summarizer_model` names (None without one), unguarded: the runtime
        falls back to the offline summary when it fails. Its key is the provider's variable
        in the server's environment; its window the catalog's, or `context_window` as for the
        sessions' models. LookupError / ValueError / ImportError when it cannot be used."""
        if not self.summarizer_model:
            return None
        from ..core.catalog import capacity_for
        from ..providers import sdk_base_url
        from ..summarize.llm import make_llm_summarizer

        model, provider = self.summarizer_model, self.summarizer_provider
        url = self.summarizer_base_url
        return make_llm_summarizer(
            model, capacity_for(model, context_window=self.context_window),
            base_url=sdk_base_url(url, model, provider) if url else None, provider=provider)
