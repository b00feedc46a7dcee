"""Per-model capacity and the budgets derived from it (SPEC B1-B3).

Nothing here is one global constant: the reserve, the safe input limit, the recent-tail
budget, the summary budget and the auto threshold all scale with the model, so an 8k-window
model gets a working (smaller) set of budgets rather than a negative one.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..values.messages import Value

PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
# SPEC V2. off: summarise only. auto: mask old tool output when that alone brings the
# request under the threshold, else summarise. always: mask first whenever that frees the
# thrash-guard share, even if the request stays above the auto threshold (never for a
# preflight that masking cannot fit); summarise only when masking cannot help.
MaskingMode = Literal["off", "auto", "always"]
CompactionTrigger = Literal["size", "cost"]


class ModelCapacity(Value):
    """What a model can hold (SPEC B4). Built from the catalog or given by the user."""

    model: str
    context_window: PositiveInt
    max_output: PositiveInt
    max_input: PositiveInt | None = None  # some providers cap the prompt below the window
    image_tokens: Annotated[int, Field(ge=0)] = 1600
    file_tokens: Annotated[int, Field(ge=0)] = 1600
    replays_reasoning: bool = False
    family: str | None = None  # tokenizer family for the estimator, e.g. "claude", "gpt"


class CompactionSettings(Value):
    """Knobs with defaults that follow Pi where Pi has one; every one is overridable."""

    max_reserve: PositiveInt = 16_384  # full output reserve for large windows (Pi's default)
    reserve_fraction: Fraction = 0.25  # small windows reserve at most this share
    # The raw tail for large models: 12k, not Pi's 20k (keepRecentTokens). Measured on the
    # real Pi and Claude Code sessions at 200k (bench/tail_bench.py, docs/benchmarks.md):
    # 12k is the smallest tail that lost nothing in the continuity probes (the user's rules,
    # the previous exchange, the latest tool results in the first request after each
    # compaction; 4k and 8k lost the previous exchange after 1 in 7-9 compactions on the Pi
    # session), and it costs 3-14% less than 20k (the checkpoint keeps the user's words).
    tail_tokens: PositiveInt = 12_000
    tail_fraction: Fraction = 0.25  # ... and at most this share of the window
    summary_share_of_reserve: Fraction = 0.8  # Pi: maxTokens = 0.8 * reserveTokens
    auto_threshold_fraction: Fraction = 0.85  # auto compaction above this share of safe limit
    min_free_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.1  # thrash guard (auto only)
    # The most of the summary budget the identifier ledger may take. It takes only what it
    # needs (issue 11: a fixed 20% evicted half of a 60-turn session's identifiers at 16k);
    # the summary text gets the rest, so at least 40% by default.
    ledger_share: Annotated[float, Field(gt=0, le=0.9)] = 0.5
    # SPEC K6: when no user turn fits the tail, keep the latest tool rounds of the current
    # turn raw (False: the K1-K3 boundary only, as before K6).
    split_turn: bool = True
    pin_share: Fraction = 0.1  # SPEC N1: share of the safe input limit pins may use
    # SPEC V2. Off by default: on real transcripts "auto" saves a third of the summariser
    # calls but every later request carries more tokens, more than those calls cost
    # (docs/runtime.md, bench/masking_bench.py); opt in where summaries are the bottleneck.
    masking: MaskingMode = "off"
    # SPEC Q2: "size" compacts above the automatic threshold; "cost" may compact earlier,
    # between turns, when the model's prices and cache rules make that cheaper
    # (core.cost_trigger). The hard bounds are the same for both. "cost" by default: on the
    # side-by-side bench (docs/peers.md) it costs less than "size" under both Anthropic's
    # and OpenAI's cache rules; an unpriced model is left to the size trigger either way.
    trigger: CompactionTrigger = "cost"
    # SPEC L5: share of the safe input limit the automatic recall block may use (0: off).
    # Small: a few excerpts (~1,700 tokens at a 32k window), enough to bring back a decision
    # or an identifier the checkpoint lost, never a second history. 6%, not 3%: with SPEC Q5
    # the blocks since a checkpoint share this budget, and on the peers bench at the shipped
    # tail 3% found 20.8% of the end battery's facts and 6% all of them, for +1.4% cost
    # under both cache rule sets (docs/runtime.md, docs/peers.md).
    auto_recall_share: Annotated[float, Field(ge=0, le=0.5)] = 0.06


class Budget(Value):
    """Token budgets for one model, all derived from its capacity and the settings."""

    model: str
    context_window: int
    reserve: int
    safe_input_limit: int
    tail_budget: int
    summary_budget: int
    auto_threshold: int
    ledger_budget: int  # the ledger's cap; it uses only what it needs (core.ledger)
    min_free_fraction: float
    split_turn: bool = True
    pin_budget: int = 0  # SPEC N1: tokens the pins message may use
    masking: MaskingMode = "off"  # SPEC V2 (derive_budget takes it from the settings)
    trigger: CompactionTrigger = "cost"  # SPEC Q2 (from the settings)
    recall_budget: int = 0  # SPEC L5: tokens the automatic recall block may use (0: off)


def derive_budget(capacity: ModelCapacity, settings: CompactionSettings | None = None) -> Budget:
    """Derive every budget of SPEC B1-B3 from one model's capacity."""
    s = settings or CompactionSettings()
    window = capacity.context_window
    reserve = max(1, min(s.max_reserve, capacity.max_output, int(window * s.reserve_fraction)))
    safe = window - reserve
    if capacity.max_input is not None:
        safe = min(safe, capacity.max_input)
    summary_budget = max(1, min(int(reserve * s.summary_share_of_reserve), capacity.max_output))
    # The tail must leave room for the summary and a new message in the safe limit.
    tail = min(s.tail_tokens, int(window * s.tail_fraction), max(0, safe - 2 * summary_budget))
    return Budget(
        model=capacity.model,
        context_window=window,
        reserve=reserve,
        safe_input_limit=safe,
        tail_budget=max(0, tail),
        summary_budget=summary_budget,
        auto_threshold=int(safe * s.auto_threshold_fraction),
        ledger_budget=max(1, int(summary_budget * s.ledger_share)),
        min_free_fraction=s.min_free_fraction,
        split_turn=s.split_turn,
        pin_budget=max(1, int(safe * s.pin_share)),
        masking=s.masking,
        trigger=s.trigger,
        recall_budget=int(safe * s.auto_recall_share),
    )
