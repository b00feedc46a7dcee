"""What the raw tail costs by cache rules, in the cost trigger's own model (issue 40).

Issue 40 asks for the tail and the moment of compaction to be chosen by expected cost under the
provider's cache rules. This bench asks the cost trigger (`core.planning.cost_trigger`) what it
would do with each tail under each rule set, and bills the result under the same rules:

* a session that grows `growth` tokens a request (a tool round or a turn), from a fixed prefix
  (system prompt and tools) of `FIXED` tokens, each reply `REPLY` tokens, for `REQUESTS`
  requests; a rolling checkpoint of `SUMMARY` tokens;
* after each request `compact_after_turn` decides with the rule set's own model and prices
  (claude-sonnet-4-5: reads 0.1x, writes 1.25x; gpt-4.1: reads 0.25x, writes free), the
  summariser being the session's model (SPEC Q3: its request reads the cached prefix);
* each request reads the previous one back from the cache and writes what it added; after a
  compaction only the fixed prefix is still cached (the checkpoint changed), so the new
  projection is written once.

Beside each cost-trigger run, the cheapest *fixed* compaction point for the same tail (a sweep
of size triggers from 24k to 76k tokens): how far the trigger's moment is from the best one.
Deterministic arithmetic, no model calls; a few seconds.

Run: `.venv/bin/python -m bench.tail_cost` → bench/results/tail_cost.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextfold.core.models.budget import CompactionSettings, derive_budget
from contextfold.core.models.catalog import capacity_for
from contextfold.core.money.prices import ModelPrice, PriceBook
from contextfold.core.planning.cost_trigger import compact_after_turn

RESULTS = Path(__file__).parent / "results" / "tail_cost.json"
RULE_SETS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1"}
TAILS = (4_000, 8_000, 12_000, 20_000)
GROWTHS = (300, 1_000, 3_000)
FIXED, SUMMARY, REPLY, REQUESTS = 6_000, 4_000, 400, 3_000
THRESHOLD = 76_800  # the peers bench's shared trigger (60% of a 128k window)
SWEEP = range(24_000, THRESHOLD + 1, 1_000)


@dataclass(frozen=True)
class Rates:
    """Per-token dollars under one rule set."""

    read: float
    write: float
    output: float

    @classmethod
    def of(cls, price: ModelPrice) -> Rates:
        p, r = price.prices, price.rules
        read = p.cache_read if p.cache_read is not None else p.input * r.read_multiplier
        write = (p.cache_write if p.cache_write is not None else p.input * r.write_multiplier) \
            if r.kind == "explicit" else p.input  # automatic caches charge no write premium
        return cls(read / 1e6, write / 1e6, p.output / 1e6)


def session(price: ModelPrice, tail: int, growth: int, at: int | None = None
            ) -> dict[str, Any]:
    """Bill one session; the cost trigger decides, or a size trigger at `at` tokens."""
    rates = Rates.of(price)
    capacity = capacity_for("gpt-4o")
    safe = derive_budget(capacity).safe_input_limit
    budget = derive_budget(capacity, CompactionSettings(
        tail_tokens=tail, auto_threshold_fraction=THRESHOLD / safe))
    context, cached, usd, compactions, sent = FIXED + 2_000, 0, 0.0, 0, 0
    for _ in range(REQUESTS):
        usd += cached * rates.read + (context - cached) * rates.write + REPLY * rates.output
        sent += context
        cached, context = context, context + growth
        if at is None:
            due = compact_after_turn(context, budget, fixed=FIXED, growth=growth, price=price,
                                     summary=SUMMARY, summary_reads_cache=True).compact
        else:
            due = context > at
        if due:
            compactions += 1
            # The summarising request: the session's prefix read back, the rest written.
            usd += cached * rates.read + (context - cached) * rates.write + SUMMARY * rates.output
            context = FIXED + min(budget.tail_budget, context - FIXED) + SUMMARY
            cached = FIXED
    return {"usd": round(usd, 2), "compactions": compactions,
            "tokens_per_request": sent // REQUESTS}


def main() -> int:
    book = PriceBook.packaged()
    rows = []
    for column, model in RULE_SETS.items():
        price = book.lookup(model)
        assert price is not None, model
        for growth in GROWTHS:
            for tail in TAILS:
                trigger = session(price, tail, growth)
                best_at = min(SWEEP, key=lambda at: session(price, tail, growth, at)["usd"])
                best = session(price, tail, growth, best_at)
                rows.append({"rules": column, "model": model, "growth": growth, "tail": tail,
                             **trigger, "best_fixed_point": best_at, "best_fixed_usd": best["usd"]})
                print(f"{column:9} growth {growth:5,} tail {tail:6,}: ${trigger['usd']:7.2f} "
                      f"({trigger['compactions']} compactions, "
                      f"{trigger['tokens_per_request']:,} tokens a request); best fixed point "
                      f"{best_at:,}: ${best['usd']:.2f}")
    RESULTS.write_text(json.dumps({
        "settings": {"fixed": FIXED, "summary": SUMMARY, "reply": REPLY, "requests": REQUESTS,
                     "threshold": THRESHOLD},
        "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
