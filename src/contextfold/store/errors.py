"""The store's exceptions: one class per thing a caller can act on differently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextfold.core.values.tree import Problem
from contextfold.errors import ContextfoldError


class StoreError(ContextfoldError):
    """Base class of every error the session store raises on purpose."""


class SessionNotFoundError(StoreError, LookupError):
    """No session with this id is stored (a typo, or an id from another database)."""

    kind = "not_found"

    def __init__(self, session_id: object, database: str | None = None) -> None:
        session_id = session_id if isinstance(session_id, str) else repr(session_id)
        where = f"the database {database}" if database else "this database"
        # One message for both faces: the library user and the CLI user read the same text.
        lister = (f"`contextfold sessions --db {database}`" if database
                  else "`contextfold sessions`")
        super().__init__(f"no session {session_id!r} in {where}; {lister} lists its sessions "
                         "(an id may be shortened to any unique prefix, or given as `latest`)")
        self.session_id = session_id
        self.database = database

    def public_message(self) -> str:
        # The same words for an id of another tenant (SPEC W1); no database, no command.
        return "no such session"


class NodeNotFoundError(StoreError, LookupError):
    """A node id that the operation needs is not stored (in this session's tree)."""

    kind = "not_found"

    def public_message(self) -> str:
        return "no such node"  # the same for a node of another tenant's tree (W1)


class InvalidOperationError(StoreError, ValueError):
    """The request itself is wrong: bad payload, wrong kind of node, nothing to retry, ..."""

    kind = "bad_input"


class InvalidPayloadError(InvalidOperationError):
    """A message payload failed validation; the message names the offending field."""


class DuplicateNodeError(InvalidOperationError):
    """A node id given by the caller (append or import) is already stored.

    `holders` are the (session id, title) of the sessions that hold it, when known (a
    re-import names where that history already is)."""

    def __init__(self, message: str, holders: Sequence[tuple[str, str | None]] = ()) -> None:
        super().__init__(message)
        self.holders = tuple(holders)

    def facts(self) -> dict[str, Any]:
        if not self.holders:
            return {}
        return {"sessions": [{"session_id": sid, "title": title}
                             for sid, title in self.holders]}


class ReadOnlySessionError(StoreError):
    """The session's stored history is damaged (SPEC D2): it can be read but never written."""

    kind = "read_only"

    def __init__(self, session_id: str, problems: Sequence[Problem] = (), *,
                 reason: str | None = None) -> None:
        detail = reason or "; ".join(str(p) for p in problems) or "marked read-only"
        super().__init__(
            f"session {session_id!r} is read-only because its stored history is damaged "
            f"({detail}); it can be loaded and exported but nothing will be written to it. "
            "Fork a healthy node into a new session to continue."
        )
        self.session_id = session_id
        self.problems = tuple(problems)


class StaleBranchError(StoreError):
    """`append(expected_leaf_id=...)` found another leaf: someone else moved the branch."""

    kind = "conflict"
    code = "stale"

    def __init__(self, session_id: str, expected: str | None, actual: str | None) -> None:
        super().__init__(
            f"session {session_id!r} moved: its latest node is {actual!r}, not the expected "
            f"{expected!r}; reload the branch and try again"
        )
        self.session_id = session_id
        self.expected_leaf_id = expected
        self.actual_leaf_id = actual

    def public_message(self) -> str:
        return ("the session's branch moved while this request ran (another writer); read the "
                "session again and retry")


class SessionBusyError(StoreError):
    """Another worker holds this session's compaction lease (SPEC U4)."""

    kind = "busy"
    code = "compacting"

    def __init__(self, session_id: str, holder: str, seconds_left: float) -> None:
        super().__init__(
            f"session {session_id!r} is being compacted by {holder} (lease expires in "
            f"{max(0.0, seconds_left):.0f} s); wait for it or retry later"
        )
        self.session_id = session_id
        self.holder = holder
        self.seconds_left = max(0.0, seconds_left)

    def public_message(self) -> str:
        # The holder names a host and a process: for this machine's user only.
        return "a compaction of this session is running on another worker; wait for it or cancel it"

    def facts(self) -> dict[str, Any]:
        return {"reason": "compacting on another worker"}


class ConfigurationError(StoreError):
    """The database URL or location cannot be used."""

    kind = "bad_input"
