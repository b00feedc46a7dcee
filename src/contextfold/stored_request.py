"""The next request of a stored session as contextfold's own conversation sends it (the
library's `Conversation`, the chat, the service): the system prompt the service stored for
the session, the recall tools (SPEC L2) and the projection. `contextfold project`,
`contextfold context` and the service's estimate and breakdown size this one request, so
they count the tool definitions alike (issue 41: after a compaction the service counted the
recall tools and `project` did not). Light: no store, runtime or event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .billing import SERVICE_KEY
from .core.recall.recall_tools import recall_tool_json


def stored_system(metadata: Mapping[str, Any] | None) -> str | None:
    """The system prompt the service keeps in a session's settings (None: none)."""
    raw = (metadata or {}).get(SERVICE_KEY)
    system = raw.get("system") if isinstance(raw, Mapping) else None
    return system if isinstance(system, str) and system else None


def stored_tools() -> list[dict[str, Any]]:
    """The tools the request carries: the recall tools, as `Conversation` offers them."""
    return recall_tool_json()


__all__ = ["stored_system", "stored_tools"]
