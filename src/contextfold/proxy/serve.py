"""Running the proxy: in the foreground (the CLI) or on a background thread (tests, bench)."""

from __future__ import annotations

import threading
import time

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


def serve(config: ProxyConfig, host: str = "127.0.0.1", port: int = 8788) -> None:
    """Run the proxy in the foreground until interrupted (one log line per request). The
    bind address, when it is a name, is answered too (SPEC Y8)."""
    import dataclasses
    import logging

    import uvicorn

    from ..guard.hosts import with_bind_host
    from .app import create_app

    config = dataclasses.replace(config, allowed_hosts=with_bind_host(config.allowed_hosts,
                                                                      host, port))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx2", "httpcore", "alembic"):  # one line per request is ours
        logging.getLogger(noisy).setLevel(logging.WARNING)
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")
