"""Which host names a server answers, and which origins may change its state (SPEC Y8).

DNS rebinding: a page on `http://attacker.example:8765` whose name is switched to 127.0.0.1
after it loaded is, for the browser, still *its own* origin, so its `fetch()` reaches a
loopback server with `Host: attacker.example:8765`. A server that answers only the names it
was started for gives that page nothing. By default those are the loopback names
(`localhost`, `127.0.0.1`, `[::1]`) and the literal address the connection arrived at (the
bind address, or each local address under `0.0.0.0`), each on the port it arrived at; an
operator adds the names clients really use (`--allowed-host`, e.g. behind a reverse proxy).

A page on another origin can still *send* a "simple" cross-site request (a form post) that a
browser does not preflight; it always carries `Origin`. So a state-changing request is
accepted only with no `Origin` (SDKs, agents, curl: not a browser) or with an origin that is
one of the server's own names.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def is_loopback(host: str) -> bool:
    """Whether a bind address is loopback only (a name of ours, or a loopback IP)."""
    if host.strip("[]") in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def with_bind_host(allowed: Iterable[str], host: str, port: int) -> tuple[str, ...]:
    """`allowed` plus the bind address when it is a name (`--host myhost.lan`): an address
    literal is matched as the connection's own address already, a wildcard names nothing."""
    names = tuple(allowed)
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if bare and bare.lower() not in LOOPBACK_NAMES:
            return (*names, f"{bare}:{port}")
    return names


def split_host(value: str, default_port: int | None) -> tuple[str, int | None] | None:
    """`name[:port]` / `[v6][:port]` as (lower-case name without brackets, port); None when
    it is not a host (a path, a user part, a bad port)."""
    value = value.strip()
    if not value or any(c in value for c in "/@?#\\ \t"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text = value.rpartition(":")
        if not colon or ":" in name:  # no port, or a bare IPv6 address without brackets
            name, port_text = value, None
    if port_text is None or port_text == "":
        port = default_port
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        return None
    return (name.lower().rstrip("."), port) if name else None


@dataclass(frozen=True)
class HostPolicy:
    """The names a server answers: the loopback names and the connection's own address on
    its port, plus `allowed` entries (`name` on any port, or `name:port`)."""

    allowed: tuple[tuple[str, int | None], ...] = ()

    @classmethod
    def of(cls, names: Iterable[str]) -> HostPolicy:
        """A policy from `--allowed-host` values; ValueError naming a value that is not one."""
        out = []
        for raw in names:
            parsed = split_host(raw, None)
            if parsed is None:
                raise ValueError(f"--allowed-host {raw!r}: expected a host name or address, "
                                 "optionally with :PORT (e.g. contextfold.example.org or "
                                 "10.0.0.5:8765)")
            out.append(parsed)
        return cls(tuple(out))

    def allows(self, name: str, port: int | None, server: tuple[str, int | None] | None
               ) -> bool:
        """Whether (`name`, `port`) is one of ours for a connection that arrived at `server`
        (the local address and port, as ASGI servers report it; None if unknown)."""
        for allowed_name, allowed_port in self.allowed:
            if name == allowed_name and allowed_port in (None, port):
                return True
        own_port = server[1] if server else None
        if own_port is not None and port != own_port:
            return False
        if name in LOOPBACK_NAMES:
            return True
        local = (server[0] or "").strip("[]").lower() if server else ""
        return bool(local) and _same_address(name, local)

    def host_ok(self, host_header: str | None, scheme: str,
                server: tuple[str, int | None] | None) -> bool:
        """The request's `Host` is one of ours (a request without one is refused too)."""
        if host_header is None:
            return False
        parsed = split_host(host_header, _DEFAULT_PORTS.get(scheme, 80))
        return parsed is not None and self.allows(*parsed, server)

    def origin_ok(self, origin: str, server: tuple[str, int | None] | None) -> bool:
        """An `Origin` header names one of our own names (`null` and other schemes do not)."""
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or \
                parts.query or parts.username or parts.password:
            return False
        parsed = split_host(parts.netloc, _DEFAULT_PORTS[parts.scheme])
        if parsed is None:
            return False
        # Behind a TLS-terminating reverse proxy the page's origin is https on 443 while the
        # connection is plain http on our port: a name the operator allowed matches on any
        # port; the default names must match the port the connection arrived at.
        return self.allows(*parsed, server)


def _same_address(name: str, local: str) -> bool:
    try:
        a, b = ipaddress.ip_address(name), ipaddress.ip_address(local)
    except ValueError:
        return False
    # A dual-stack socket reports an IPv4 peer's local address as ::ffff:a.b.c.d.
    return _unmapped(a) == _unmapped(b)


def _unmapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> object:
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address
