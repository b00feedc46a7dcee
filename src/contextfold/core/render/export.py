"""Export a projection to provider request shapes that a provider will always accept.

The common complaint about other agents is a request rejected for an orphaned tool result
after trimming. Here the export itself guarantees validity, whatever the history holds:

* consecutive messages of one side are grouped (Claude Code writes one entry per block);
* a tool result is kept only right after the assistant group that issued its call;
* a call with no result in the following group is dropped (an aborted or errored reply);
* reasoning is not replayed, empty text is skipped, empty messages vanish;
* the first message is a user message (a marked placeholder is added if needed).

Every repair is reported, so a replay can count them instead of hiding them.

`render_openai` / `render_anthropic` write one message the same way without settling it, for
a face that forwards a client's own list and replaces only some of its messages (the proxy).
This module is the one writer of request messages; `contextfold.wire` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..values.messages import RESOURCE_PART_TYPES as _RESOURCES
from ..values.messages import FilePart, Message, TextPart, ToolCallPart, ToolResultPart
from ..values.resources import render_resource
from ..values.tool_calls import tool_arguments
from ..view.pins import pins_text
from ..view.projection import Projection, checkpoint_text

CONTINUATION_PLACEHOLDER = "[contextfold] (conversation continues from earlier context)"
Side = Literal["user", "assistant", "tools"]


@dataclass
class _Group:
    side: Side
    texts: list[str] = field(default_factory=list)
    calls: list[ToolCallPart] = field(default_factory=list)
    results: list[tuple[ToolResultPart, list[str]]] = field(default_factory=list)


@dataclass(frozen=True)
class ExportResult:
    messages: list[dict[str, Any]]
    system: str | None = None
    repairs: tuple[str, ...] = ()


def _file_text(part: FilePart) -> str:
    size = f", {part.size} bytes" if part.size is not None else ""
    return f"[attached file: {part.name} ({part.media_type}{size})]"


class _Groups(list[_Group]):
    """Groups in order; `side` gives the last one when it is of that side, else a new one."""

    def side(self, side: Side) -> _Group:
        if not self or self[-1].side != side:
            self.append(_Group(side))
        return self[-1]


def _build_groups(projection: Projection) -> list[_Group]:
    groups = _Groups()
    text = checkpoint_text(projection.summary) if projection.summary is not None else ""
    if text:  # "" for a checkpoint that is only a provider's compaction (SPEC Y7)
        groups.side("user").texts.append(text)
    if projection.sent_pins:  # SPEC N1: after the summary
        groups.side("user").texts.append(pins_text(projection.sent_pins))
    for node in projection.messages:
        # SPEC Q5: a pin note where it happened, and its turn's recall block (L5), right
        # before the message (one user message with a user message).
        notes = projection.notes_before(node.id)
        if notes:
            groups.side("user").texts.extend(notes)
        _add_message(projection.message_of(node), groups.side)
    trailing = projection.notes_before(None)
    if trailing:
        groups.side("user").texts.extend(trailing)
    return groups


def _add_message(msg: Message, group: Callable[[Side], _Group]) -> None:
    extras: list[str] = []
    for part in msg.parts:
        if isinstance(part, _RESOURCES):
            extras.append(render_resource(part))  # type: ignore[arg-type]
        elif isinstance(part, FilePart):
            extras.append(_file_text(part))
    results = msg.tool_results
    if results:
        g = group("tools")
        for i, result in enumerate(results):
            # Resources and files of a tool message travel with its last result.
            g.results.append((result, extras if i == len(results) - 1 else []))
        extras = []
    texts = [p.text for p in msg.parts if isinstance(p, TextPart) and p.text.strip()]
    if msg.role == "assistant":
        g = group("assistant")
        g.texts.extend(texts + extras)
        if not msg.is_closed_without_result:
            g.calls.extend(msg.tool_calls)
        return
    if msg.role == "system":
        texts = [f"[system message from earlier in the session]\n{t}" for t in texts]
    if texts or extras:
        group("user").texts.extend(texts + extras)


def _settle(groups: list[_Group]) -> tuple[list[_Group], list[str]]:
    """Pair calls with results, drop what a provider would reject, report each repair."""
    repairs: list[str] = []
    for i, g in enumerate(groups):
        if g.side == "assistant":
            nxt = groups[i + 1] if i + 1 < len(groups) else None
            answered = {r.call_id for r, _ in nxt.results} if nxt and nxt.side == "tools" else set()
            kept = []
            for call in g.calls:
                if call.id in answered and call.id not in {c.id for c in kept}:
                    kept.append(call)
                else:
                    repairs.append(f"dropped tool call {call.id} without a result")
            g.calls = kept
        elif g.side == "tools":
            prev = groups[i - 1] if i > 0 else None
            issued = {c.id for c in prev.calls} if prev and prev.side == "assistant" else set()
            kept_results = []
            seen: set[str] = set()
            for result, extras in g.results:
                if result.call_id in issued and result.call_id not in seen:
                    kept_results.append((result, extras))
                    seen.add(result.call_id)
                else:
                    repairs.append(f"dropped tool result {result.call_id} without its call")
            g.results = kept_results
    settled = [g for g in groups if g.texts or g.calls or g.results]
    # Dropping may leave two groups of one side next to each other: merge them.
    merged: list[_Group] = []
    for g in settled:
        if merged and merged[-1].side == g.side and g.side != "tools":
            merged[-1].texts.extend(g.texts)
            merged[-1].calls.extend(g.calls)
        else:
            merged.append(g)
    if merged and merged[0].side != "user":
        merged.insert(0, _Group("user", texts=[CONTINUATION_PLACEHOLDER]))
        repairs.append("added a user message at the start")
    return merged, repairs


def _result_text(result: ToolResultPart, extras: list[str]) -> str:
    body = result.output
    if result.denied:
        body = f"[tool call denied by the user]\n{body}".rstrip()
    elif result.is_error:
        body = f"[tool error]\n{body}".rstrip()
    text = "\n\n".join([body, *extras]) if extras else body
    return text or "(no output)"


def _arguments_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def to_openai(projection: Projection, system: str | None = None) -> ExportResult:
    """Chat-completions `messages` (system first when given)."""
    groups, repairs = _settle(_build_groups(projection))
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    out += _openai_messages(groups)
    return ExportResult(messages=out, system=system, repairs=tuple(repairs))


def render_openai(msg: Message) -> list[dict[str, Any]]:
    """One message as chat-completions messages, exactly as `to_openai` writes it (a tool
    message gives one `tool` message per result), but unsettled: for a face that forwards a
    client's own list and replaces only some of its messages (the proxy's checkpoint prefix
    and masked or clipped copies), whose tool pairs the client's list already holds."""
    return _openai_messages(_message_groups(msg))


def render_anthropic(msg: Message) -> list[dict[str, Any]]:
    """One message as Messages API messages, exactly as `to_anthropic` writes it (a tool
    message with text is one user turn), unsettled like `render_openai`."""
    return _anthropic_messages(_message_groups(msg))


def _message_groups(msg: Message) -> list[_Group]:
    groups = _Groups()
    _add_message(msg, groups.side)
    return groups


def _openai_messages(groups: list[_Group]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g in groups:
        if g.side == "user":
            out.append({"role": "user", "content": "\n\n".join(g.texts)})
        elif g.side == "assistant":
            # A call-only turn says "" rather than null: both are valid OpenAI, and servers
            # such as llama.cpp's answer null with a 500 (so a summariser there fell back).
            text = "\n\n".join(g.texts)
            msg: dict[str, Any] = {"role": "assistant",
                                   "content": text or ("" if g.calls else None)}
            if g.calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments_json(c.input)},
                    }
                    for c in g.calls
                ]
            out.append(msg)
        else:
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "content": _result_text(r, ex)}
                for r, ex in g.results
            )
    return out


def to_anthropic(projection: Projection, system: str | None = None) -> ExportResult:
    """Messages API `messages`; the system prompt is returned separately, as the API wants."""
    groups, repairs = _settle(_build_groups(projection))
    return ExportResult(messages=_anthropic_messages(groups), system=system,
                        repairs=tuple(repairs))


def _anthropic_messages(groups: list[_Group]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g in groups:
        if g.side == "assistant":
            content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in g.texts]
            content += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.input)}
                for c in g.calls
            ]
            out.append({"role": "assistant", "content": content})
            continue
        if g.side == "tools":
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": r.call_id,
                    "content": _result_text(r, ex),
                    **({"is_error": True} if r.is_error or r.denied else {}),
                }
                for r, ex in g.results
            ]
        else:
            blocks = [{"type": "text", "text": t} for t in g.texts]
        # Tool results and following user text share one user turn: roles must alternate.
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    return out


def _tool_input(value: Any) -> dict[str, Any]:
    parsed = tool_arguments(value)
    return parsed if isinstance(parsed, dict) else {"input": value}
