"""Starting the service: bind checks, and the uvicorn run (one or several workers).

Several workers are separate processes that uvicorn starts from an import string, so the
configuration travels in an environment variable (`CONTEXTFOLD_SERVE_CONFIG`, JSON of the
`ServiceConfig` fields; it never holds a key: provider keys stay in their own variables).
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, fields
from typing import Any

from ..errors import ContextfoldError
from .config import LOOPBACK_HOSTS, ServiceConfig

ENV_CONFIG = "CONTEXTFOLD_SERVE_CONFIG"
_PORTABLE = {f.name for f in fields(ServiceConfig)} - {"summarizer", "on_conversation", "extra"}


class ServeError(ContextfoldError, ValueError):
    """A `contextfold serve` option combination that cannot work (the message says why)."""

    kind = "bad_input"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_options(config: ServiceConfig, host: str, workers: int, dialect: str) -> None:
    """Refuse a public bind without auth (SPEC W2) and several workers on SQLite."""
    if not config.auth and not is_loopback(host):
        raise ServeError(f"--host {host} without --auth would let anyone on the network use "
                         "the service as tenant 'default': add --auth (and create tokens with "
                         "`contextfold token create TENANT`) or bind 127.0.0.1")
    if workers < 1:
        raise ServeError(f"--workers must be at least 1, not {workers}")
    if workers > 1 and dialect != "postgresql":
        raise ServeError(f"--workers {workers} needs PostgreSQL (--db postgresql://...): "
                         "SQLite is one process's embedded database, and the workers must "
                         "share compaction leases and events")


def config_to_env(config: ServiceConfig) -> str:
    data = {k: v for k, v in asdict(config).items() if k in _PORTABLE}
    return json.dumps(data)


def app_from_env() -> Any:
    """uvicorn's app factory for worker processes (`--workers N`)."""
    from .app import create_app

    raw = json.loads(os.environ.get(ENV_CONFIG) or "{}")
    if "allow_base_urls" in raw:
        raw["allow_base_urls"] = tuple(raw["allow_base_urls"])
    return create_app(ServiceConfig(**{k: v for k, v in raw.items() if k in _PORTABLE}))


def serve(config: ServiceConfig, host: str, port: int, workers: int = 1,
          log_level: str = "info") -> None:
    """Run uvicorn until interrupted."""
    import uvicorn

    os.environ[ENV_CONFIG] = config_to_env(config)
    uvicorn.run("contextfold.server.run:app_from_env", factory=True, host=host, port=port,
                workers=workers, log_level=log_level, proxy_headers=False,
                timeout_graceful_shutdown=10)
