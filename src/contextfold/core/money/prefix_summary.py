"""What a same-model summarising request would read from the prompt cache (SPEC Q3). Pure.

When the summariser is the session's own model, the summarising request starts with the
session's exact prefix and ends with the instruction, so the provider's prompt cache serves
its input. A replay compacts offline (no summariser request is sent); this says what such a
request would have read at each compaction: its input is the last request before the
compaction, as sent, plus the instruction, through the one modelled prompt cache the
session's requests go through (`core.money.prices.PromptCache`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .prices import Block, Cost, ModelPrice, PromptCache, cache_rules, request_cost


def prefix_summary_costs(requests: Sequence[tuple[Sequence[Block], int, float]],
                         before: Sequence[int], instruction_tokens: Sequence[int | None],
                         price: ModelPrice | None, model: str) -> list[Cost | None]:
    """Per compaction, the input split (read, written, uncached) of the summarising request
    a same-model summariser would send (SPEC Q3); `Cost.cache_read_share` is its share read.

    `requests`: the session's requests in order, each `(blocks, output_tokens, at)` (`at`:
    seconds, when the reply was stored); `before[i]`: the index of the request compaction `i`
    took effect before; `instruction_tokens[i]`: its instruction's size, None when the
    summariser would not send it after the session's prefix (then its result is None, as it
    is for a compaction before the first request: no prefix to start from). The summarising
    request carries the previous request's blocks with the cache mark moved from their end
    to the instruction, goes out when that request's reply came back (a compaction follows
    the turn or round it ends), and leaves its prefix in the cache as a provider would. Its
    output is not counted: the dollars are of its input only."""
    rules = price.rules if price is not None else cache_rules(None, model)
    cache = PromptCache(rules)
    out: list[Cost | None] = [None] * len(before)
    order = sorted(range(len(before)), key=lambda i: before[i])
    at = 0
    for index in range(len(requests) + 1):
        while at < len(order) and before[order[at]] <= index:
            i = order[at]
            at += 1
            instruction = instruction_tokens[i]
            if index == 0 or instruction is None:
                continue
            last, _output, sent = requests[index - 1]
            prefix = [*last[:-1], Block(last[-1].key, last[-1].tokens)] if last else []
            blocks = [*prefix, Block(f"summary-instruction:{i}", instruction, breakpoint=True)]
            usage, cache = cache.charge(blocks, 0, sent)
            out[i] = request_cost(price.prices if price is not None else None, usage, rules)
        if index < len(requests):
            blocks, output, sent = requests[index]
            _usage, cache = cache.charge(blocks, output, sent)
    return out
