"""Every listening socket the project creates has TCP_NODELAY (issue 26, SPEC Y11): the
proxy's thread, the service's `--workers N` socket, the bench's upstream; and a connection
accepted on such a socket sends without Nagle's algorithm (no ~40 ms delayed-ACK wait)."""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from contextfold._net import listening_socket, nodelay
from contextfold._workers import worker_socket
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread


def _nodelay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_an_accepted_connection_has_tcp_nodelay() -> None:  # Y11
    async def main() -> int:
        sock = listening_socket()
        port = sock.getsockname()[1]
        got: list[int] = []

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.append(_nodelay(writer.get_extra_info("socket")))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await reader.read()
        writer.close()
        server.close()
        return got[0]

    assert asyncio.run(main()) == 1


def test_proxy_thread_socket_has_tcp_nodelay(tmp_path) -> None:  # Y11
    config = ProxyConfig(upstream="http://127.0.0.1:9", db=f"sqlite:///{tmp_path / 'p.db'}")
    proxy = ProxyThread(config)
    try:
        assert _nodelay(proxy._sock) == 1
        assert proxy._sock.proto == socket.IPPROTO_TCP
    finally:
        proxy._sock.close()


def test_service_worker_socket_has_tcp_nodelay() -> None:  # Y11: `serve --workers N`
    cfg = uvicorn.Config("contextfold.server.run:app_from_env", factory=True,
                         host="127.0.0.1", port=0, workers=2)
    sock = worker_socket(cfg)
    try:
        assert _nodelay(sock) == 1
    finally:
        sock.close()


def test_bench_upstream_socket_has_tcp_nodelay() -> None:  # Y11
    from bench.proxy_bench import Upstream

    upstream = Upstream()
    try:
        assert _nodelay(upstream.sock) == 1
    finally:
        upstream.sock.close()


def test_nodelay_leaves_a_unix_socket_alone(tmp_path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert nodelay(sock) is sock
    finally:
        sock.close()
