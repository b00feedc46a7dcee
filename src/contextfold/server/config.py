"""What a running service is configured with: server-side only, never from clients."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.values.held import DEFAULT_BYTES

DEFAULT_PORT = 8765


@dataclass
class ServiceConfig:
    """Settings of one service process (the CLI builds it from `contextfold serve` flags).

    db            store URL (None: `$CONTEXTFOLD_DB` or the embedded SQLite file)
    auth          require bearer tokens (SPEC W2); without it every caller is the
                  "default" tenant and the server binds loopback only
    model         default model of new sessions (None: $CONTEXTFOLD_MODEL, else the
                  built-in offline/echo: core.resolver); context_window their default window
    allow_base_urls  `base_url` values of keyless OpenAI-compatible servers a client may
                  choose (`--allow-base-url`): reached with no server key (SPEC W2, Y8)
    provider_urls provider -> base URL the operator bound to it (`--provider-url`): that
                  provider's key may go there, and its sessions go there by default
    allow_models  fnmatch patterns of the models tenants may use (`--allow-model`; empty:
                  any model the server can serve)
    allowed_hosts  host names (`name` or `name:port`) answered besides the loopback names
                  and the server's own address (SPEC Y8: no DNS rebinding; `--allowed-host`)
    summarizer    the runtime's summarizer option (None: `summarizer_model`'s, else offline
                  extractive); tests pass a slow one to make the compaction window visible
    summarizer_model  a model that writes the checkpoint summaries (`--summarizer-model`),
                  served at `summarizer_base_url` (default: its provider's) by
                  `summarizer_provider`; the server's key, never a client's
    max_*, rate_limit  SPEC W3 limits (bytes, characters, requests per minute per tenant)
    memory_bytes  the most a worker holds of the sessions it serves (SPEC Y14,
                  `--memory-cache` MiB): open sessions and the store's memos, estimated
                  bytes, least recently used out
    """

    db: str | None = None
    auth: bool = False
    model: str | None = None
    context_window: int | None = None
    allow_base_urls: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    provider_urls: dict[str, str] = field(default_factory=dict)
    allow_models: tuple[str, ...] = ()
    summarizer: Any = None
    summarizer_model: str | None = None
    summarizer_base_url: str | None = None
    summarizer_provider: str | None = None
    summarizer_timeout: float | None = 300.0
    max_body_bytes: int = 1 << 20
    max_import_bytes: int = 32 << 20
    max_message_chars: int = 200_000
    rate_limit: int = 600
    memory_bytes: int = DEFAULT_BYTES
    offline_delay: float = 0.0  # seconds per streamed word of the offline model (demos)
    keepalive_seconds: float = 15.0
    # Test hook: called with each new Conversation (e.g. to observe its events).
    on_conversation: Callable[[Any], Awaitable[None] | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
