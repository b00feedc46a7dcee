"""Per-session prompt-cache figures (SPEC Y4): how much of each forwarded request repeats the
previous request's prefix byte for byte."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


def encode(body: dict[str, Any]) -> tuple[bytes, list[str]]:
    """The request body as sent, and its pieces in prefix order (what a prompt cache keys
    on: system and tools, then each message), each message encoded once for both."""
    messages = [json.dumps(m, ensure_ascii=False) for m in body.get("messages") or []]
    rest = json.dumps({k: v for k, v in body.items() if k != "messages"}, ensure_ascii=False)
    data = rest[:-1] + ("," if len(rest) > 2 else "") + '"messages":[' + ",".join(messages) + "]}"
    head = json.dumps([body.get("system"), body.get("tools")], ensure_ascii=False)
    return data.encode("utf-8"), [head, *messages]


@dataclass
class SessionStats:
    """Requests seen, forwarded tokens and the share of them that repeated the previous
    request's prefix (estimated from the byte share of the identical leading pieces)."""

    requests: int = 0
    forwarded_tokens: int = 0
    repeated_tokens: int = 0
    _previous: list[str] = field(default_factory=list, repr=False)

    def observe(self, pieces: list[str], tokens: int) -> float | None:
        """Record one forwarded request (its `encode` pieces); the share of it repeating the
        previous one (None for the first request)."""
        share = None
        if self._previous:
            same = 0
            for a, b in zip(pieces, self._previous, strict=False):
                if a != b:
                    break
                same += len(a)
            total = sum(len(p) for p in pieces) or 1
            share = same / total
            self.repeated_tokens += round(tokens * share)
        self.requests += 1
        self.forwarded_tokens += tokens
        self._previous = pieces
        return share

    @property
    def reuse(self) -> float | None:
        """Share of all forwarded tokens that repeated the previous request's prefix."""
        return self.repeated_tokens / self.forwarded_tokens if self.forwarded_tokens else None

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "forwarded_tokens": self.forwarded_tokens,
                "repeated_prefix_tokens": self.repeated_tokens,
                "prefix_reuse": None if self.reuse is None else round(self.reuse, 4)}
