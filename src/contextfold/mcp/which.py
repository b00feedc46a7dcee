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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlparse

from ..errors import ContextfoldError
from ..store.errors import SessionNotFoundError
from ..store.protocol import SessionStore
from ..store.values import SessionInfo

PAGE = 200  # sessions read at a time, newest first, until one settles the answer

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
    """The session `asked` names (see the module docstring for the order). Sessions are read
    newest first, a page at a time, up to the first that settles the answer (issue 38: a
    store of months holds tens of thousands; reading them all took seconds a call)."""
    if asked.session:
        return await _given(store, asked.session.strip())
    wants = [_norm(directory) for directory in asked.directories]
    product = CLIENT_AGENTS.get(asked.client.lower(), asked.client.lower()) \
        if asked.client else None
    in_directory: dict[int, SessionInfo] = {}  # the newest session under each directory
    of_client: SessionInfo | None = None
    async for session, meta in _proxied_newest(store):
        for i, want in enumerate(wants):
            if i not in in_directory and _under(meta, want):
                in_directory[i] = session
        if product is not None and of_client is None and \
                product in str(meta.get("client", "")).lower():
            of_client = session
        # Settled: the first directory matched (nothing older can beat it), or no
        # directory was given and the client's name matched.
        if 0 in in_directory or (not wants and of_client is not None):
            break
    for i, directory in enumerate(asked.directories):
        if i in in_directory:
            return Found(in_directory[i].id, f"working directory {directory}")
    if of_client is not None:
        return Found(of_client.id, f"latest proxied session of {asked.client}")
    where = ", ".join(asked.directories) or "none given"
    raise NoConversationError(
        f"no proxied conversation found for this client (directories: {where}; client: "
        f"{asked.client or 'unnamed'}): pass session_id, or run the agent through "
        "`contextfold proxy` with the same database")


async def _proxied_newest(store: SessionStore
                          ) -> AsyncIterator[tuple[SessionInfo, dict[str, Any]]]:
    """The proxied sessions with their `proxy` metadata, newest first, read `PAGE` at a time
    (`sessions_newest`: one index range each)."""
    before: tuple[datetime, str] | None = None
    while True:
        batch = await store.sessions_newest(limit=PAGE, before=before)
        for session in batch:
            meta = _proxy(session)
            if meta is not None:
                yield session, meta
        if len(batch) < PAGE:
            return
        before = (batch[-1].created_at, batch[-1].id)


async def _given(store: SessionStore, given: str) -> Found:
    try:
        info = await store.get_session(given)
    except SessionNotFoundError:
        info = None
    if info is not None:
        return Found(info.id, "session id")
    async for session, meta in _proxied_newest(store):
        if meta.get("label") == given:
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


def _under(meta: dict[str, Any], want: str) -> bool:
    """The agent of this proxied session stated the directory `want` (normalised) or one
    below it."""
    cwd = meta.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return False
    have = _norm(cwd)
    return have == want or have.startswith(want.rstrip("/") + "/")


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
