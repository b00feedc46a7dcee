"""Independent checks of provider request shapes: would the provider reject this list?

These are written from the providers' rules, not from the exporter, so they can catch an
exporter bug. Replay and the benchmarks count their findings as invalid requests.
"""

from __future__ import annotations

from typing import Any


def openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Problems a chat-completions endpoint would reject the request for."""
    problems: list[str] = []
    body = [m for m in messages if m.get("role") not in ("system", "developer")]
    if not body:
        return ["empty history"]
    if body[0].get("role") != "user":
        problems.append(f"first non-system message is {body[0].get('role')!r}, not 'user'")
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"message {i}: tool result {call_id!r} does not follow its call")
            pending.discard(call_id)
            continue
        if pending:
            problems.append(f"message {i}: tool calls {sorted(pending)} have no result")
            pending = set()
        if role == "assistant":
            calls = m.get("tool_calls") or []
            pending = {c["id"] for c in calls}
            if not calls and not m.get("content"):
                problems.append(f"message {i}: empty assistant message")
    if pending:
        problems.append(f"tool calls {sorted(pending)} have no result at the end")
    return problems


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Problems the Messages API would reject the request for."""
    if not messages:
        return ["empty history"]
    problems: list[str] = []
    if messages[0].get("role") != "user":
        problems.append("first message is not from the user")
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"message {i}: role {role!r} is not allowed")
        if i and messages[i - 1].get("role") == role:
            problems.append(f"message {i}: two {role} messages in a row")
        content = m.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if not blocks:
            problems.append(f"message {i}: empty content")
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if role == "user":
            missing = pending - set(results)
            if missing:
                problems.append(f"message {i}: tool_use {sorted(missing)} without tool_result")
            orphans = [r for r in results if r not in pending]
            if orphans:
                problems.append(f"message {i}: tool_result {orphans} without tool_use")
            pending = set()
        else:
            if results:
                problems.append(f"message {i}: tool_result in an assistant message")
            if pending:
                problems.append(f"message {i}: tool_use {sorted(pending)} without tool_result")
            pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        for b in blocks:
            if b.get("type") == "text" and not str(b.get("text", "")).strip():
                problems.append(f"message {i}: empty text block")
    if pending:
        problems.append(f"tool_use {sorted(pending)} without tool_result at the end")
    return problems
