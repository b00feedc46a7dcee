"""What both wire protocols read the same way: text fields, tool arguments, file references,
system prompts, tool definitions.

Unknown content is reported through an `Unknown` callback and left out, never fatal: an
importer counts it, the proxy ignores it (it forwards the client's own JSON anyway).
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from ..core.values.messages import FilePart

# One rule for a call's arguments, the core's; re-exported for the wire readers.
from ..core.values.tool_calls import tool_arguments as tool_arguments

Unknown = Callable[[str], None]

_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif",
               "image/webp": ".webp", "application/pdf": ".pdf"}


def ignore(_what: str) -> None:
    """An `Unknown` that leaves unknown content out without a word."""


def text_of(value: Any) -> str | None:
    """`value` when it is a string, else None."""
    return value if isinstance(value, str) else None


def nonempty(value: Any) -> str | None:
    """`value` when it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def base64_size(data: Any) -> int | None:
    """Decoded size of base64 text without decoding it (images can be megabytes)."""
    if not isinstance(data, str):
        return None
    data = data.strip()
    padding = len(data) - len(data.rstrip("="))
    return max(len(data) * 3 // 4 - padding, 0)


def file_part(media_type: Any, *, index: int, kind: str = "image", data: Any = None,
              url: Any = None, name: Any = None) -> FilePart:
    """A file reference (name + MIME + size); the bytes themselves are never kept (SPEC R5)."""
    mime = media_type if isinstance(media_type, str) and media_type.strip() else None
    if isinstance(url, str) and url.startswith("data:"):
        header = url[5:].split(",", 1)[0]
        mime = mime or header.split(";", 1)[0] or None
        data = url.split(",", 1)[1] if "," in url and ";base64" in header else data
        url = None
    if not (isinstance(name, str) and name.strip()) and isinstance(url, str):
        name = unquote(urlparse(url).path.rsplit("/", 1)[-1]) or url
    if mime is None and isinstance(name, str):
        mime = mimetypes.guess_type(name)[0]
    mime = mime or f"{kind}/*"
    if not (isinstance(name, str) and name.strip()):
        name = f"{kind}-{index}{_EXTENSIONS.get(mime, '')}"
    return FilePart(name=name, media_type=mime, size=base64_size(data))


def system_text(value: Any) -> str:
    """A system prompt's text: a string, or the texts of a list of text blocks joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n\n".join(
            t for t in (text_of(v.get("text")) if isinstance(v, dict) else text_of(v)
                        for v in value) if t)
    return ""


class ToolDefinition(Protocol):
    """A tool as a request declares it (`providers.ToolSpec` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...
