"""Which conversation an MCP client means (docs/mcp.md, SPEC L4).

In order, the first that names one wins:

1. a session given by the client: the tool's `session_id` argument, else the
   `x-contextfold-session` header (streamable HTTP), else `contextfold mcp --session`. It is
   a session id, or the label a proxied agent sent in the same header (its latest session);
2. the working directory: the client's roots (`file://` URIs), else, over stdio, the
   directory the client started the server in; the latest proxied session whose agent
   stated that directory, or one below it (`proxy/workdir.py`);
3. the latest proxied session of the client itself, matched by the name it gives in
   `initialize` (`claude-code` is Claude Code's `claude-cli` user agent).

Only sessions of the server's store and tenant are ever looked at; nothing here can reach
another tenant's session. "Latest" is the newest by creation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import ContextfoldError
from ..store.errors import SessionNotFoundError
from ..store.protocol import SessionStore
from ..store.values import SessionInfo

# An MCP client's `clientInfo.name` -> the product in the user agent its model calls carry.
CLIENT_AGENTS = {"claude-code": "claude-cli", "codex-mcp-client": "codex", "codex": "codex",
                 "opencode": "opencode"}


class NoConversationError(ContextfoldError, LookupError):
    """No conversation of this client could be found (a tool error the agent can read)."""

    kind = "not_found"


@dataclass(frozen=True)
class Asked:
    """What the client said about itself: a session (id or label), its directories, name."""

    session: str | None = None
    directories: tuple[str, ...] = ()
    client: str | None = None


@dataclass(frozen=True)
class Found:
    """The conversation and how it was found (reported with every tool result)."""

    session_id: str
    how: str


async def which_session(store: SessionStore, asked: Asked) -> Found:
    """The session `asked` names (see the module docstring for the order)."""
    # check_damage=False: the metadata is all this needs (no tail read per session).
    proxied = [s for s in await store.list_sessions(check_damage=False)
               if _proxy(s) is not None]
    proxied.sort(key=lambda s: s.created_at, reverse=True)
    if asked.session:
        return await _given(store, asked.session.strip(), proxied)
    for directory in asked.directories:
        found = _in_directory(proxied, directory)
        if found is not None:
            return Found(found.id, f"working directory {directory}")
    if asked.client:
        product = CLIENT_AGENTS.get(asked.client.lower(), asked.client.lower())
        for session in proxied:
            if product in str(_proxy(session).get("client", "")).lower():  # type: ignore[union-attr]
                return Found(session.id, f"latest proxied session of {asked.client}")
    where = ", ".join(asked.directories) or "none given"
    raise NoConversationError(
        f"no proxied conversation found for this client (directories: {where}; client: "
        f"{asked.client or 'unnamed'}): pass session_id, or run the agent through "
        "`contextfold proxy` with the same database")


async def _given(store: SessionStore, given: str, proxied: Sequence[SessionInfo]) -> Found:
    try:
        info = await store.get_session(given)
    except SessionNotFoundError:
        info = None
    if info is not None:
        return Found(info.id, "session id")
    for session in proxied:
        if _proxy(session).get("label") == given:  # type: ignore[union-attr]
            return Found(session.id, f"session label {given}")
    # Not an id nor a label: a unique prefix of an id, or `latest`, as every face takes one
    # (an ambiguous prefix is refused with its candidates).
    from ..store.refs import resolve_session

    try:
        return Found((await resolve_session(store, given)).id, f"session id {given}…")
    except SessionNotFoundError:
        pass
    raise NoConversationError(f"no session or proxied session label {given!r} in this "
                              "database (for this tenant)")


def _in_directory(proxied: Sequence[SessionInfo], directory: str) -> SessionInfo | None:
    want = _norm(directory)
    for session in proxied:
        cwd = _proxy(session).get("cwd")  # type: ignore[union-attr]
        if isinstance(cwd, str) and cwd:
            have = _norm(cwd)
            if have == want or have.startswith(want.rstrip("/") + "/"):
                return session
    return None


def _proxy(session: SessionInfo) -> dict[str, Any] | None:
    meta = session.metadata.get("proxy")
    return meta if isinstance(meta, dict) else None


def _norm(path: str) -> str:
    return os.path.normpath(path).replace("\\", "/")


def root_directories(uris: Sequence[str]) -> tuple[str, ...]:
    """The local directories of MCP roots (`file:///repo` -> `/repo`); others left out."""
    out = []
    for uri in uris:
        parsed = urlparse(str(uri))
        if parsed.scheme == "file" and parsed.path:
            out.append(unquote(parsed.path))
    return tuple(out)
