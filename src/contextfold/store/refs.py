"""Ids as a person types them: like git's object names (issue 41).

A session or node id is 36 characters; every face (the command line, the service's paths and
bodies, the page's links) takes instead any prefix of it that names one id, and `latest` for
the session active last (the latest leaf move: a message, a compaction, a retry; a rename is
not activity). A prefix that names several ids is refused with the candidates listed, so the
user can type one more character; one that names none is the store's usual "no session".

The one resolver of the project: every face calls `resolve_session_id` / `resolve_node_id`
on the store it holds, which is already limited to its tenant (SPEC W1), so a prefix never
matches another tenant's session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import InvalidOperationError, NodeNotFoundError, SessionNotFoundError

if TYPE_CHECKING:
    from .protocol import SessionReader
    from .values import SessionInfo

LATEST = "latest"
CANDIDATES = 8  # how many candidates an ambiguous prefix lists


class AmbiguousIdError(InvalidOperationError):
    """A shortened id names more than one session (or node): the candidates are listed.

    Bad input (CLI exit 2, the service's 400): the user types more of the id."""

    code = "ambiguous_id"

    def __init__(self, what: str, prefix: str, candidates: list[tuple[str, str | None]],
                 more: bool) -> None:
        count = f"more than {len(candidates)}" if more else str(len(candidates))
        listed = "".join(f"\n  {cid}  {title}" if title else f"\n  {cid}"
                         for cid, title in candidates)
        super().__init__(f"{prefix!r} is ambiguous: {count} {what}s have an id starting with "
                         f"it; type more of the id:{listed}" + ("\n  ..." if more else ""))
        self.what = what
        self.prefix = prefix
        self.candidates = tuple(candidates)
        self.more = more

    def public_message(self) -> str:
        # The candidates are the caller's own tenant's (the store was scoped): safe to show.
        return str(self)

    def facts(self) -> dict[str, Any]:
        return {"candidates": [{"id": cid, "title": title} for cid, title in self.candidates],
                "more": self.more}


async def resolve_session(store: SessionReader, ref: str) -> SessionInfo:
    """The session `ref` names in `store` (its tenant's): the whole id, a unique prefix of
    it, or `latest`. `SessionNotFoundError` when none, `AmbiguousIdError` when several.
    Damage is not checked here: the caller's own read of the session does that."""
    if not isinstance(ref, str) or not ref.strip():
        raise SessionNotFoundError(ref, getattr(store, "database", None))
    ref = ref.strip()
    if ref == LATEST:
        latest = await store.latest_session()
        if latest is None:
            raise SessionNotFoundError(ref, getattr(store, "database", None))
        return latest
    found = await store.find_sessions(ref, limit=CANDIDATES + 1)
    exact = [info for info in found if info.id == ref]
    if exact:
        return exact[0]
    if not found:
        raise SessionNotFoundError(ref, getattr(store, "database", None))
    if len(found) > 1:
        raise AmbiguousIdError("session", ref, [(i.id, i.title) for i in found[:CANDIDATES]],
                               more=len(found) > CANDIDATES)
    return found[0]


async def resolve_session_id(store: SessionReader, ref: str) -> str:
    """`resolve_session(store, ref).id`: the whole id of the session `ref` names."""
    return (await resolve_session(store, ref)).id


async def resolve_node_id(store: SessionReader, session_id: str, ref: str) -> str:
    """The node of the session's tree that `ref` names: its whole id or a unique prefix.
    `NodeNotFoundError` when none, `AmbiguousIdError` when several."""
    if not isinstance(ref, str) or not ref.strip():
        raise NodeNotFoundError(f"no node {ref!r} in this session")
    ref = ref.strip()
    found = await store.find_nodes(session_id, ref, limit=CANDIDATES + 1)
    if ref in found:
        return ref
    if not found:
        raise NodeNotFoundError(f"no node {ref!r} in this session's tree")
    if len(found) > 1:
        raise AmbiguousIdError("node", ref, [(n, None) for n in found[:CANDIDATES]],
                               more=len(found) > CANDIDATES)
    return found[0]


__all__ = ["LATEST", "AmbiguousIdError", "resolve_node_id", "resolve_session",
           "resolve_session_id"]
