"""contextfold for pydantic-ai: a history processor and the stored history (extra
`contextfold[pydantic-ai]`).

    store = await open_store()
    history = history_processor(store, capacity=capacity_for("gpt-4o-mini"))
    agent = Agent("openai:gpt-4o-mini", capabilities=[history.capability()],
                  tools=history.recall_tools())
    result = await agent.run("...", message_history=await load_message_history(store, sid))

pydantic-ai calls a history processor before every model request with the run's whole
message list, and the list it returns becomes the run's history. The processor:

* mirrors the list into the durable tree by content (`runtime.mirror`, SPEC Y1): the same
  prefix continues the branch, a changed earlier message branches, nothing is stored twice;
* returns the projection that fits the model (SPEC P1-P3): the checkpoint summary and pins as
  one `UserPromptPart`, then the kept tail as pydantic-ai's own message objects (ids,
  timestamps and provider details kept), `ModelRequest`/`ModelResponse` tool parts paired;
* remembers what it returned, so on the next call (or the next run, given
  `result.all_messages()`) the compacted list is expanded back to the full one before it is
  mirrored: a compaction never looks like an edit.

`load_message_history(store, session_id)` gives the stored branch back as pydantic-ai
messages (to continue a conversation in a new process).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import MissingExtraError

try:
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        ThinkingPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.messages import TextPart as PaiTextPart
    from pydantic_ai.messages import ToolCallPart as PaiToolCallPart
except ImportError as exc:  # pragma: no cover - depends on the install
    raise MissingExtraError.needed_by(__name__, "pydantic-ai", "pydantic-ai") from exc

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.render.export import CONTINUATION_PLACEHOLDER
from ..core.values.messages import (
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..providers.base import ToolSpec
from ..runtime.mirror import Mirror, Synced
from ..runtime.recall import RECALL_TOOLS, Recall
from ..store.protocol import SessionStore
from ..wire.parts import tool_arguments
from ..wire.plain import plain
from ..wire.usage import usage_cache_inside

__all__ = ["ContextfoldHistory", "history_processor", "load_message_history", "to_messages"]

Source = tuple[int, tuple[int, ...]]  # (index of the pydantic-ai message, its part indices)


# --------------------------------------------------------------------------- conversion


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        return "\n".join(_text(c) for c in content)
    text = getattr(content, "content", None)
    if isinstance(text, str):
        return text
    try:
        return json.dumps(content, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(content)


def _is_tool_result(part: Any) -> bool:
    return isinstance(part, ToolReturnPart) or (
        isinstance(part, RetryPromptPart) and part.tool_name is not None)


def _result(part: Any) -> ToolResultPart:
    if isinstance(part, ToolReturnPart):
        retried = getattr(part, "outcome", None) in ("retried", "failed", "error")
        return ToolResultPart(call_id=part.tool_call_id, name=part.tool_name,
                              output=_text(part.content), is_error=retried)
    return ToolResultPart(call_id=part.tool_call_id, name=part.tool_name,
                          output=_text(part.content), is_error=True)


def _usage(response: ModelResponse) -> Usage | None:
    """The reply's usage (E1); pydantic-ai's input includes the cached tokens, and a usage
    of nothing but zeros is one the model did not report."""
    usage = usage_cache_inside(plain(response.usage), _USAGE, response.model_name)
    return usage if usage is not None and usage.input + usage.cache_read + usage.cache_write \
        + usage.output else None


# pydantic-ai's `RequestUsage` (a dataclass, read as its fields): the input includes the cache.
_USAGE = {"prompt": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_tokens",
          "cache_write": "cache_write_tokens"}


def to_messages(history: Sequence[ModelMessage]) -> tuple[list[Message], list[Source], str | None]:
    """pydantic-ai messages as contextfold messages, where each came from, and the system
    prompt (the `SystemPromptPart`s and the latest request's instructions).

    A request's consecutive tool returns (and retry prompts answering a call) become one tool
    message; its user prompt parts one user message; a response one assistant message with
    its usage (E1). Parts without conversational content (instruction or settings deltas)
    are not stored; they stay on the verbatim messages sent."""
    out: list[Message] = []
    sources: list[Source] = []
    system: list[str] = []
    instructions: str | None = None
    for i, msg in enumerate(history):
        if isinstance(msg, ModelResponse):
            parts: list[Part] = []
            for p in msg.parts:
                if isinstance(p, PaiTextPart):
                    parts.append(TextPart(text=p.content))
                elif isinstance(p, PaiToolCallPart):
                    parts.append(ToolCallPart(id=p.tool_call_id, name=p.tool_name,
                                              input=tool_arguments(p.args)))
                elif isinstance(p, ThinkingPart):
                    parts.append(ReasoningPart(text=p.content, signature=p.signature))
                else:
                    body = _text(getattr(p, "content", "") or getattr(p, "args", ""))
                    parts.append(TextPart(text=f"[{getattr(p, 'part_kind', 'part')}] {body}"))
            out.append(Message(role="assistant", parts=tuple(parts), usage=_usage(msg),
                               model=msg.model_name))
            sources.append((i, tuple(range(len(msg.parts)))))
            continue
        instructions = getattr(msg, "instructions", None) or instructions
        system += [p.content for p in msg.parts if isinstance(p, SystemPromptPart)]
        for kind, group in _groups(msg):
            if kind == "tool":
                out.append(Message(role="tool", parts=tuple(_result(msg.parts[j])
                                                            for j in group)))
            else:
                text = "\n".join(_text(msg.parts[j].content) for j in group)
                out.append(Message(role="user", parts=(TextPart(text=text),)))
            sources.append((i, group))
    if instructions:
        system.append(instructions)
    return out, sources, "\n\n".join(system) or None


def _groups(request: ModelRequest) -> list[tuple[str, tuple[int, ...]]]:
    """A request's conversational parts as runs of one kind ("tool" results or "user"
    prompts), by part index; system prompts and control parts are left out."""
    runs: list[tuple[str, list[int]]] = []
    for j, p in enumerate(request.parts):
        if isinstance(p, SystemPromptPart) or not _conversational(p):
            continue
        kind = "tool" if _is_tool_result(p) else "user"
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(j)
        else:
            runs.append((kind, [j]))
    return [(kind, tuple(idx)) for kind, idx in runs]


def _parts_of(msg: Message) -> ModelMessage:
    """A contextfold message (masked, clipped, or the checkpoint) as a pydantic-ai one."""
    if msg.role == "assistant":
        parts: list[Any] = [PaiTextPart(content=p.text) for p in msg.parts
                            if isinstance(p, TextPart) and p.text]
        parts += [PaiToolCallPart(tool_name=c.name, args=c.input, tool_call_id=c.id)
                  for c in msg.tool_calls]
        return ModelResponse(parts=parts, model_name=msg.model)
    if msg.role == "tool":
        return ModelRequest(parts=[ToolReturnPart(tool_name=r.name or "tool", content=r.output,
                                                  tool_call_id=r.call_id)
                                   for r in msg.tool_results])
    return ModelRequest(parts=[UserPromptPart(content=msg.text)])


def rebuild(synced: Synced, history: Sequence[ModelMessage], sources: Sequence[Source],
            system_parts: Sequence[Any]) -> list[ModelMessage]:
    """The request to send as pydantic-ai messages: the original objects where the message
    goes out verbatim, a converted one where the projection changed it."""
    out: list[ModelMessage] = []
    last_source: int | None = None
    for item in synced.items():
        if item.index is None or not item.verbatim:
            out.append(_parts_of(item.message))
            last_source = None
            continue
        i, part_idx = sources[item.index]
        original = history[i]
        if isinstance(original, ModelResponse):
            out.append(original)
        elif last_source == i and isinstance(out[-1], ModelRequest):
            out[-1] = dataclasses.replace(out[-1], parts=[*out[-1].parts,
                                                          *(original.parts[j] for j in part_idx)])
        else:
            keep = [p for j, p in enumerate(original.parts)
                    if j in part_idx or not _conversational(p)]
            out.append(dataclasses.replace(original, parts=keep))
        last_source = i
    out = paired(out)
    if system_parts:
        out.insert(0, ModelRequest(parts=list(system_parts)))
    # One request per side, as pydantic-ai keeps a history (it merges consecutive requests):
    # what we return is then exactly what comes back on the next call.
    merged: list[ModelMessage] = []
    for m in out:
        if merged and isinstance(m, ModelRequest) and isinstance(merged[-1], ModelRequest):
            merged[-1] = dataclasses.replace(merged[-1], parts=[*merged[-1].parts, *m.parts])
        else:
            merged.append(m)
    return merged


def paired(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """`messages` without unpaired tool parts: a tool return must answer a call of the
    response just before it, and a call must be answered by the request just after it.

    The projection never splits a pair (K1); this finds what a caller's own history brought
    in (a `message_history` trimmed elsewhere): left out of what is sent, kept in the store.
    """
    out: list[ModelMessage] = []
    for k, m in enumerate(messages):
        if isinstance(m, ModelRequest):
            prev = out[-1] if out else None
            calls = {p.tool_call_id for p in prev.parts if isinstance(p, PaiToolCallPart)} \
                if isinstance(prev, ModelResponse) else set()
            parts = [p for p in m.parts if not _is_tool_result(p) or p.tool_call_id in calls]
            if not any(_conversational(p) and not isinstance(p, SystemPromptPart)
                       for p in parts):
                continue
            out.append(m if len(parts) == len(m.parts) else dataclasses.replace(m, parts=parts))
            continue
        nxt = messages[k + 1] if k + 1 < len(messages) else None
        answered = {p.tool_call_id for p in nxt.parts if _is_tool_result(p)} \
            if isinstance(nxt, ModelRequest) else set()
        parts = [p for p in m.parts
                 if not isinstance(p, PaiToolCallPart) or p.tool_call_id in answered]
        if parts:
            out.append(m if len(parts) == len(m.parts) else dataclasses.replace(m, parts=parts))
    if out and isinstance(out[0], ModelResponse):  # a history must open with the user's side
        out.insert(0, ModelRequest(parts=[UserPromptPart(content=CONTINUATION_PLACEHOLDER)]))
    return out


def _conversational(part: Any) -> bool:
    return isinstance(part, SystemPromptPart) or _is_tool_result(part) or \
        getattr(part, "part_kind", None) in ("user-prompt", "retry-prompt", "retry-feedback")


# --------------------------------------------------------------------------- the processor


class ContextfoldHistory:
    """The history processor (see the module docstring); one per conversation."""

    def __init__(self, store: SessionStore, *, capacity: ModelCapacity,
                 session_id: str | None = None,
                 capacities: Mapping[str, ModelCapacity] | None = None,
                 summarizer: Any = None, settings: CompactionSettings | None = None,
                 tools: Sequence[ToolSpec] = (), mirror: Mirror | None = None) -> None:
        self.store = store
        self.capacity = capacity
        self.capacities = dict(capacities or {})
        self.session_id = session_id
        self.tools = tuple(tools)
        self.mirror = mirror or Mirror(store, summarizer=summarizer, settings=settings,
                                       background=False)
        self.last: Synced | None = None
        self._returned: list[ModelMessage] = []
        self._full: list[ModelMessage] = []

    async def __call__(self, ctx: RunContext[Any],
                       messages: list[ModelMessage]) -> list[ModelMessage]:
        if self.session_id is None:
            self.session_id = (await self.store.create_session(title="pydantic-ai")).id
        full = self._expand(messages)
        converted, sources, system = to_messages(full)
        if not converted:
            return messages
        synced = await self.mirror.sync(
            converted, capacity=self.capacity_of(ctx.model), session_id=self.session_id,
            system=system, tools=self.tools + _agent_tools(ctx))
        self.last = synced
        system_parts = [p for m in full if isinstance(m, ModelRequest) for p in m.parts
                        if isinstance(p, SystemPromptPart)]
        out = rebuild(synced, full, sources, system_parts)
        self._returned, self._full = list(out), list(full)
        return out

    def capability(self) -> ProcessHistory[Any]:
        """This processor as an agent capability: `Agent(..., capabilities=[...])`. Besides
        processing the history before every request, it stores each reply as it arrives
        (with its usage, E1) and runs the auto check after it (A1), so a run's final answer
        is in the store when the run ends."""
        return _Capability(self)

    async def record(self, response: ModelResponse) -> None:
        """Store the model's reply to the last request processed (and the auto check)."""
        if self.last is None:
            return
        converted, _, _ = to_messages([response])
        if converted:
            await self.mirror.record_reply(self.last, converted[0])

    def _expand(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The full list behind `messages`: what we returned last time stands for the full
        list it was made from (pydantic-ai keeps the processed list as the run's history)."""
        n = len(self._returned)
        if n and len(messages) >= n and all(
                a is b or a == b for a, b in zip(messages[:n], self._returned, strict=False)):
            return [*self._full, *messages[n:]]
        return list(messages)

    def capacity_of(self, model: Any) -> ModelCapacity:
        """`capacities[model_name]`, else `capacity` (a model switch between runs)."""
        from ..core.sizing.resolver import given_capacity

        return given_capacity(getattr(model, "model_name", None), self.capacities,
                              self.capacity)

    def switch_model(self, capacity: ModelCapacity) -> None:
        """Size for `capacity` from the next request on (a smaller window compacts, P2)."""
        self.capacity = capacity

    def recall_tools(self) -> list[Tool[Any]]:
        """`history_search` / `history_expand` (SPEC L2) as pydantic-ai `Tool`s."""
        return [Tool.from_schema(self._recall_runner(spec.name), name=spec.name,
                                 description=spec.description, json_schema=spec.input_schema)
                for spec in RECALL_TOOLS]

    def _recall_runner(self, name: str) -> Any:
        async def invoke(**args: Any) -> str:
            if self.session_id is None:
                return "[tool error] nothing is stored yet"
            call = ToolCallPart(id="recall", name=name, input=args)
            seen = {n.id for n in self.last.projection.messages} if self.last else set()
            result = await Recall(self.store, self.session_id).run(call, in_context=seen)
            return f"[tool error] {result.output}" if result.is_error else result.output

        return invoke


@dataclasses.dataclass
class _Capability(ProcessHistory[Any]):
    """`ProcessHistory` that also records every reply (see `ContextfoldHistory.capability`)."""

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: Any,
                                  response: ModelResponse) -> ModelResponse:
        processor = self.processor
        if isinstance(processor, ContextfoldHistory):
            await processor.record(response)
        return response


def history_processor(store: SessionStore, *, capacity: ModelCapacity,
                      session_id: str | None = None,
                      **options: Any) -> ContextfoldHistory:
    """A pydantic-ai history processor over `store` (options: see `ContextfoldHistory`)."""
    return ContextfoldHistory(store, capacity=capacity, session_id=session_id, **options)


async def load_message_history(store: SessionStore, session_id: str) -> list[ModelMessage]:
    """The stored branch of `session_id` as pydantic-ai messages (the whole durable
    history, checkpoints left out): `message_history=` for a run that continues it."""
    branch = await store.load_full_branch(session_id)
    out: list[ModelMessage] = []
    for node in branch.nodes:
        msg = node.message
        if msg is None or msg.role == "system":
            continue
        converted = _parts_of(msg)
        if out and isinstance(out[-1], ModelRequest) and isinstance(converted, ModelRequest):
            out[-1] = dataclasses.replace(out[-1], parts=[*out[-1].parts, *converted.parts])
        else:
            out.append(converted)
    return out


def _agent_tools(ctx: Any) -> tuple[ToolSpec, ...]:
    """The agent's function tools as `ToolSpec`s, where the agent exposes them (they travel
    with every request, so they count in the estimate)."""
    toolset = getattr(getattr(ctx, "agent", None), "_function_toolset", None)
    out = []
    for name, tool in (getattr(toolset, "tools", None) or {}).items():
        schema = getattr(getattr(tool, "function_schema", None), "json_schema", None)
        out.append(ToolSpec(name=name, description=getattr(tool, "description", "") or "",
                            input_schema=schema if isinstance(schema, dict) else
                            {"type": "object", "properties": {}}))
    return tuple(out)
