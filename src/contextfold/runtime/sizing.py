"""Sizing the next request: estimates, the context gauge, and the sizing policy's question.

Thin glue over `core.sizing.estimator` and `core.sizing.fit` so every face asks one question ("does
the next request fit the safe limit, and if not, can a compaction make it fit?", SPEC P1-P3,
P5) with the same system prompt, tools, pins and pending messages the request will really
carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ..core.models.budget import Budget, ModelCapacity
from ..core.planning.cost_trigger import Rhythm, compact_after_turn, session_rhythm
from ..core.recall.recall_tools import recall_tool_json
from ..core.sizing.estimator import Estimate, MessageCosts, estimate_request, with_recalled
from ..core.sizing.fit import (
    Decision,
    Fits,
    decide,
    over_auto_threshold,
    recall_compaction_due,
    smallest_checkpoint,
)
from ..core.sizing.resolver import ModelResolver, ResolvedModel, user_prices
from ..core.values.messages import Message, Node
from ..core.values.runs import leading_run
from ..core.view.projection import Projection, RecallBlock, fixed_part
from ..providers.base import ToolSpec


def smallest_held_checkpoint() -> int:
    """Tokens of the smallest checkpoint message a summariser can always be held to (SPEC
    P5): the summary every history fits into, with the largest frame. The sizing refuses a
    request that does not fit beside it; a face checking a window asks the same."""
    # Imported here: commands that only show a request never load the summariser.
    from ..summarize.extractive import smallest_summary_tokens

    return smallest_checkpoint(smallest_summary_tokens())


def check_live_window(resolver: ModelResolver, resolved: ResolvedModel) -> None:
    """`WindowTooSmallError` naming the smallest window that works, for a window a live
    session (the chat, the service: a few turns compacted at a time, the recall tools on
    every request) cannot work in (SPEC B1-B3): its summary budget must hold the smallest
    summary, and after the deepest compaction an ordinary message must still fit beside the
    recall tools and the smallest checkpoint the sizing holds a request to."""
    from ..summarize.extractive import smallest_summary_tokens

    tools = MessageCosts(resolved.capacity).tools_tokens(recall_tool_json())
    resolver.check_window(resolved, smallest_summary_tokens(guaranteed=False), fixed=tools,
                          checkpoint=smallest_held_checkpoint())


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


def _same(kept: tuple[Projection, tuple[Message, ...], Estimate], projection: Projection,
          pending: tuple[Message, ...]) -> bool:
    """Is `kept` the estimate of these very objects (immutable: the same estimate)?"""
    return kept[0] is projection and len(kept[1]) == len(pending) and \
        all(a is b for a, b in zip(kept[1], pending, strict=True))


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
    # SPEC Q3: the summariser is the session's own model and reads the session's prefix from
    # the prompt cache, so a compaction's call costs reads, not uncached input (Q2 prices it).
    summary_reads_cache: bool = False
    # Q2: the summariser asks no model (the offline summary), so a compaction's call is free.
    summary_free: bool = False
    costs: MessageCosts = field(init=False, repr=False, compare=False)
    tool_json: list[dict[str, Any]] | None = field(init=False, repr=False, compare=False)
    _rhythm_memo: list[Any] = field(init=False, repr=False, compare=False)
    # The last estimate, with the projection and pending messages it is of (issue 26).
    _last: tuple[Projection, tuple[Message, ...], Estimate] | None = field(
        init=False, repr=False, compare=False, default=None)
    # The last request `with_recalled` added recall blocks to, and its estimate without them.
    _base: tuple[Projection, tuple[Message, ...], Estimate] | None = field(
        init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "costs", MessageCosts(self.capacity))
        # [the nodes of the last `_rhythm`, their rhythm]: a holder, the Sizer is frozen
        object.__setattr__(self, "_rhythm_memo", [])
        object.__setattr__(self, "tool_json", tool_dicts(self.tools) or None)

    def estimate(self, projection: Projection, pending: Sequence[Message] = ()) -> Estimate:
        """The whole next request: system, tools, projection and pending messages (P1).

        The last one is kept: a turn asks for the same projection's estimate several times
        (the preflight, the automatic check, the gauge, the state), and each walks every
        message of the projection, so a turn's cost grew with the session. Projections
        and messages are immutable, so the same objects have the same estimate."""
        wanted = tuple(pending)
        last = self._last
        if last is not None and _same(last, projection, wanted):
            return last[2]
        got = self._estimate(projection, wanted)
        object.__setattr__(self, "_last", (projection, wanted, got))
        return got

    def with_recalled(self, projection: Projection, blocks: tuple[RecallBlock, ...],
                      pending: Sequence[Message] = ()) -> tuple[Projection, Estimate]:
        """`projection` (without recall blocks) with `blocks` (SPEC L5), and its `estimate`,
        kept as the last one. Worked out from `projection`'s estimate (usually the fit
        check's, the last one kept) plus the blocks' tokens: the same figure as estimating
        it whole, without walking its history a second time on every request (issue 40)."""
        if not blocks and not projection.recalled:
            return projection, self.estimate(projection, pending)
        out = replace(projection, recalled=blocks)
        got = None
        if not projection.recalled:
            # A new turn adds blocks twice (to choose its own, then with it): the request
            # without them is estimated once.
            wanted = tuple(pending)
            base = self._base
            if base is None or not _same(base, projection, wanted):
                base = (projection, wanted, self.estimate(projection, wanted))
                object.__setattr__(self, "_base", base)
            got = with_recalled(base[2], out, self.costs)
        if got is None:
            return out, self.estimate(out, pending)
        object.__setattr__(self, "_last", (out, tuple(pending), got))
        return out, got

    def _estimate(self, projection: Projection, pending: tuple[Message, ...]) -> Estimate:
        return estimate_request(projection, self.capacity, system=self.system,
                                tools=self.tool_json, pending=pending, costs=self.costs)

    def floor(self, projection: Projection, pending: Sequence[Message] = ()) -> int:
        """What no compaction can shrink: system prompt, tools, pins and `pending` (not
        kept as the last estimate: it is of a part, asked between two of the whole)."""
        return self._estimate(fixed_part(projection), tuple(pending)).tokens

    @cached_property
    def smallest_checkpoint(self) -> int:
        """Tokens of the smallest checkpoint a summariser can be held to (SPEC P5)."""
        return smallest_held_checkpoint()

    def decide(self, projection: Projection, pending: Sequence[Message] = ()) -> Decision:
        """The sizing policy for the next request (`core.sizing.fit.decide`): it fits, a
        compaction can make it fit, or nothing can (refuse it, P3)."""
        tokens = self.estimate(projection, pending).tokens
        limit = self.budget.safe_input_limit
        if tokens <= limit:  # the common case needs no floor (this runs before every call)
            return Fits(tokens)
        return decide(tokens, limit, self.floor(projection, pending), self.smallest_checkpoint)

    def auto_due(self, projection: Projection, *, recall_full: bool = False) -> bool:
        """SPEC A1 (and Q2 with `trigger="cost"`): should the check after a turn compact?
        Above the automatic threshold always; with the cost trigger also earlier, when the
        model's prices and cache rules make compacting now cheaper than carrying on; and
        when the recall blocks since the checkpoint are full (`recall_full`, SPEC Q5) and
        the compaction has something to fold (`core.sizing.fit.recall_compaction_due`)."""
        tokens = self.estimate(projection).tokens
        if recall_full and recall_compaction_due(
                True, tokens, self.budget, self.floor(projection),
                self.costs(projection.checkpoint) if projection.checkpoint is not None else 0):
            return True
        if self.budget.trigger != "cost":
            return over_auto_threshold(tokens, self.budget)
        # The session's rhythm per request, not per user turn: every round of a tool loop
        # reads the whole prefix back (core.cost_trigger.session_rhythm).
        growth = self._rhythm(projection.messages).per_request
        price = user_prices().lookup(self.capacity.model)
        # A rolling summary is about as long as the last one: the current checkpoint's size
        # is the forecast of the next (the budget when there is none yet).
        previous = self.costs(projection.checkpoint) if projection.checkpoint is not None \
            else None
        return compact_after_turn(tokens, self.budget, fixed=self.floor(projection),
                                  growth=growth, price=price, summary=previous,
                                  summary_reads_cache=self.summary_reads_cache,
                                  summary_free=self.summary_free).compact

    def _rhythm(self, nodes: tuple[Node, ...]) -> Rhythm:
        """`session_rhythm` of `nodes`, counted from the new nodes only when they extend
        the ones of the last call (a session's projection grows at its end between checks).
        """
        memo = self._rhythm_memo
        known = 0
        if memo and len(memo[0]) <= len(nodes) and leading_run(memo[0], nodes) == len(memo[0]):
            known = len(memo[0])
        new = nodes[known:]
        roles = [n.message.role if n.message is not None else "" for n in new]
        part = session_rhythm(roles, [self.costs(n) for n in new])
        if known:
            before = memo[1]
            part = Rhythm(turns=before.turns + part.turns,
                          requests=before.requests + part.requests,
                          tokens=before.tokens + part.tokens)
        memo[:] = [nodes, part]
        return part

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
