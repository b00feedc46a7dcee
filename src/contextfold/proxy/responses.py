"""The proxy's OpenAI Responses endpoint (`POST /v1/responses`, SPEC Y6), for Codex and every
client of the Responses API.

The same exchange as chat completions and Messages (`exchange.py`, with `ResponsesAdapter`
for what is the protocol's own): the request's items are read
as messages (`wire.openai_responses.read_input`), mirrored onto the tree by content (Y1) and
fitted by the one fit step (`Mirror.sync` -> `runtime/fitting.py`, Y2/Y3); each kept message is
forwarded as the very items the client sent (reasoning and encrypted items included, opaque,
Y4), only what the projection changed is rendered. The reply, plain or streamed through as it
arrives, is recorded with its usage (E1) after the client has it.

`previous_response_id`: the client sends only the new items after a response it names. The
proxy resolves the id to the whole input and output of that response (`ResponseLog`: in
memory, else from the store: one look-up of the id under its owner, migration 0008, then the
session's branch up to the reply), forwards the whole conversation statelessly (so it can be
fitted) and drops the id, which the upstream need not hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..core.values.messages import Message
from ..guard.body import loads_bounded
from ..runtime.held import Held, text_bytes
from ..runtime.mirror import Synced
from ..wire import openai_responses as wire
from ..wire.parts import system_text
from ..wire.reply import MalformedReply
from .exchange import Adapter, Reader, Refused
from .wire import Parsed, StreamReader, WireError

Item = dict[str, Any]


@dataclass
class ParsedItems(Parsed):
    """A Responses request as the mirror reads it: the proxy's `Parsed` (`offset`: the
    leading developer/system items, the prompt, forwarded as sent) with the items its
    messages were read from, which a kept message is forwarded as."""

    items: list[Item] = field(default_factory=list)  # the whole input (previous resolved)
    groups: list[wire.Grouped] = field(default_factory=list)  # per message, `items[offset:]`


def _items_of(body: dict[str, Any]) -> list[Item]:
    given = body.get("input")
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if not isinstance(given, list):
        raise WireError("input: a string or a list of items is required")
    return list(given)


def parse(body: Any, previous: Sequence[Item] = ()) -> ParsedItems:
    """The mirror's view of a Responses request; `previous`: the items a
    `previous_response_id` stands for."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("model: a model name is required")
    items = [*previous, *_items_of(body)]
    if not items:
        raise WireError("input: at least one item is required")
    offset = 0
    systems = [system_text(body.get("instructions"))]
    while offset < len(items) and isinstance(items[offset], dict) and \
            items[offset].get("type") in (None, "message") and \
            items[offset].get("role") in ("system", "developer"):
        systems.append(wire.item_text(items[offset].get("content")))
        offset += 1
    if offset == len(items):
        raise WireError("input: at least one item besides system or developer messages "
                        "is required")
    try:
        groups = wire.read_input(items[offset:])
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise WireError(f"input: {exc}") from exc
    return ParsedItems("responses", model, "\n\n".join(s for s in systems if s) or None,
                       wire.read_tools(body.get("tools")), [g.message for g in groups], offset,
                       bool(body.get("stream")), items=items, groups=groups)


def build(parsed: ParsedItems, body: dict[str, Any], synced: Synced) -> dict[str, Any]:
    """The body to forward: the client's own fields, the projected items (each kept message
    as the items the client sent, Y2/Y4), the output limit clamped to the window (B1)."""
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    items: list[Item] = list(parsed.items[:parsed.offset])
    for item in synced.items():
        if item.index is None:  # the checkpoint and pins prefix (stable bytes, Y4)
            items.extend(wire.render_message(item.message))
            continue
        group = [parsed.items[parsed.offset + i] for i in parsed.groups[item.index].items]
        if item.verbatim:
            items.extend(group)
        else:
            items.extend(wire.render_message(item.message, group))
    out["input"] = items
    room = max(1, synced.budget.context_window - synced.estimate.tokens)
    if isinstance(out.get("max_output_tokens"), int) and out["max_output_tokens"] > room:
        out["max_output_tokens"] = room
    return out


def encode(body: dict[str, Any]) -> tuple[bytes, list[str]]:
    """The body as sent and its prefix-ordered pieces (instructions and tools, then each
    item), for the Y4 prefix-reuse figure."""
    pieces = [json.dumps(i, ensure_ascii=False) for i in body.get("input") or []]
    rest = json.dumps({k: v for k, v in body.items() if k != "input"}, ensure_ascii=False)
    data = rest[:-1] + ("," if len(rest) > 2 else "") + '"input":[' + ",".join(pieces) + "]}"
    head = json.dumps([body.get("instructions"), body.get("tools")], ensure_ascii=False)
    return data.encode("utf-8"), [head, *pieces]


# --------------------------------------------------------------------------- response ids


class ResponseLog:
    """What each response id stands for: the session, and the whole item list (input and
    output) a request naming it as `previous_response_id` continues. Held in the process's
    bounded cache (`held`, SPEC Y14: least recently used out); the store keeps every id
    with its owner and reply node (`response_ids`, migration 0008), so after a restart, an
    eviction or on another process the items are rendered from the stored branch.

    SPEC Y12: an id is honoured only for the owner that created it (`identity.owner_of`:
    the tenant and the client key's fingerprint), in memory and in the store alike; anyone
    else's request finds nothing, as for an id never seen."""

    def __init__(self, held: Held | None = None) -> None:
        self.held = held if held is not None else Held()

    def remember(self, owner: str, response_id: str, session_id: str, items: list[Item],
                 size: int) -> None:
        """Hold what `response_id` stands for (`size`: its bytes, about)."""
        self.held.put(("response", owner, response_id), (session_id, items), size)

    async def resolve(self, store: Any, owner: str, response_id: str) -> list[Item] | None:
        """The items `response_id` stands for when `owner` created it (None: unknown here
        and in the store, or another owner's)."""
        held = self.held.get(("response", owner, response_id))
        if held is not None:
            return held[1]
        # One primary-key look-up under the owner (migration 0008): another owner's id is
        # not found there, as an id never seen.
        found = await store.find_response(owner, response_id)
        if found is None:
            return None
        session_id, node_id = found
        branch = await store.load_full_branch(session_id)
        nodes = getattr(branch, "nodes", None) or getattr(branch, "readable", ())
        out: list[Item] = []
        for node in nodes:
            if node.message is not None and node.message.role != "system":
                out.extend(wire.render_message(node.message))
            if node.id == node_id:
                return out
        return None  # the session has left that reply's branch since


async def _record_id(proxy: Any, synced: Synced, owner: str, response_id: str,
                     node_id: str) -> None:
    await proxy.store.record_response(synced.session_id, owner, response_id, node_id)


# --------------------------------------------------------------------------- the adapter


class ResponsesAdapter(Adapter):
    """The Responses API in the one exchange (`exchange.py`): its input items read and
    built here, its events assembled by `EventReader`, and its continuation handle, the
    response id (`ResponseLog`, SPEC Y12)."""

    name: Any = "responses"
    serves = "openai"

    async def parse(self, proxy: Any, raw: bytes, scope: str, owner: str) -> tuple[Any, Any]:
        body = loads_bounded(raw)
        previous: list[Item] = []
        prev_id = body.get("previous_response_id") if isinstance(body, dict) else None
        if prev_id is not None:
            # SPEC Y12: only the owner's own ids; another's is "not found", nothing of it
            # forwarded or stored.
            found = await proxy.responses.resolve(proxy.store, owner, str(prev_id))
            if found is None:
                raise Refused(400, wire.previous_not_found_error(str(prev_id)))
            previous = found
        return parse(body, previous), body

    def build(self, parsed: Any, body: Any, synced: Synced
              ) -> tuple[dict[str, Any], Sequence[bytes | None] | None]:
        return build(parsed, body, synced), None

    def read(self, data: Any, model: str) -> tuple[Message | None, Any]:
        try:
            return wire.read_reply(data, model).message, data
        except MalformedReply:
            return None, None

    def reader(self, model: str) -> Reader:
        return EventReader(model)

    def answered(self, proxy: Any, synced: Synced, parsed: Any, owner: str,
                 response: Any) -> None:
        rid = response.get("id") if isinstance(response, dict) else None
        if isinstance(rid, str) and rid:
            output = [o for o in response.get("output") or [] if isinstance(o, dict)]
            proxy.responses.remember(owner, rid, synced.session_id, [*parsed.items, *output],
                                     text_bytes(parsed.items, 8) + text_bytes(output, 8))

    async def recorded(self, proxy: Any, synced: Synced, owner: str, response: Any) -> None:
        rid = response.get("id") if isinstance(response, dict) else None
        if isinstance(rid, str) and rid:
            node_id = await _reply_node(proxy, synced)
            if node_id is not None:
                await _record_id(proxy, synced, owner, rid, node_id)


async def _reply_node(proxy: Any, synced: Synced) -> str | None:
    """The stored node of the reply just recorded: the leaf of the session's branch."""
    branch = await proxy.store.load_branch(synced.session_id)
    nodes = getattr(branch, "nodes", ())
    for node in reversed(nodes):
        if node.message is not None:
            return node.id if node.message.role == "assistant" else None
    return None


class EventReader(Reader):
    """Reads the server-sent events of a streamed response as they pass through (the proxy's
    one stream reader, `wire.StreamReader`), and hands on the whole response object."""

    def __init__(self, model: str) -> None:
        self.stream = StreamReader("responses", model)
        self.assembler = cast("wire.StreamAssembler", self.stream.assembler)  # "responses"'s

    def feed(self, chunk: bytes) -> None:
        self.stream.feed(chunk)

    def finished(self) -> bool:
        return self.assembler.finished

    def reply(self) -> tuple[Message | None, Any]:
        response = self.response()
        if response is None:
            return None, None
        try:
            return wire.read_reply(response, self.stream.model).message, response
        except MalformedReply:
            return None, None

    def response(self) -> Item | None:
        """The streamed response as one object (None when no terminal event arrived)."""
        if not self.assembler.finished or self.assembler.terminal == "response.failed":
            return None
        return self.assembler.whole()


__all__ = ["EventReader", "ParsedItems", "ResponseLog", "ResponsesAdapter", "build", "encode",
           "parse"]
