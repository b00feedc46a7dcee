"""Sizing the next request: estimates, the context gauge, and "can this ever fit?".

Thin glue over `core.estimator` so the conversation asks one question everywhere ("does
the next request fit the safe limit?", SPEC P1) with the same system prompt, tools and
pending messages the request will really carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.budget import Budget, ModelCapacity
from ..core.estimator import Estimate, MessageCosts, estimate_request
from ..core.messages import Message
from ..core.projection import Projection
from ..providers.base import ToolSpec

_EMPTY = Projection(checkpoint=None, messages=())


def tool_dicts(tools: Sequence[ToolSpec | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools as the JSON the request carries (what the estimator counts); tools given as
    request JSON already (a proxied client's) are counted as they are."""
    return [dict(t) if isinstance(t, Mapping) else
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in tools]


@dataclass(frozen=True)
class Gauge:
    """The live context gauge: how full the next request is, against this model's limits."""

    tokens: int
    safe_input_limit: int
    auto_threshold: int
    context_window: int
    method: str
    model: str

    @property
    def fraction(self) -> float:
        """Share of the safe input limit in use (may exceed 1.0 before a preflight)."""
        return self.tokens / self.safe_input_limit if self.safe_input_limit else 1.0

    def __str__(self) -> str:
        return (f"{self.tokens:,} / {self.safe_input_limit:,} tokens "
                f"({self.fraction:.0%} of the safe limit, {self.model})")


@dataclass(frozen=True)
class Sizer:
    """Estimates for one model, system prompt and tool set.

    Holds the conversation's one `MessageCosts` memo: every stored message is estimated
    once for this model, however many checks, sends and compactions read it.
    """

    capacity: ModelCapacity
    budget: Budget
    system: str | None
    tools: tuple[ToolSpec | Mapping[str, Any], ...]
    costs: MessageCosts = field(init=False, repr=False, compare=False)
    tool_json: list[dict[str, Any]] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "costs", MessageCosts(self.capacity))
        object.__setattr__(self, "tool_json", tool_dicts(self.tools) or None)

    def estimate(self, projection: Projection, pending: Sequence[Message] = ()) -> Estimate:
        """The whole next request: system, tools, projection and pending messages (P1)."""
        return estimate_request(projection, self.capacity, system=self.system,
                                tools=self.tool_json, pending=tuple(pending), costs=self.costs)

    def floor(self, pending: Sequence[Message] = ()) -> int:
        """The request with no history at all: what no compaction can shrink."""
        return self.estimate(_EMPTY, pending).tokens

    def best_case(self, estimate: Estimate, pending: Sequence[Message] = ()) -> int:
        """The request after folding all history into a full-size summary (nothing kept
        raw): if even this is over the safe limit, compacting cannot make the request fit,
        so it is refused without spending a summarisation on it."""
        floor = self.floor(pending)
        history = max(0, estimate.tokens - floor)
        return floor + min(history, self.budget.summary_budget)

    def gauge(self, estimate: Estimate) -> Gauge:
        return Gauge(tokens=estimate.tokens, safe_input_limit=self.budget.safe_input_limit,
                     auto_threshold=self.budget.auto_threshold,
                     context_window=self.budget.context_window, method=estimate.method,
                     model=self.capacity.model)

    @property
    def reply_tokens(self) -> int:
        """`max_tokens` of a chat request: it must fit the reserve left above the safe
        limit, so prompt + reply never exceed the window (SPEC B1)."""
        return max(1, min(self.capacity.max_output, self.budget.reserve))
