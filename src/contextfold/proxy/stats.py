"""Per-session proxy figures: how much of each forwarded request repeats the previous
request's prefix byte for byte (SPEC Y4), what the replies cost as the upstream reported
their usage (SPEC Q4), and each compaction's explanation with its realised saving so far
(issue 40: `core.report.explain`, `core.money.costs.SavingMeter`, from the replies' reported
usage)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..billing import usage_cost
from ..core.money.costs import Fold, PricedRequest, Saving, SavingMeter, summary_cost
from ..core.money.prices import Cost
from ..core.report.explain import CompactionExplanation, stored_explanation
from ..core.sizing.resolver import user_prices
from ..core.values.messages import Message, Node, Usage
from ..core.values.runs import leading_run
from .prefix_cache import dumps


def encode(body: dict[str, Any], known: Sequence[bytes | None] | None = None
           ) -> tuple[bytes, list[bytes]]:
    """The request body as sent, and its pieces in prefix order (what a prompt cache keys
    on: system and tools, then each message), each message encoded once for both.

    `known`: for each message, the bytes already made of it (the client's own wire messages
    the parse encoded, `wire.build`) or None, so a kept message is not serialised again."""
    # The list is the body's `messages` (chat, Messages) or the Responses API's `input`
    # items: a body never gets a field its protocol does not have.
    key = "input" if "messages" not in body and isinstance(body.get("input"), list) \
        else "messages"
    wire = body.get(key) or []
    messages = [dumps(m) for m in wire] if known is None else \
        [b if b is not None else dumps(m) for m, b in zip(wire, known, strict=True)]
    rest = dumps({k: v for k, v in body.items() if k != key})
    data = rest[:-1] + (b"," if len(rest) > 2 else b"") + f'"{key}":['.encode() + \
        b",".join(messages) + b"]}"
    head = dumps([body.get("system" if key == "messages" else "instructions"),
                  body.get("tools")])
    return data, [head, *messages]


KEPT_COMPACTIONS = 20  # the compactions the stats show (and hold), the latest


@dataclass
class SessionStats:
    """Requests seen, forwarded tokens and the share of them that repeated the previous
    request's prefix (estimated from the byte share of the identical leading pieces), and
    the cost of the replies: the usage the upstream reported (uncached input, cache reads,
    cache writes, output) priced at the reply's model (`billing.usage_cost`)."""

    requests: int = 0
    forwarded_tokens: int = 0
    repeated_tokens: int = 0
    cost: Cost = field(default_factory=Cost)
    # The previous request's pieces as (length, hash): what the next is compared with,
    # without holding its bytes (SPEC Y14).
    _previous: list[tuple[int, int]] = field(default_factory=list, repr=False)
    changes: int = field(default=0, repr=False)  # observations and bills so far
    # Issue 40: the compactions seen take effect (checkpoint id, explanation), the latest
    # `KEPT_COMPACTIONS`, and the savings they realised (the meter's, or as stored).
    compactions: list[tuple[str, CompactionExplanation | None]] = field(default_factory=list)
    _stored: list[Saving] = field(default_factory=list, repr=False)
    _meter: SavingMeter = field(default_factory=SavingMeter, repr=False)
    _checkpoint_id: str | None = field(default=None, repr=False)
    _dropped: int = field(default=0, repr=False)  # savings of compactions no longer held

    def observe(self, pieces: list[bytes], tokens: int, checkpoint: Node | None = None
                ) -> float | None:
        """Record one forwarded request (its `encode` pieces, and the checkpoint its
        projection starts from); the share of it repeating the previous one (None for the
        first request)."""
        self._took_effect(checkpoint)
        share = None
        marks = [(len(p), hash(p)) for p in pieces]
        if self._previous:
            same = sum(n for n, _ in marks[:leading_run(marks, self._previous)])
            total = sum(n for n, _ in marks) or 1
            share = same / total
            self.repeated_tokens += round(tokens * share)
        self.requests += 1
        self.changes += 1
        self.forwarded_tokens += tokens
        self._previous = marks
        return share

    def bill(self, reply: Message | None) -> None:
        """Add a reply's reported usage to the cost (a reply without usage adds nothing: a
        cost is never guessed where it was not reported)."""
        if reply is not None and reply.usage is not None:
            self.cost = self.cost + usage_cost(reply.usage, reply.model)
            name = reply.usage.model or reply.model or ""
            self._meter.request(PricedRequest(user_prices().lookup(name) if name else None,
                                              name, reply.usage.prompt, reply.usage.output,
                                              time.time()))
            self.changes += 1

    def _took_effect(self, checkpoint: Node | None) -> None:
        """A request whose projection starts from a checkpoint not seen before: that
        compaction (preflight, automatic or the provider's) takes effect now."""
        payload = checkpoint.checkpoint if checkpoint is not None else None
        if checkpoint is None or payload is None or checkpoint.id == self._checkpoint_id:
            return
        first = self._checkpoint_id is None and self.requests == 0
        self._checkpoint_id = checkpoint.id
        self.changes += 1
        if first:  # a session met mid-way (another process compacted it): no cache to compare
            return
        after = payload.tokens_after_estimate
        used = payload.details.get("summarizer_usage")
        summary = summary_cost(payload.summarizer, Usage.model_validate(used),
                               user_prices()) if isinstance(used, dict) else Cost()
        self._meter.fold(Fold(0, 0 if after is None else payload.tokens_before - after,
                              summary))
        self.compactions.append((checkpoint.id, stored_explanation(payload.details)))
        if len(self.compactions) > KEPT_COMPACTIONS:  # SPEC Y14: what it holds is bounded
            del self.compactions[0]
            self._dropped += 1

    def compaction_json(self) -> list[dict[str, Any]]:
        """The latest compactions explained, their realised savings so far."""
        savings = (self._stored + self._meter.savings())[self._dropped:]
        out = []
        for (cid, explained), saving in zip(self.compactions, savings, strict=False):
            shown = explained.with_realised(saving).to_json() if explained is not None \
                else {"realised": saving.to_json()}
            out.append({"checkpoint_id": cid, **shown})
        return out

    @property
    def reuse(self) -> float | None:
        """Share of all forwarded tokens that repeated the previous request's prefix."""
        return self.repeated_tokens / self.forwarded_tokens if self.forwarded_tokens else None

    @classmethod
    def from_json(cls, data: Any) -> SessionStats:
        """The figures `to_json` stored (fresh ones for anything else): a conversation this
        process takes up again goes on counting from them."""
        if not isinstance(data, dict):
            return cls()
        cost = data.get("cost") if isinstance(data.get("cost"), dict) else {}

        def count(mapping: dict[str, Any], name: str) -> int:
            value = mapping.get(name)
            return value if isinstance(value, int) and value >= 0 else 0

        usd = cost.get("usd", 0.0)
        kept = [c for c in data.get("compactions") or [] if isinstance(c, dict)
                and isinstance(c.get("checkpoint_id"), str)]
        explained = [(c["checkpoint_id"], CompactionExplanation.from_json(c)) for c in kept]
        realised = [(e.realised if e is not None else None) or Saving(None, 0, 0)
                    for _, e in explained]
        last = data.get("checkpoint_id")
        return cls(compactions=explained, _stored=realised,
                   _checkpoint_id=last if isinstance(last, str) else None,
                   requests=count(data, "requests"),
                   forwarded_tokens=count(data, "forwarded_tokens"),
                   repeated_tokens=count(data, "repeated_prefix_tokens"),
                   cost=Cost(input_tokens=count(cost, "input_tokens"),
                             cached_tokens=count(cost, "cached_tokens"),
                             cache_write_tokens=count(cost, "cache_write_tokens"),
                             output_tokens=count(cost, "output_tokens"),
                             usd=float(usd) if isinstance(usd, int | float) else None,
                             requests=count(cost, "requests")))

    def size(self) -> int:
        """Bytes it holds, about (SPEC Y14)."""
        return 400 + 72 * len(self._previous) + 300 * len(self.compactions)

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "forwarded_tokens": self.forwarded_tokens,
                "repeated_prefix_tokens": self.repeated_tokens,
                "prefix_reuse": None if self.reuse is None else round(self.reuse, 4),
                "cost": {"currency": "USD", **self.cost.to_json()},
                "checkpoint_id": self._checkpoint_id,
                "compactions": self.compaction_json()}
