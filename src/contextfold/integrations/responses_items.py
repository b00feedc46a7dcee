"""Responses API input items <-> contextfold messages (no framework import).

The OpenAI Agents SDK keeps a conversation as Responses input items: messages
(`{"role": "user", "content": ...}`, assistant `{"type": "message", ...}`), `function_call`
and `function_call_output` items, `reasoning` items, hosted-tool items. contextfold keeps
`Message`s. Reading the items is the proxy's reader, `wire.openai_responses.read_input` (one
reader of the protocol: a framework's history and a proxied client's are stored alike):

* the items one model response produced (reasoning, text, calls) become one assistant
  message, so a call and the text before it stay one reply (K1 never cuts between them);
  every `function_call_output` is a tool message naming its call (and the call's tool name);
* identifiers are kept verbatim: `call_id`s, tool names, the arguments (parsed JSON when
  they are JSON, the string otherwise);
* images and files are references (`FilePart`: name, type, size), never the bytes (R5);
* reasoning is stored (never summarised, SPEC R2) and not replayed: a reasoning item without
  the provider's own id and encrypted content would be refused;
* OpenAI's own `compaction` item is the provider's checkpoint (SPEC Y7), stored and replayed
  as it came;
* an item type contextfold has no part for (hosted tools: web search, file search, computer
  use, MCP ...) is stored as assistant text naming the item, so nothing is dropped silently.

Writing them back is the one writer's too, `wire.openai_responses.render_message`, in its
`HISTORY` form (what a framework sends again through its own converters): `message_items`
for one message, `projection_items` for a projection; `paired` is the last guard that no
call goes out without its output and no output without its call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.render.export import CONTINUATION_PLACEHOLDER
from ..core.values.messages import Message, Usage
from ..core.view.projection import Projection
from ..core.view.projection import prefix_text as projection_prefix
from ..wire.openai_responses import HISTORY, item_text, message_item, read_input, render_message
from ..wire.plain import plain

Item = dict[str, Any]


def items_to_messages(items: Iterable[Any], *, call_names: Mapping[str, str] | None = None,
                      usage: Usage | None = None) -> list[Message]:
    """Input items as contextfold messages, read by the one Responses reader
    (`wire.openai_responses.read_input`, the proxy's too; see its docstring for each item).

    `call_names`: tool names of calls stored earlier (a `function_call_output` carries only
    the call id). `usage` goes on the last assistant message produced (SPEC E1). Raises
    ValueError (KeyError, TypeError) for an item that is not one of the protocol's.
    """
    out = [g.message for g in read_input(list(items), call_names=dict(call_names or {}))]
    if usage is not None:
        for i in range(len(out) - 1, -1, -1):
            if out[i].role == "assistant":
                out[i] = out[i].model_copy(update={"usage": usage, "model": usage.model})
                break
    return out


def message_items(msg: Message) -> list[Item]:
    """One contextfold message as input items of the framework's history: the one writer
    (`wire.openai_responses.render_message`) in its `HISTORY` form (easy input messages,
    files named, a failed tool's output marked, reasoning not replayed)."""
    return render_message(msg, form=HISTORY)


def prefix_text(projection: Projection) -> str | None:
    """The checkpoint summary and pins, as one user message's text (None: neither).

    The same text the provider exports send (`core.render.export`), so every face shows a model
    the same checkpoint."""
    return projection_prefix(projection)


def projection_items(projection: Projection) -> list[Item]:
    """What the model sees (SPEC T3) as input items: the checkpoint and pins as one user
    message, then the kept tail and what followed, as projected (masked, clipped)."""
    out: list[Item] = []
    text = prefix_text(projection)
    if text is not None:
        out.append(message_item("user", text, HISTORY))
    for node in projection.messages:
        # SPEC Q5: a pin note where it happened, and its turn's recall block (L5).
        out += [message_item("user", note, HISTORY) for note in projection.notes_before(node.id)]
        out += message_items(projection.message_of(node))
    out += [message_item("user", note, HISTORY) for note in projection.notes_before(None)]
    return out


def paired(items: Sequence[Mapping[str, Any]]) -> tuple[list[Item], int]:
    """`items` with every unpaired call or output left out, and how many were.

    A `function_call_output` must follow its `function_call`; a call must have its output
    (the Responses API refuses either orphan). The projection never splits a pair (K1), so
    this only finds what a caller's own input brought in (an orphaned result in a history
    given to `Runner.run`): it is dropped from what is sent, never from the store.
    """
    calls: set[str] = set()
    answered: set[str] = set()
    keep: list[bool] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            calls.add(str(item.get("call_id")))
            keep.append(True)
        elif kind == "function_call_output":
            cid = str(item.get("call_id"))
            ok = cid in calls and cid not in answered
            answered.add(cid)
            keep.append(ok)
        else:
            keep.append(True)
    out = [dict(item) for item, k in zip(items, keep, strict=True)
           if k and not (item.get("type") == "function_call"
                         and str(item.get("call_id")) not in answered)]
    dropped = len(items) - len(out)
    first = next((i for i in out if i.get("role") not in ("system", "developer")), None)
    if first is not None and first.get("role") != "user":  # the user's side opens a history
        out.insert(out.index(first), message_item("user", CONTINUATION_PLACEHOLDER, HISTORY))
    return out, dropped


def chat_messages(items: Sequence[Mapping[str, Any]],
                  instructions: str | None = None) -> list[dict[str, Any]]:
    """Input items in chat-completions shape, as the SDK's chat-completions converter sends
    them (calls join the assistant message before them); nothing repaired. The validity
    oracles (`core.render.validity`) judge this."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for raw in items:
        item = plain(raw)
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": item_text(item.get("output"))})
        elif kind == "reasoning":
            continue
        elif item.get("role") is not None:
            role = "system" if item["role"] == "developer" else item["role"]
            out.append({"role": role, "content": item_text(item.get("content"))})
    return out
