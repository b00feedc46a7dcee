"""Small values and checks for one turn: what a send returned, what the tool workflow is.

Kept apart from `Conversation` so the rules about tool results (which calls are open, what
a valid batch of results looks like) read on their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.values.messages import Message, Node, ToolCallPart, ToolResultPart, text_message
from ..core.values.tree import Branch
from ..providers.base import ChatModel, ChatRequest, ChatResponse, StreamDone, TextDelta
from .compaction import CompactionOutcome
from .errors import ToolWorkflowError

ToolResults = Sequence[ToolResultPart | Message]
RunTools = Callable[[tuple[ToolCallPart, ...]], Awaitable[ToolResults]]
OnText = Callable[[str], Any]


@dataclass(frozen=True)
class SendResult:
    """What one `send` / `continue_turn` / `retry` / `edit` did.

    nodes               messages persisted by this call, in order (user, replies, results)
    reply               the last assistant message (None if none was produced)
    pending_tool_calls  calls of `reply` that wait for results: supply them with
                        `add_tool_results()` and then call `continue_turn()`
    compactions         compactions run before a request of this call (preflight, overflow)
    request_tokens      estimated size of the last request sent
    stop_reason         provider-neutral stop reason of the last reply
    """

    nodes: tuple[Node, ...]
    reply: Message | None
    pending_tool_calls: tuple[ToolCallPart, ...] = ()
    compactions: tuple[CompactionOutcome, ...] = ()
    request_tokens: int = 0
    stop_reason: str | None = None

    @property
    def text(self) -> str:
        return self.reply.text if self.reply is not None else ""

    @property
    def turn_complete(self) -> bool:
        return not self.pending_tool_calls


def as_user_message(message: Message | str) -> Message:
    """The draft as a user message; a non-user message is refused by name."""
    if isinstance(message, str):
        if not message.strip():
            raise ValueError("the message is empty: type something to send")
        return text_message("user", message)
    if not isinstance(message, Message):
        raise TypeError(f"send() takes a str or a user Message, not {type(message).__name__}")
    if message.role != "user":
        raise ValueError(f"send() takes a user message, got role {message.role!r}; tool "
                         "results go through add_tool_results()")
    if message.status != "complete":
        raise ValueError(f"a user message must be complete, not {message.status!r}")
    return message


def open_tool_calls(branch: Branch | None) -> dict[str, ToolCallPart]:
    """Calls in the current turn of completed replies that have no result yet, by id."""
    if branch is None:
        return {}
    nodes = branch.nodes
    start = 0
    for i in range(len(nodes) - 1, -1, -1):
        if nodes[i].is_user_message:
            start = i
            break
    calls: dict[str, ToolCallPart] = {}
    for node in nodes[start:]:
        msg = node.message
        if msg is None:
            continue
        if msg.role == "assistant" and not msg.is_closed_without_result:
            for call in msg.tool_calls:
                calls[call.id] = call
        for result in msg.tool_results:
            calls.pop(result.call_id, None)
    return calls


def result_messages(results: ToolResults, open_calls: dict[str, ToolCallPart]) -> list[Message]:
    """Tool messages to persist for `results`, checked against the open calls.

    Bare `ToolResultPart`s are grouped into one tool message; `Message`s (role "tool",
    e.g. with Zotero resource parts beside the result) are kept as given.
    """
    if not results:
        raise ToolWorkflowError("no tool results given")
    if not open_calls:
        raise ToolWorkflowError("no tool call is waiting for a result")
    loose: list[ToolResultPart] = []
    messages: list[Message] = []
    seen: set[str] = set()
    for item in results:
        if isinstance(item, ToolResultPart):
            parts: tuple[ToolResultPart, ...] = (item,)
            loose.append(item)
        elif isinstance(item, Message):
            if item.role != "tool" or not item.tool_results:
                raise ToolWorkflowError(
                    f"a tool result message must have role 'tool' and a tool_result part "
                    f"(got role {item.role!r} with {len(item.tool_results)} results)")
            parts = item.tool_results
            messages.append(item)
        else:
            raise TypeError(f"tool results must be ToolResultPart or tool Message objects, "
                            f"not {type(item).__name__}")
        for part in parts:
            if part.call_id not in open_calls:
                raise ToolWorkflowError(
                    f"tool result for {part.call_id!r} answers no open call; open calls: "
                    + (", ".join(sorted(open_calls)) or "none"))
            if part.call_id in seen:
                raise ToolWorkflowError(f"two results for tool call {part.call_id!r}")
            seen.add(part.call_id)
    if loose:
        messages.insert(0, Message(role="tool", parts=tuple(loose)))
    return messages


async def ask(model: ChatModel, request: ChatRequest, on_text: OnText | None) -> ChatResponse:
    """One model request: the whole reply, or (with `on_text`) streamed, each text delta
    handed to `on_text` as it arrives."""
    if on_text is None:
        return await model.complete(request)
    response: ChatResponse | None = None
    async for event in model.stream(request):
        if isinstance(event, TextDelta):
            on_text(event.text)
        elif isinstance(event, StreamDone):
            response = event.response
    if response is None:  # pragma: no cover - adapters always end with StreamDone
        raise RuntimeError(f"{model.model} ended its stream without a reply")
    return response
