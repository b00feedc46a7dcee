"""When to compact by expected cost (SPEC Q2). Pure arithmetic over tokens and prices.

The hard bounds stay where `core.sizing.fit` puts them: a request over the safe limit is compacted
first or refused (P1-P5), and above the automatic threshold a compaction always runs (A1).
Below that threshold the size trigger waits; the cost trigger asks whether compacting *now*
is cheaper than carrying the context until the threshold forces it:

* **carrying** the context costs, every *request*, the cached prefix read again plus the
  new tokens written (or sent uncached, where the provider charges no write);
* **compacting** costs the summarising call (it reads what it folds and writes a summary),
  then one cache rewrite of the new projection after the part that stays cached (the system
  prompt and tools), after which each request carries the smaller context.

The forecast counts requests, not user turns: a turn of an agent's tool loop sends one
request per tool round, and each of them reads the whole prefix back, so a forecast per
turn would count one read where the provider bills several (`session_rhythm` measures the
session's own requests per turn and tokens per request). Compaction is chosen when its
one-off cost is repaid within the requests it owns (`horizon`): the break-even of
lossless-claw, with the cache's state folded in. The requests a compaction owns end where
the next one would come: the threshold (which forces it), or, sooner, the request at which
the context has grown back from its new size to the size it has now, since this same rule
would then compact again. A forecast up to the threshold alone counted hundreds of
requests of saving that the trigger's own next compaction takes away: on the real Pi
session at 200k it compacted 13 times, 11 of them at 31-39k tokens, some folding ~5k
tokens for ~14 requests against a ~27k-token cache rewrite (issue 40, docs/benchmarks.md).
A cache already cold (idle longer than its TTL) has nothing left to lose: carrying pays a
full rewrite of the large context on the next request, compacting a rewrite of the small
one, so a cold cache makes compacting cheaper by their difference.

`forecast` gives the figures (carry, compact, break-even) in dollars, or in tokens for a
model without a price; the compaction's explanation (`core.report.explain`) shows them. The
trigger never compacts at a predicted loss: a saving ≤ 0 over the horizon waits.
Without prices (an unpriced model) the answer is the size trigger's: wait.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..models.budget import Budget
from ..money.prices import CacheRules, ModelPrice, TokenPrices, cache_rules
from ..sizing.fit import over_auto_threshold

# Below this share of the automatic threshold the cost trigger never compacts: a summary of
# a short history keeps little and loses detail the model still needs. 0.2, not 0.5: on the
# side-by-side bench (docs/peers.md) compacting from half the threshold left requests twice
# the size the cost-optimal point wanted, under both providers' cache rules.
MIN_SHARE_OF_THRESHOLD = 0.2
# The most requests a forecast looks ahead: a session that hardly grows is not forecast to run
# for ever (and a tiny growth must not make the horizon astronomically long).
MAX_HORIZON = 10_000


@dataclass(frozen=True)
class CostInputs:
    """What the decision reads. Token counts are whole requests unless named otherwise.

    context        the next request as it stands
    after          the next request after a compaction (its estimate)
    fixed          the prefix a compaction leaves cached: system prompt and tools
    folded         what the summarising call would read
    summary        what it would write
    growth         tokens the context grows per request (the session's own rhythm,
                   `session_rhythm`: a tool loop's rounds are requests of their own)
    threshold      the automatic threshold: the size trigger compacts above it
    idle_seconds   since the last request went out
    output         a request's reply tokens (the same either way; kept for the totals)
    summary_reads_cache  the summariser is the session's own model and its request starts
                   with the session's prefix (SPEC Q3): it reads the context from the cache
                   (all but what the latest request added) instead of sending what it folds
                   uncached
    summary_free   the summariser asks no model (the offline summary): the call costs nothing
    """

    context: int
    after: int
    fixed: int
    folded: int
    summary: int
    growth: float
    threshold: int
    idle_seconds: float = 0.0
    output: int = 0
    summary_reads_cache: bool = False
    summary_free: bool = False


@dataclass(frozen=True)
class Rhythm:
    """How a session has been running: user turns, model requests and the tokens they added."""

    turns: int
    requests: int
    tokens: int

    @property
    def per_request(self) -> float:
        """Tokens the context grows per request (what the forecast steps by)."""
        return self.tokens / max(1, self.requests)

    @property
    def requests_per_turn(self) -> float:
        return self.requests / max(1, self.turns)


def session_rhythm(roles: Sequence[str], tokens: Sequence[int]) -> Rhythm:
    """The rhythm of the messages `roles` (with their `tokens`): each assistant message is
    one model request (a tool loop's round included), each user message one turn."""
    if len(roles) != len(tokens):
        raise ValueError(f"{len(roles)} roles but {len(tokens)} token counts")
    return Rhythm(turns=sum(1 for r in roles if r == "user"),
                  requests=sum(1 for r in roles if r == "assistant"), tokens=sum(tokens))


@dataclass(frozen=True)
class Forecast:
    """What compacting now is expected to cost against carrying the context, over the
    `horizon` requests the compaction owns (module docstring), in `unit`: dollars under the
    model's prices and cache rules, or tokens processed for a model without a price.

    break_even  the request after the compaction (1 = the first) from which compacting has
                cost no more than carrying; None when it never does (the context would not
                get smaller)
    """

    horizon: int
    carry: float
    compact: float
    break_even: int | None
    unit: Literal["usd", "tokens"] = "usd"

    @property
    def saving(self) -> float:
        """Carrying minus compacting over the horizon: > 0 pays, ≤ 0 is a loss."""
        return self.carry - self.compact


@dataclass(frozen=True)
class CostDecision:
    """The decision and its figures (dollars over `horizon` requests, for logs and the
    bench); `forecast`: the figures themselves, when the decision made one."""

    compact: bool
    reason: str
    horizon: int = 0
    carry_usd: float = 0.0
    compact_usd: float = 0.0
    forecast: Forecast | None = None


def _rates(prices: TokenPrices, rules: CacheRules) -> tuple[float, float, float, float]:
    """Per-token dollars: uncached input, cache read, cache write, output."""
    unit = 1_000_000
    read = prices.cache_read if prices.cache_read is not None else \
        prices.input * rules.read_multiplier
    if rules.kind == "explicit":
        write = prices.cache_write if prices.cache_write is not None else \
            prices.input * rules.write_multiplier
    else:  # automatic and implicit caches charge a new prefix as plain input
        write = prices.input
    if not rules.caches:
        read = write = prices.input
    return prices.input / unit, read / unit, write / unit, prices.output / unit


def turns_until(context: int, threshold: int, growth: float) -> int:
    """Requests (the forecast's steps) before a context growing by `growth` a request passes
    `threshold` (at least 1)."""
    if context >= threshold:
        return 1
    if growth <= 0 or threshold - context >= growth * MAX_HORIZON:
        return MAX_HORIZON  # it (hardly) grows: the threshold does not force a compaction
    return max(1, math.ceil((threshold - context) / growth))


def owned_requests(context: int, after: int, threshold: int, growth: float) -> int:
    """The requests a compaction from `context` to `after` owns (module docstring): until
    the threshold forces the next one, or until the context has grown back to `context`,
    whichever comes first; above the threshold, until it has grown back to the threshold."""
    regrow = turns_until(after, min(context, threshold), growth) if after < context else 1
    if context >= threshold:
        return regrow
    return min(turns_until(context, threshold, growth), regrow)


def forecast(inputs: CostInputs, prices: TokenPrices | None, rules: CacheRules) -> Forecast:
    """Carrying against compacting now over the requests the compaction owns
    (`owned_requests`), in dollars, or in tokens when `prices` is None (every token counted
    once, the cache ignored). Pure arithmetic; see the module docstring."""
    if prices is None:
        uncached = read = write = out = 1.0
        cold, caches = False, False
    else:
        uncached, read, write, out = _rates(prices, rules)
        cold, caches = rules.caches and inputs.idle_seconds > rules.ttl_seconds, rules.caches
    horizon = owned_requests(inputs.context, inputs.after, inputs.threshold, inputs.growth)
    g = max(0.0, inputs.growth)

    def first(start: float, cached: float) -> float:
        """The first request: `cached` tokens read back, the rest written."""
        return cached * read + (start - cached) * write

    def carry(start: float, cached_first: float) -> float:
        """Dollars for `horizon` requests from a context of `start` tokens whose first
        finds `cached_first` of them in the cache: each later request reads the previous
        one back and writes what it added. In closed form: request t (1 ≤ t < H) reads
        start + (t-1)·g and writes g."""
        later = horizon - 1
        return first(start, cached_first) + \
            read * (later * start + g * later * (later - 1) / 2) + later * g * write

    # Keeping: the next request finds the previous one cached (nothing when cold).
    keep_cached = 0.0 if cold or not caches else max(0.0, inputs.context - g)
    # Compacting: the summarising call, then the new projection written after the fixed
    # prefix that stays cached (all of it when cold), then the smaller context each request.
    if inputs.summary_free:
        call = 0.0
    elif inputs.summary_reads_cache:
        # SPEC Q3: the summarising request is the session's prefix plus an instruction, so
        # it reads what the previous request cached (nothing when cold) and writes the rest.
        call = first(inputs.context, keep_cached) + inputs.summary * out
    else:
        call = inputs.folded * uncached + inputs.summary * out
    after_cached = 0.0 if cold or not caches else float(min(inputs.fixed, inputs.after))
    keep = carry(inputs.context, keep_cached)
    compact = call + carry(inputs.after, after_cached)
    # Both sides grow by g a request, so their difference is linear in the request number:
    # the first request's difference (call included), then the smaller read each request.
    at_first = first(inputs.context, keep_cached) - first(inputs.after, after_cached) - call
    per_request = read * (inputs.context - inputs.after)
    if at_first >= 0:
        even: int | None = 1
    elif per_request <= 0:
        even = None
    else:
        even = 1 + math.ceil(-at_first / per_request)
    return Forecast(horizon, keep, compact, even, "tokens" if prices is None else "usd")


def decide_by_cost(inputs: CostInputs, prices: TokenPrices | None, rules: CacheRules
                   ) -> CostDecision:
    """Compact now (below the threshold) when that is cheaper over the requests it owns,
    never at a predicted loss; see the module docstring."""
    if prices is None:
        return CostDecision(False, "unpriced model: the size trigger decides")
    if inputs.context > inputs.threshold:
        return CostDecision(True, "over the automatic threshold")
    if inputs.context < MIN_SHARE_OF_THRESHOLD * inputs.threshold:
        return CostDecision(False, "the context is still small")
    if inputs.after >= inputs.context:
        return CostDecision(False, "a compaction would not make the request smaller")
    f = forecast(inputs, prices, rules)
    if f.saving > 0:
        cold = rules.caches and inputs.idle_seconds > rules.ttl_seconds
        why = "the cache is cold" if cold else \
            f"repaid by request {f.break_even} of the {f.horizon} it owns"
        return CostDecision(True, f"cheaper to compact now ({why})", f.horizon, f.carry,
                            f.compact, f)
    return CostDecision(False, f"compacting now would not pay within the {f.horizon} "
                        f"requests it owns", f.horizon, f.carry, f.compact, f)


def compact_after_turn(tokens: int, budget: Budget, *, fixed: int, growth: float,
                       price: ModelPrice | None, summary: int | None = None,
                       summary_reads_cache: bool = False, summary_free: bool = False
                       ) -> CostDecision:
    """SPEC A1 with Q2: should the background check after a turn compact? The size trigger
    compacts above the automatic threshold; the cost trigger also below it, when
    `decide_by_cost` finds that cheaper. `fixed`: the system prompt, tools and pins;
    `growth`: tokens a request adds, from the session's own rhythm (`session_rhythm`);
    `summary`: the checkpoint a compaction is expected to write (None: its budget, or what it
    folds when less; the runtime passes the current checkpoint's size, since a rolling
    summary is about as long as the last one); `summary_reads_cache`: SPEC Q3 (see
    `CostInputs`); `summary_free`: the summariser asks no model."""
    if over_auto_threshold(tokens, budget):
        return CostDecision(True, "over the automatic threshold")
    if budget.trigger != "cost":
        return CostDecision(False, "below the automatic threshold")
    history = max(0, tokens - fixed)
    kept = min(history, budget.tail_budget)
    # The checkpoint a compaction would write: its budget, or what it folds when less.
    written = min(budget.summary_budget, history - kept, *(() if summary is None
                                                            else (max(1, summary),)))
    inputs = CostInputs(context=tokens, after=fixed + kept + written, fixed=fixed,
                        folded=history - kept, summary=written, growth=growth,
                        threshold=budget.auto_threshold,
                        summary_reads_cache=summary_reads_cache, summary_free=summary_free)
    if price is None:
        return decide_by_cost(inputs, None, cache_rules(None, budget.model))
    return decide_by_cost(inputs, price.prices, price.rules)


def compaction_forecast(tokens_before: int, tokens_after: int, budget: Budget, *, fixed: int,
                        folded: int, kept: int, growth: float, price: ModelPrice | None,
                        summary_reads_cache: bool = False, summary_free: bool = False
                        ) -> Forecast:
    """The forecast of a compaction already written (its explanation, `core.report.explain`): from
    `tokens_before` to the measured `tokens_after`, having folded `folded` raw tokens and
    kept `kept`, in dollars under `price` (tokens when None). The checkpoint written is
    what the request holds beyond the fixed part and the raw tail."""
    written = max(1, min(budget.summary_budget, tokens_after - fixed - kept))
    inputs = CostInputs(context=tokens_before, after=tokens_after, fixed=fixed, folded=folded,
                        summary=written, growth=growth, threshold=budget.auto_threshold,
                        summary_reads_cache=summary_reads_cache, summary_free=summary_free)
    if price is None:
        return forecast(inputs, None, cache_rules(None, budget.model))
    return forecast(inputs, price.prices, price.rules)
