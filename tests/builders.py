"""Small constructors for hand-built histories in tests.

`chain(...)` links messages into nodes with ids n0, n1, ...; the turn helpers return the
messages of one user turn, with or without tool calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from contextfold.core.values.messages import (
    Checkpoint,
    Message,
    Node,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    text_message,
)
from contextfold.core.values.tree import Branch, build_branch


def user(text: str = "question") -> Message:
    return text_message("user", text)


def assistant(text: str = "answer", usage: Usage | None = None, **kw) -> Message:
    return text_message("assistant", text, usage=usage, **kw)


def tool_call(call_id: str, name: str = "search", args: dict | None = None,
              text: str = "", usage: Usage | None = None, **kw) -> Message:
    parts = ((TextPart(text=text),) if text else ()) + (
        ToolCallPart(id=call_id, name=name, input=args or {"q": call_id}),
    )
    return Message(role="assistant", parts=parts, usage=usage, **kw)


def tool_result(call_id: str, output: str = "result", **kw) -> Message:
    return Message(role="tool", parts=(ToolResultPart(call_id=call_id, output=output, **kw),))


def turn(i: int, tools: int = 0, size: int = 20) -> list[Message]:
    """One user turn: a question, `tools` call/result pairs, and a final answer."""
    msgs = [user(f"question {i} " + "x" * size)]
    for t in range(tools):
        cid = f"call_{i}_{t}"
        msgs += [tool_call(cid), tool_result(cid, "r" * size)]
    msgs.append(assistant(f"answer {i} " + "y" * size))
    return msgs


def chain(items: Iterable[Message | Checkpoint], prefix: str = "n",
          parent: str | None = None) -> list[Node]:
    nodes: list[Node] = []
    for i, payload in enumerate(items):
        node = Node(id=f"{prefix}{i}", parent_id=parent, payload=payload)
        nodes.append(node)
        parent = node.id
    return nodes


def branch_of(nodes: Sequence[Node], revision: int = 0) -> Branch:
    result = build_branch(nodes, nodes[-1].id, revision=revision)
    assert isinstance(result, Branch), result
    return result


def extend(nodes: list[Node], items: Iterable[Message | Checkpoint], prefix: str) -> list[Node]:
    """Append more linked nodes after the last one (new ids use `prefix`)."""
    return nodes + chain(items, prefix=prefix, parent=nodes[-1].id)
