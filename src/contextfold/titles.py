"""A session's title as every face shows it (issue 41): one word for one session on the CLI,
the service and the page.

The title a rename on the page gave (session metadata `page.title`), else the stored title
(the chat's "contextfold chat", an import's file name, the title a client chose), else
`UNTITLED`. A blank title is never shown as nothing on one face and as a word on another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNTITLED = "Untitled"
PAGE_KEY = "page"  # session metadata the page writes: {"title": str, "archived": bool}


def renamed_title(metadata: Mapping[str, Any]) -> str | None:
    """The title a rename on the page gave, if any."""
    page = metadata.get(PAGE_KEY)
    renamed = page.get("title") if isinstance(page, Mapping) else None
    return renamed.strip() if isinstance(renamed, str) and renamed.strip() else None


def shown_title(title: str | None, metadata: Mapping[str, Any]) -> str:
    """The one title shown for a session: renamed, else stored, else `UNTITLED`."""
    stored = title.strip() if isinstance(title, str) else ""
    return renamed_title(metadata) or stored or UNTITLED


__all__ = ["PAGE_KEY", "UNTITLED", "renamed_title", "shown_title"]
