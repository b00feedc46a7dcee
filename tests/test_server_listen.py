"""`serve --workers N` listens on a socket whose connections have TCP_NODELAY (issue 26).

uvicorn's supervisor used to bind with protocol 0, so asyncio never set TCP_NODELAY on the
accepted connections and each keep-alive response waited ~40 ms for a delayed ACK.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
from typing import Any

import pytest
from uvicorn import supervisors

from contextfold.server import ServiceConfig
from contextfold.server.listen import tcp_listener
from contextfold.server.run import serve


async def _accepted_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY of a connection accepted on `sock` by asyncio (as uvicorn serves it)."""
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_connect(_reader: Any, writer: asyncio.StreamWriter) -> None:
        conn = writer.get_extra_info("socket")
        seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=sock)
    _r, w = await asyncio.open_connection(*sock.getsockname()[:2])
    try:
        return await asyncio.wait_for(seen, 10)
    finally:
        w.close()
        server.close()
        await server.wait_closed()


async def test_the_listener_is_tcp_and_its_connections_have_nodelay() -> None:
    sock = tcp_listener("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert sock.get_inheritable()  # the worker processes get it
    assert await _accepted_nodelay(sock)


def test_serve_with_workers_hands_uvicorn_a_nodelay_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[tuple[int, int]] = []  # (protocol, TCP_NODELAY) of each socket handed

    class Supervisor:  # stands in for uvicorn's: records the socket, starts nothing
        def __init__(self, config: Any, sockets: list[socket.socket], **_: Any) -> None:
            assert config.workers == 2
            handed.extend((s.proto, s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                          for s in sockets)

        def run(self) -> None:
            pass

    monkeypatch.setattr(supervisors, "Multiprocess", Supervisor)
    # Where `uvicorn.run` looks it up too (`uvicorn.main` the name is its click command).
    monkeypatch.setattr(importlib.import_module("uvicorn.main"), "Multiprocess", Supervisor)
    serve(ServiceConfig(db="postgresql://u@127.0.0.1/db"), "127.0.0.1", 0, workers=2,
          log_level="warning")
    assert len(handed) == 1
    proto, nodelay = handed[0]
    assert proto == socket.IPPROTO_TCP and nodelay
