"""Independent checks of provider request shapes: would the provider reject this list?

These are written from the providers' rules, not from the exporter, so they can catch an
exporter bug. Replay and the benchmarks count their findings as invalid requests.
"""

from __future__ import annotations

from typing import Any


def tool_pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Tool calls and results that are not paired, in chat-completions shape.

    Both providers reject these: a tool result must follow the assistant message that made
    its call, and every call must be answered before the next non-tool message.
    """
    problems: list[str] = []
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
            pending = {c["id"] for c in m.get("tool_calls") or []}
    if pending:
        problems.append(f"tool calls {sorted(pending)} have no result at the end")
    return problems


def openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Problems a chat-completions endpoint would reject the request for.

    Tool pairing, an empty history and an empty assistant message. The endpoint does not
    require the first non-system message to come from the user (the Messages API does:
    `anthropic_problems`), so that is not counted here.
    """
    body = [m for m in messages if m.get("role") not in ("system", "developer")]
    if not body:
        return ["empty history"]
    problems = tool_pairing_problems(messages)
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and not m.get("tool_calls") and not m.get("content"):
            problems.append(f"message {i}: empty assistant message")
    return problems


def anthropic_from_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat-completions message list in Messages API shape, as an SDK adapter sends it.

    System and developer messages go to the separate `system` parameter (left out here);
    tool results become `tool_result` blocks of a user turn; consecutive turns of one role
    are merged (the API combines them too). Nothing is repaired, so
    `anthropic_problems(anthropic_from_chat(m))` judges a chat request by the Messages API's
    rules.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            continue
        blocks: list[dict[str, Any]] = []
        if role == "tool":
            role = "user"
            blocks.append({"type": "tool_result", "tool_use_id": m.get("tool_call_id"),
                           "content": m.get("content") or ""})
        else:
            content = m.get("content")
            if isinstance(content, str) and content:
                blocks.append({"type": "text", "text": content})
            elif isinstance(content, list):
                blocks += [b for b in content if isinstance(b, dict)]
            for c in m.get("tool_calls") or ():
                blocks.append({"type": "tool_use", "id": c["id"],
                               "name": c["function"]["name"], "input": {}})
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


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
