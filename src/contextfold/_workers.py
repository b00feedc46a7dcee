"""Several uvicorn worker processes sharing one listening socket (`serve` and `proxy
--workers N`).

The workers are separate processes that uvicorn's supervisor starts from an import string
(an app factory), so each face passes its configuration in an environment variable. The
supervisor binds the socket here, with TCP_NODELAY: some uvicorn versions bind it with proto
0, and their connections kept Nagle's algorithm (~44 ms on every keep-alive response, issue
26).
"""

from __future__ import annotations

import contextlib
import inspect
import socket
from typing import Any

from ._net import nodelay


def run_workers(factory: str, *, host: str, port: int, workers: int, log_level: str,
                **options: Any) -> None:
    """Run the app factory `factory` ("module:function") in `workers` processes on
    `host`:`port` until interrupted; `options` go to `uvicorn.Config` as they are."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    cfg = uvicorn.Config(factory, factory=True, host=host, port=port, workers=workers,
                         log_level=log_level, **options)
    sock = worker_socket(cfg)
    # uvicorn 0.30+ takes the worker's entry point as `target`; older versions find it.
    params = inspect.signature(Multiprocess).parameters
    extra = {"target": uvicorn.Server(cfg).run} if "target" in params else {}
    with contextlib.suppress(KeyboardInterrupt):
        Multiprocess(cfg, sockets=[sock], **extra).run()


def worker_socket(cfg: Any) -> socket.socket:
    """The socket uvicorn's supervisor would bind for `cfg`, with TCP_NODELAY set."""
    return nodelay(cfg.bind_socket())


def workers_problem(workers: int, dialect: str) -> str | None:
    """Why `workers` processes cannot share a store of `dialect` (None: they can). Several
    workers need PostgreSQL: each holds its own memo of the sessions, and the store's
    conditional writes decide between them; SQLite is one process's embedded database."""
    if workers < 1:
        return f"--workers must be at least 1, not {workers}"
    if workers > 1 and dialect != "postgresql":
        return (f"--workers {workers} needs PostgreSQL (--db postgresql://...): SQLite is one "
                "process's embedded database, and the workers must share one store")
    return None
