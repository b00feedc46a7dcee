"""The listening socket handed to uvicorn's worker processes (`serve --workers N`).

uvicorn's supervisor binds the socket itself before it forks the workers, and versions
before 0.55 create it with protocol 0. Accepted connections inherit the protocol, and
asyncio turns `TCP_NODELAY` on only for a socket that says `IPPROTO_TCP`: every response
then waited for the client's delayed ACK (Nagle), ~40 ms on Linux (issue 26). This socket
says `IPPROTO_TCP` and has `TCP_NODELAY` set already (Linux copies it to accepted sockets),
whatever uvicorn version runs it.
"""

from __future__ import annotations

import socket


def tcp_listener(host: str, port: int) -> socket.socket:
    """A bound, inheritable TCP socket on (`host`, `port`) with `TCP_NODELAY` (as uvicorn
    binds it: IPv6 when the host has a colon, `SO_REUSEADDR` on)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
