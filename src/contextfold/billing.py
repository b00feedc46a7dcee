"""What a stored session cost (SPEC Q4), worked out one way for every face that shows it.

`contextfold sessions`, the service's session resource (and the page) and the proxy's stats
price provider-reported usage here, so they cannot disagree:

* **prices** — `core.sizing.resolver.user_prices()`: the packaged table plus the `prices` table of
  the `$CONTEXTFOLD_MODELS` overrides file;
* **the session's model** — for replies whose usage names none — `billed_model`: the model
  the session is set to (the service's stored setting), else the one recorded on the branch
  (`recorded_model`), else the one its metadata says it was written with, resolved through
  the one resolver (`core.sizing.resolver.ModelResolver`, the face's default last);
* **the bill** — `core.money.costs.session_cost` over the whole branch (the history summarised
  away included: a compacted reply was paid for too).

Not in the pure core: the prices and the catalog are read from the package and the
overrides file. Imports nothing heavy (no store, provider or event loop), so the read-only
`sessions` command stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .core.models.catalog import CatalogConfigError, UnknownModelError
from .core.money.costs import SessionCost, priced_usage, session_cost
from .core.money.prices import Cost
from .core.sizing.resolver import (
    InvalidWindowError,
    ModelResolver,
    recorded_model,
    recorded_resolver,
    sized_for,
    user_prices,
)
from .core.values.messages import Node, Usage
from .core.values.tree import Branch, DamagedBranch

# The service's per-session settings in session metadata (`server.sessions.META_KEY`): the
# model a service session is set to, which wins over the recorded one (SPEC B4).
SERVICE_KEY = "service"

__all__ = ["SERVICE_KEY", "billed_model", "session_bill", "usage_cost", "written_model"]


def usage_cost(usage: Usage, model: str | None = None) -> Cost:
    """One request's reported usage (input, cache reads, cache writes, output) in dollars at
    its model's prices: `usage.model`, else `model`. `usd` None when the model has no price."""
    name = usage.model or model
    price = user_prices().lookup(name) if name else None
    return priced_usage(price, name, usage)


def written_model(metadata: Mapping[str, Any] | None) -> str | None:
    """The model a session's metadata says it was written with, when its branch names none:
    the demo's `model`, the window the proxy sized it for, the proxied client's model."""
    metadata = metadata or {}
    sized = sized_for(metadata)
    proxied = metadata.get("proxy")
    for name in (metadata.get("model"), sized[0] if sized else None,
                 proxied.get("model") if isinstance(proxied, Mapping) else None):
        if isinstance(name, str) and name:
            return name
    return None


def _set_model(metadata: Mapping[str, Any] | None) -> tuple[str | None, int | None]:
    """The model (and window) the service stored for the session, if it is a service one."""
    raw = (metadata or {}).get(SERVICE_KEY)
    if not isinstance(raw, Mapping):
        return None, None
    model, window = raw.get("model"), raw.get("context_window")
    return (model if isinstance(model, str) and model else None,
            window if isinstance(window, int) and window > 0 else None)


def billed_model(history: Branch | DamagedBranch | Iterable[Node],
                 metadata: Mapping[str, Any] | None,
                 resolver: ModelResolver | None = None) -> str | None:
    """The session's model, as the faces resolve it (SPEC B4): the model it is set to, else
    the recorded one, else the face's default (`resolver`; None: a plain `ModelResolver`),
    with the window the session was sized for known to the resolver. A set model the
    catalog cannot size is still the session's: its name is kept (its price may be known)."""
    explicit, window = _set_model(metadata)
    entries = history if isinstance(history, (Branch, DamagedBranch)) else list(history)
    recorded = recorded_model(entries) or written_model(metadata)
    try:
        return recorded_resolver(metadata, resolver).resolve(
            explicit, recorded=recorded, context_window=window).name
    except (UnknownModelError, InvalidWindowError, CatalogConfigError):
        return explicit or recorded


def session_bill(history: Branch | DamagedBranch, metadata: Mapping[str, Any] | None,
                 resolver: ModelResolver | None = None) -> SessionCost:
    """What a stored session cost and what its full history would have (SPEC Q4), over the
    whole branch as `load_full_branch` gives it (a damaged one: what reads, SPEC D2)."""
    nodes = history.nodes if isinstance(history, Branch) else history.readable
    return session_cost(nodes, user_prices(), model=billed_model(history, metadata, resolver))
