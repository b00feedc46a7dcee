"""The upstream's real window, learned from its own context-overflow error (SPEC Y9).

An operator may not know the window of the model behind the upstream (a llama.cpp server
started with `--n_ctx 8192`, a gateway), or give a wrong `--model-window`. When the upstream
refuses a forwarded request as too long and names its limit, the proxy keeps that limit for
the model (`ProxyConfig.learned`, for the life of the process: the resolver's `learned`
limit, which only ever lowers a window), and sends the same client request once more, fitted
to it. So the client never sees the overflow and, from then on, no request over the learned
window reaches the upstream. An overflow that names no limit, or one not below the window
already used, is relayed to the client as it came.
"""

from __future__ import annotations

from ..guard.body import loads_bounded
from ..providers.errors import error_fields, is_context_overflow, parse_overflow
from .config import ProxyConfig


def overflow_limit(status: int, content: bytes) -> int | None:
    """The window an upstream's context-overflow answer names (None: not one, or no number)."""
    if status < 400 or status == 429:
        return None
    try:
        body = loads_bounded(content)
    except ValueError:
        body = content.decode("utf-8", "replace")
    fields = error_fields(body)
    message = str(fields.get("message") or "")
    if not is_context_overflow(status, message, fields):
        return None
    limit = parse_overflow(message, fields).limit
    return limit if isinstance(limit, int) and limit > 0 else None


def learn(config: ProxyConfig, model: str, status: int, content: bytes,
          used_window: int) -> int | None:
    """Keep the limit the upstream named for `model` when it is below `used_window` (the
    window the refused request was fitted to); the learned window, else None."""
    limit = overflow_limit(status, content)
    if limit is None or limit >= used_window:
        return None
    known = config.learned.get(model)
    config.learned[model] = min(limit, known) if known else limit
    return config.learned[model]
