"""Running the proxy: in the foreground (the CLI) or on a background thread (tests, bench)."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from .._net import listening_socket
from .config import ProxyConfig


class ProxyThread:
    """The proxy on 127.0.0.1 in a daemon thread; `url` once started. For tests and the bench."""

    def __init__(self, config: ProxyConfig, port: int = 0) -> None:
        import uvicorn

        from .app import create_app

        self._sock = listening_socket("127.0.0.1", port)  # TCP_NODELAY (issue 26)
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning",
                                                     timeout_graceful_shutdown=5))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyThread:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


def serve(config: ProxyConfig, host: str = "127.0.0.1", port: int = 8788, workers: int = 1,
          summarizer: dict[str, str | None] | None = None) -> None:
    """Run the proxy in the foreground until interrupted (one log line per request). The
    bind address, when it is a name, is answered too (SPEC Y8).

    `workers` > 1: that many processes sharing one socket (`_workers.run_workers`); the
    configuration travels to them in `CONTEXTFOLD_PROXY_CONFIG` (`config_to_env`), and
    `summarizer` (the `llm_summarizer` arguments, None: offline) is rebuilt in each. The
    store must be PostgreSQL (the caller checks: `_workers.workers_problem`)."""
    import dataclasses

    import uvicorn

    from ..guard.hosts import with_bind_host
    from .app import create_app

    config = dataclasses.replace(config, allowed_hosts=with_bind_host(config.allowed_hosts,
                                                                      host, port))
    if workers == 1:
        _log_setup()
        uvicorn.run(create_app(config), host=host, port=port, log_level="warning")
        return
    from .._workers import run_workers
    from .identity import SALT_ENV, default_salt

    # One salt for every worker: a key's fingerprint, hence its sessions, must not depend
    # on the worker a request lands on (the salt file, else a salt for this run).
    os.environ.setdefault(SALT_ENV, default_salt().decode("utf-8"))
    os.environ[ENV_CONFIG] = config_to_env(config, summarizer)
    run_workers("contextfold.proxy.serve:app_from_env", host=host, port=port, workers=workers,
                log_level="warning")


ENV_CONFIG = "CONTEXTFOLD_PROXY_CONFIG"
# What a worker can be given as JSON: not the summariser object (rebuilt from its options),
# nor `settings` (the CLI never sets them) or `learned` (each process learns its own, Y9).
_PORTABLE = ("upstream", "windows", "protocol", "db", "timeout", "auth", "allowed_hosts",
             "max_body_bytes", "identity_salt", "memory_bytes")


def config_to_env(config: ProxyConfig, summarizer: dict[str, str | None] | None = None) -> str:
    """`config` as the JSON a worker process rebuilds it from (`app_from_env`); no key is in
    it (client keys live for one request, the summariser's key stays in its own variable)."""
    data: dict[str, Any] = {name: getattr(config, name) for name in _PORTABLE}
    data["windows"] = dict(config.windows)
    data["summarizer"] = summarizer
    return json.dumps(data)


def app_from_env() -> Any:
    """uvicorn's app factory for the proxy's worker processes (`--workers N`)."""
    from .app import create_app
    from .config import llm_summarizer

    _log_setup()
    raw = json.loads(os.environ[ENV_CONFIG])
    summarizer = raw.pop("summarizer", None)
    raw["allowed_hosts"] = tuple(raw.get("allowed_hosts") or ())
    config = ProxyConfig(**{k: v for k, v in raw.items() if k in _PORTABLE})
    if summarizer:
        config.summarizer = llm_summarizer(config, **summarizer)
    return create_app(config)


def _log_setup() -> None:
    """One log line per request, ours (in the process that serves)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx2", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
