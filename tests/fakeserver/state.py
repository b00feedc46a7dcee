"""The fake model's memory and answers: scripts, the request log, and what it replies.

State is shared between the server thread and the test, so every access takes the lock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .script import Reply, ReplyKind, ServerConfig, ToolCallSpec
from .summaries import make_summary
from .tokens import REPLY_PRIMING, count_text

Protocol = Literal["openai", "anthropic", "responses"]
# Decides a reply from the request itself (protocol, body) when no scripted reply is queued:
# a stateless "model" that stays correct whatever the client resent or compacted.
Responder = Callable[[Protocol, dict[str, Any]], Reply]


@dataclass
class RecordedRequest:
    """One request as the server received it, and how it answered."""

    protocol: Protocol
    body: dict[str, Any]
    prompt_tokens: int
    is_summary: bool
    stream: bool
    status: int | None = None  # None while the answer is pending (or it hung)
    reply_text: str | None = None  # the text answered (successful answers only)
    # ok | overflow | invalid (rejected by validation) | auth | scripted (a scripted error
    # status) | malformed | hung; None while the answer is pending
    outcome: str | None = None
    # The key headers as they arrived (`authorization`, `x-api-key`): what a test of where
    # keys go (SPEC Y8) reads; a fake server, so nothing here is a real key.
    key_headers: dict[str, str] = field(default_factory=dict)

    @property
    def max_tokens(self) -> int | None:
        return self.body.get("max_tokens") or self.body.get("max_completion_tokens")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> str | None:
        if self.protocol == "anthropic":
            system = self.body.get("system")
            if isinstance(system, list):
                return "\n".join(b.get("text", "") for b in system)
            return system
        for message in self.messages:
            if message.get("role") in ("system", "developer"):
                return str(message.get("content"))
        return None


@dataclass
class Answer:
    text: str
    calls: list[tuple[str, ToolCallSpec]]
    stop: Literal["end", "tool", "length"]
    output_tokens: int


@dataclass
class ServerState:
    """Configuration, scripts and the request log of one running fake server."""

    config: ServerConfig
    lock: threading.Lock = field(default_factory=threading.Lock)
    queues: dict[str, deque[Reply]] = field(
        default_factory=lambda: {"any": deque(), "chat": deque(), "summary": deque()}
    )
    requests: list[RecordedRequest] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    _prefixes: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    _ids: itertools.count = field(default_factory=itertools.count)
    responder: Responder | None = None

    def enqueue(self, replies: tuple[Reply, ...], kind: ReplyKind) -> None:
        with self.lock:
            self.queues[kind].extend(replies)

    def next_reply(self, summary: bool, protocol: Protocol | None = None,
                   body: dict[str, Any] | None = None) -> Reply:
        with self.lock:
            for kind in ("summary" if summary else "chat", "any"):
                if self.queues[kind]:
                    return self.queues[kind].popleft()
            responder = self.responder
        if responder is not None and protocol is not None and body is not None:
            return responder(protocol, body)
        return Reply()

    def record(self, entry: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(entry)

    def new_id(self) -> int:
        with self.lock:
            return next(self._ids)

    def cached_prefix(self, body: dict[str, Any], running: list[int]) -> int:
        """Tokens of the longest message prefix an earlier request already sent."""
        head = json.dumps([body.get("system"), body.get("tools")], sort_keys=True)
        msgs = tuple(json.dumps(m, sort_keys=True) for m in body.get("messages") or [])
        with self.lock:
            best = 0
            for seen_head, seen in self._prefixes:
                if seen_head != head:
                    continue
                n = 0
                for a, b in zip(seen, msgs, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self._prefixes.append((head, msgs))
        return running[best - 1] - REPLY_PRIMING if best else 0



async def wait(state: ServerState, seconds: float) -> None:
    """Sleep, but wake up when the server stops, so a hung answer never blocks shutdown."""
    end = time.monotonic() + seconds
    while not state.stopping.is_set() and time.monotonic() < end:
        await asyncio.sleep(min(0.02, max(0.0, end - time.monotonic())))


def truncate(text: str, max_tokens: int | None) -> tuple[str, bool]:
    if max_tokens is None or count_text(text) <= max_tokens:
        return text, False
    # Cut by characters until it fits: crude but deterministic, like a model hitting its cap.
    cut = text
    while cut and count_text(cut) > max_tokens:
        cut = cut[: max(0, len(cut) - max(1, len(cut) // 10))]
    return cut, True


def compose_answer(state: ServerState, reply: Reply, body: dict[str, Any], summary: bool,
            prefix: str) -> Answer:
    if reply.empty:
        return Answer("", [], "end", 0)
    if reply.text is not None:
        text = reply.text
    elif summary:
        text = make_summary(body, state.config.summary_style)
    elif reply.tool_calls:
        text = ""
    else:
        text = state.config.default_text
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    text, cut = truncate(text, max_tokens)
    calls = [] if cut else [
        (spec.id or f"{prefix}{state.new_id():04d}", spec) for spec in reply.tool_calls
    ]
    output = count_text(text) + sum(
        count_text(f"{s.name} {json.dumps(s.arguments)}") for _, s in calls
    )
    stop: Literal["end", "tool", "length"] = "length" if cut else ("tool" if calls else "end")
    return Answer(text, calls, stop, output)
