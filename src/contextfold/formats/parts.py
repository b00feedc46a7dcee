"""Content blocks of provider message formats -> contextfold parts.

Anthropic-shaped blocks (used by the Messages API and by Claude Code transcripts), OpenAI
content parts, and the small helpers both need (file parts without bytes, tool input).
Unknown blocks are reported through `on_unknown` and left out, never fatal.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from contextfold.core.messages import (
    FilePart,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

Unknown = Callable[[str], None]

_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif",
               "image/webp": ".webp", "application/pdf": ".pdf"}


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


def tool_input(value: Any) -> Any:
    """Tool arguments: OpenAI sends a JSON string; keep it parsed when it is valid JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return {} if value is None else value


def nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass
class Converted:
    """The parts of one converted message."""

    parts: list[Part] = field(default_factory=list)

    @property
    def has_results(self) -> bool:
        return any(isinstance(p, ToolResultPart) for p in self.parts)


# ----------------------------------------------------------------- Anthropic blocks


def anthropic_source(block: dict[str, Any], index: int, kind: str) -> FilePart:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    return file_part(source.get("media_type"), index=index, kind=kind,
                     data=source.get("data"), url=source.get("url"),
                     name=block.get("title"))


def _result_output(content: Any, parts: list[Part], on_unknown: Unknown) -> str:
    """Text of a tool_result's content; images inside it become file parts of the message."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        on_unknown("tool_result content that is not text or a list")
        return json.dumps(content, ensure_ascii=False)
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            on_unknown("tool_result content item that is not an object")
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind in ("image", "document"):
            parts.append(anthropic_source(block, len(parts) + 1,
                                          "image" if kind == "image" else "application"))
        else:
            on_unknown(f"tool_result block {kind!r}")
    return "\n".join(texts)


def anthropic_parts(content: Any, on_unknown: Unknown,
                    call_names: dict[str, str] | None = None) -> Converted:
    """Convert Anthropic content (a string or a list of blocks) into parts.

    `call_names` maps tool call ids to tool names; calls found here are added to it and
    results get their tool's name from it.
    """
    names = call_names if call_names is not None else {}
    out = Converted()
    if isinstance(content, str):
        if content:
            out.parts.append(TextPart(text=content))
        return out
    if not isinstance(content, list):
        on_unknown("content that is neither text nor a list of blocks")
        return out
    extras: list[Part] = []  # files of tool results, placed after the results
    for block in content:
        if not isinstance(block, dict):
            on_unknown("content block that is not an object")
            continue
        kind = block.get("type")
        if kind == "text":
            text = nonempty(block.get("text"))
            if text is not None:
                out.parts.append(TextPart(text=text))
        elif kind == "thinking":
            out.parts.append(ReasoningPart(text=block.get("thinking") or "",
                                           signature=nonempty(block.get("signature"))))
        elif kind == "redacted_thinking":
            out.parts.append(ReasoningPart(text="", signature=nonempty(block.get("data"))))
        elif kind == "tool_use" and nonempty(block.get("id")) and nonempty(block.get("name")):
            names[block["id"]] = block["name"]
            out.parts.append(ToolCallPart(id=block["id"], name=block["name"],
                                          input=tool_input(block.get("input"))))
        elif kind == "tool_result" and nonempty(block.get("tool_use_id")):
            call_id = block["tool_use_id"]
            output = _result_output(block.get("content"), extras, on_unknown)
            out.parts.append(ToolResultPart(call_id=call_id, name=names.get(call_id),
                                            output=output,
                                            is_error=block.get("is_error") is True))
        elif kind in ("image", "document"):
            out.parts.append(anthropic_source(block, len(out.parts) + 1,
                                              "image" if kind == "image" else "application"))
        else:
            on_unknown(f"content block {kind!r}")
    out.parts.extend(extras)
    return out


# ----------------------------------------------------------------- OpenAI content parts


def openai_parts(content: Any, on_unknown: Unknown) -> list[Part]:
    """Convert chat-completions `content` (string, list of parts, or null) into parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if not isinstance(content, list):
        on_unknown("content that is neither text nor a list of parts")
        return []
    parts: list[Part] = []
    for item in content:
        if isinstance(item, str):  # tolerated: some clients send bare strings
            if item:
                parts.append(TextPart(text=item))
            continue
        if not isinstance(item, dict):
            on_unknown("content part that is not an object")
            continue
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(item.get("text"), str):
            if item["text"]:
                parts.append(TextPart(text=item["text"]))
        elif kind == "refusal" and isinstance(item.get("refusal"), str):
            parts.append(TextPart(text=item["refusal"]))
        elif kind in ("image_url", "input_image"):
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append(file_part(None, index=len(parts) + 1, url=url))
        elif kind == "input_audio":
            audio = item.get("input_audio")
            audio = audio if isinstance(audio, dict) else {}
            fmt = audio.get("format") if isinstance(audio.get("format"), str) else "*"
            parts.append(file_part(f"audio/{fmt}", index=len(parts) + 1, kind="audio",
                                   data=audio.get("data")))
        elif kind == "file":
            file = item.get("file")
            file = file if isinstance(file, dict) else {}
            parts.append(file_part(None, index=len(parts) + 1, kind="application",
                                   data=file.get("file_data"),
                                   name=file.get("filename") or file.get("file_id")))
        else:
            on_unknown(f"content part {kind!r}")
    return parts
