"""Every row's bill, through the providers' prompt-cache rules (project venv; SPEC Q1).

One price model for every system: contextfold's own (`core/money/prices.py`). Each request a
system sent is replayed, at its message boundaries, through a `PromptCache` with the rules
and the packaged catalog prices of one model per column:

* **Anthropic**: claude-sonnet-4-5 ($3 in, $15 out, read $0.30, 5-minute write $3.75; caching
  only at `cache_control` marks, at most 4, from 1,024 tokens; 5-minute time to live). Marks
  go where each system puts them: contextfold on the system prompt, the checkpoint and the
  last message (`wire/anthropic_messages.py`); a system that sets none is assumed to mark the
  system prompt and the last message (`common.default_marks`), which is where Anthropic's
  automatic caching, Claude Code and Pi put them.
* **OpenAI**: gpt-4.1 ($2 in, $8 out, cached $0.50; automatic prefix caching from 1,024
  tokens in 128-token steps, no write charge; 5-minute time to live).

Requests go out when the transcript recorded them (its timestamps), the synthetic sessions
at a stated rhythm (`common.call_times`), so an idle gap longer than the time to live empties
the cache as it did for the agent. The replies are the recorded ones, the same for every row.

Summariser requests are billed too: as uncached input plus output, unless the system's
summarising request starts with the session's own prefix (contextfold's SPEC Q3 when the
summariser is the session's model), which then goes through the same cache as the session.
Each bill says what share of the summariser requests' input the cache served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextfold.core.money.prices import Block, Cost, ModelPrice, PriceBook, PromptCache, total
from contextfold.core.values.messages import Usage

# One model per cache rule set; numbers come from the packaged catalog.
COLUMNS: dict[str, str] = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1"}


def column_price(column: str) -> ModelPrice:
    """The catalog's price and cache rules of the column's model."""
    price = PriceBook.packaged().lookup(COLUMNS[column])
    if price is None:
        raise LookupError(f"the packaged price catalog lists no {COLUMNS[column]!r}")
    return price


def _blocks(ids: Sequence[int], sizes: Sequence[int], marks: Sequence[int]) -> list[Block]:
    marked = set(marks)
    return [Block(str(i), sizes[i], breakpoint=n in marked) for n, i in enumerate(ids)]


def bill(trace: Mapping[str, Any], price: ModelPrice) -> dict[str, Any]:
    """One transcript's requests (a `Recorder` trace) priced in order through one cache."""
    sizes = trace["sizes"]
    cache = PromptCache(price.rules)
    session: list[Cost] = []
    summaries: list[Cost] = []
    for entry in trace["requests"]:
        if entry.get("kind") == "summary" and "ids" not in entry:
            usage = Usage(input=entry["in"], output=entry["out"])
            summaries.append(price.cost(usage))
            continue
        ids = entry["ids"]
        marks = entry.get("marks", [len(ids) - 1] if ids else [])
        usage, cache = cache.charge(_blocks(ids, sizes, marks), entry["out"], entry["t"])
        (summaries if entry.get("kind") == "summary" else session).append(price.cost(usage))
    both = total(session + summaries)
    summarised = total(summaries)
    out = both.to_json()
    out["summarizer_usd"] = round(summarised.usd or 0.0, 6)
    # SPEC Q3: the summariser requests' tokens by kind, and the share of their input read
    # from the cache (None: no summariser request; 0 for one not shaped as the session).
    out["summarizer"] = summarised.to_json()
    share = summarised.cache_read_share
    out["summarizer_cache_read_share"] = None if share is None else round(share, 6)
    return out


def price_quality(result: dict[str, Any]) -> dict[str, Any]:
    """Replace a quality result's `trace` by its bill in every column (in place)."""
    trace = result.pop("trace", None)
    if trace is not None:
        result["pricing"] = {col: bill(trace, column_price(col)) for col in COLUMNS}
    return result


def price_rules() -> dict[str, Any]:
    """The columns' models, prices and cache rules, for the results file and the page."""
    out: dict[str, Any] = {}
    for col in COLUMNS:
        p = column_price(col)
        out[col] = {"model": p.name, "input": p.prices.input, "output": p.prices.output,
                    "cache_read": p.prices.cache_read, "cache_write": p.prices.cache_write,
                    "cache": p.rules.kind, "min_tokens": p.rules.min_tokens,
                    "step": p.rules.step, "ttl_seconds": p.rules.ttl_seconds,
                    "max_breakpoints": p.rules.max_breakpoints}
    return out
