"""Starting the service: bind checks, and the uvicorn run (one or several workers).

Several workers are separate processes that uvicorn starts from an import string, so the
configuration travels in an environment variable (`CONTEXTFOLD_SERVE_CONFIG`, JSON of the
`ServiceConfig` fields; it never holds a key: provider keys stay in their own variables).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, fields, replace
from typing import Any

from .._workers import run_workers, workers_problem
from ..errors import ContextfoldError
from ..guard.hosts import HostPolicy, is_loopback, with_bind_host
from .config import ServiceConfig

ENV_CONFIG = "CONTEXTFOLD_SERVE_CONFIG"
_PORTABLE = {f.name for f in fields(ServiceConfig)} - {"summarizer", "on_conversation", "extra"}


class ServeError(ContextfoldError, ValueError):
    """A `contextfold serve` option combination that cannot work (the message says why)."""

    kind = "bad_input"


def check_options(config: ServiceConfig, host: str, workers: int, dialect: str) -> None:
    """Refuse a public bind without auth (SPEC W2), a bad `--allowed-host` (Y8) and several
    workers on SQLite."""
    if not config.auth and not is_loopback(host):
        raise ServeError(f"--host {host} without --auth would let anyone on the network use "
                         "the service as tenant 'default': add --auth (and create tokens with "
                         "`contextfold token create TENANT`) or bind 127.0.0.1")
    try:
        HostPolicy.of(config.allowed_hosts)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    problem = workers_problem(workers, dialect)
    if problem:
        raise ServeError(f"{problem} (compaction leases and events)")


def check_models(config: ServiceConfig) -> None:
    """Refuse, before binding, a default model or summariser the workers could not use: a
    default model nobody can size, one outside `--allow-model`, a default window too small to
    compact in, a `--summarizer-model` that cannot be made (unknown, refused endpoint, no
    SDK). A missing key for the default model is not refused: the sessions then say so."""
    from ..core.models.catalog import CatalogConfigError
    from .errors import ApiError
    from .models import ServerModels

    models = ServerModels(config)
    name = models.default_model
    try:
        resolved = models.resolve(None, None)
        models.check_window(resolved)
    except ApiError as exc:
        raise ServeError(f"--model {name!r}: {exc.message}") from None
    except CatalogConfigError as exc:
        raise ServeError(f"$CONTEXTFOLD_MODELS: {exc}") from None
    if not models.allowed(name):
        raise ServeError(f"--model {name!r} is not allowed by --allow-model "
                         f"{' '.join(config.allow_models)}: allow it, or pick another default")
    try:
        models.summarizer()
    except (LookupError, ValueError, ImportError) as exc:
        raise ServeError(f"--summarizer-model {config.summarizer_model!r}: {exc}") from None


def config_to_env(config: ServiceConfig) -> str:
    data = {k: v for k, v in asdict(config).items() if k in _PORTABLE}
    return json.dumps(data)


def app_from_env() -> Any:
    """uvicorn's app factory for worker processes (`--workers N`)."""
    from .app import create_app

    raw = json.loads(os.environ.get(ENV_CONFIG) or "{}")
    # JSON has lists; the config holds tuples.
    for listed in ("allow_base_urls", "allow_models", "allowed_hosts"):
        if listed in raw:
            raw[listed] = tuple(raw[listed])
    return create_app(ServiceConfig(**{k: v for k, v in raw.items() if k in _PORTABLE}))


def serve(config: ServiceConfig, host: str, port: int, workers: int = 1,
          log_level: str = "info") -> None:
    """Run uvicorn until interrupted (the bind address, when it is a name, is answered too).

    Several workers share a socket their supervisor binds (`_workers.run_workers`:
    `TCP_NODELAY` on every connection); one worker lets asyncio bind, which sets it itself.
    """
    import uvicorn

    config = replace(config, allowed_hosts=with_bind_host(config.allowed_hosts, host, port))
    os.environ[ENV_CONFIG] = config_to_env(config)
    if workers == 1:  # asyncio makes the listener (TCP_NODELAY on every connection)
        uvicorn.run("contextfold.server.run:app_from_env", factory=True, host=host, port=port,
                    log_level=log_level, proxy_headers=False, timeout_graceful_shutdown=10)
        return
    run_workers("contextfold.server.run:app_from_env", host=host, port=port, workers=workers,
                log_level=log_level, proxy_headers=False, timeout_graceful_shutdown=10)
