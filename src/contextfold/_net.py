"""Listening sockets without Nagle's algorithm (issue 26).

A socket handed to uvicorn (the proxy's thread, `--workers N`, the bench's upstreams) is
used as it is, and asyncio turns `TCP_NODELAY` on for an accepted connection only when the
socket says `proto == IPPROTO_TCP`; one made with proto 0 left Nagle on, and a keep-alive
request then waited ~40 ms for the peer's delayed ACK. Here the listener says its protocol
and carries `TCP_NODELAY` itself (accepted connections inherit it on Linux), so either way
every connection sends at once.
"""

from __future__ import annotations

import errno
import socket


def nodelay(sock: socket.socket) -> socket.socket:
    """`sock` (a TCP socket, not yet listening) with `TCP_NODELAY` set; returned for
    chaining. Other families (a Unix socket) are returned as they are."""
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A TCP socket bound to `host`:`port` (0: a free port), `SO_REUSEADDR` and
    `TCP_NODELAY` set, its protocol stated, for a server to listen on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    nodelay(sock)
    sock.bind((host, port))
    return sock


def checked_base_url(url: str, name: str = "base_url") -> str:
    """`url` when it can be a model server's base URL: http or https, a host, no
    whitespace or control character, no query string or fragment (a path is appended to
    it, so those would end up in the middle of every request's URL). `ValueError` naming
    `name` and what is wrong otherwise."""
    from urllib.parse import urlsplit

    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        raise ValueError(f"{name}: must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ValueError(f"{name}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{name}: must start with http:// or https://, got {url[:40]!r}")
    if not parts.hostname:
        raise ValueError(f"{name}: names no host")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"{name}: must not have a query string or a fragment")
    return url


def port_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on `host`:`port`, as one sentence for a person (None:
    it can). Checked before a server says it is listening, so a busy port gives this
    sentence alone, not a start line followed by uvicorn's `[Errno 98]`; a port taken in the
    instant between the check and the bind still fails, with uvicorn's words."""
    try:
        listening_socket(host, port).close()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return (f"port {port} on {host} is already in use (another server is listening "
                    "there): stop it, or choose another port with --port N")
        if exc.errno == errno.EACCES:
            return (f"port {port} on {host} needs privileges this user does not have: "
                    "choose a port above 1023 with --port N")
        reason = exc.strerror or str(exc)
        if isinstance(exc, socket.gaierror):
            reason = f"the host name does not resolve ({reason})"
        return f"cannot listen on {host} port {port}: {reason[0].lower() + reason[1:]}"
    return None
