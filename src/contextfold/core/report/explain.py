"""Why a compaction ran and what it paid (issue 40, SPEC Q2, Q4). Pure values.

A `CompactionExplanation` is made once, by the compaction path, when the checkpoint is
committed, and stored with it (`details["explanation"]`); every face shows it as it is:

* **trigger**: what asked for it: `threshold` (above the automatic threshold, SPEC A1),
  `cost` (below it, the cost trigger found it cheaper, SPEC Q2), `overflow` (the next
  request would not fit the safe limit, SPEC P1-P3), `manual` (the user), `provider` (a
  provider's own compaction taken up, SPEC Y7);
* **tokens before → after**: the whole next request, as the context gauge counts it;
* **expected saving**: carrying the context against compacting now, over the requests the
  compaction owns (`core.planning.cost_trigger.forecast`), in dollars under the model's prices and
  cache rules, or in tokens for a model without a price; and the **break-even** request
  from which it has paid;
* **realised saving** (added afterwards, never stored: it grows with every request): the
  requests after it up to the next checkpoint or now, as if it had not taken its tokens
  out, against the same requests as sent and its summarising calls
  (`core.money.costs.realised_savings`, the one definition of `saved`). A loss is negative.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..money.costs import Saving
from ..planning.cost_trigger import Forecast

TriggerKind = Literal["threshold", "cost", "overflow", "manual", "provider"]
TRIGGERS: tuple[TriggerKind, ...] = ("threshold", "cost", "overflow", "manual", "provider")
DETAILS_KEY = "explanation"  # where a checkpoint's details keep it


def trigger_kind(trigger: str, *, over_threshold: bool) -> TriggerKind:
    """The explanation's trigger for a compaction asked as `trigger` (the plan's: manual,
    auto, preflight): an automatic one above the threshold is the size trigger's
    (`threshold`), below it the cost trigger's (`cost`)."""
    if trigger == "manual":
        return "manual"
    if trigger == "preflight":
        return "overflow"
    if trigger == "provider":
        return "provider"
    return "threshold" if over_threshold else "cost"


@dataclass(frozen=True)
class CompactionExplanation:
    """One compaction explained (module docstring). `unit`: what `expected_saving`,
    `carry` and `compact` count ("usd", or "tokens" for a model without a price); None
    figures: nothing was forecast (a provider's compaction)."""

    trigger: TriggerKind
    tokens_before: int
    tokens_after: int
    unit: Literal["usd", "tokens"] = "usd"
    expected_saving: float | None = None
    carry: float | None = None
    compact: float | None = None
    horizon: int | None = None  # the requests the forecast covers (those it owns)
    break_even: int | None = None  # the request after it from which it has paid
    realised: Saving | None = None

    @classmethod
    def of(cls, trigger: TriggerKind, tokens_before: int, tokens_after: int,
           forecast: Forecast | None) -> CompactionExplanation:
        """The explanation of a compaction from `tokens_before` to `tokens_after`, with the
        cost trigger's `forecast` of it (None: none made)."""
        if forecast is None:
            return cls(trigger, tokens_before, tokens_after)
        # Rounded as stored (to the millionth), so a stored explanation reads back equal.
        return cls(trigger, tokens_before, tokens_after, forecast.unit,
                   _round(forecast.saving), _round(forecast.carry), _round(forecast.compact),
                   forecast.horizon, forecast.break_even)

    def with_realised(self, saving: Saving | None) -> CompactionExplanation:
        return replace(self, realised=saving)

    @property
    def realised_saving(self) -> float | None:
        """The realised saving in the explanation's unit: dollars for a priced model, else
        the input tokens not carried; None before any request followed it."""
        r = self.realised
        if r is None or not r.requests:
            return None
        return r.usd if self.unit == "usd" and r.usd is not None else \
            (None if self.unit == "usd" else float(r.tokens))

    def to_json(self) -> dict[str, Any]:
        """The `explanation` object of `compact --json`, `replay --json`, the page's
        checkpoint card and the proxy's stats (docs/compaction.md: how to read it)."""
        return {
            "trigger": self.trigger, "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after, "unit": self.unit,
            "expected_saving": _round(self.expected_saving), "carry": _round(self.carry),
            "compact": _round(self.compact), "horizon": self.horizon,
            "break_even": self.break_even,
            "realised": None if self.realised is None else self.realised.to_json(),
        }

    def stored(self) -> dict[str, Any]:
        """What the checkpoint keeps: all but the realised saving (it changes with time)."""
        data = self.to_json()
        data.pop("realised")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompactionExplanation | None:
        """The explanation `to_json` wrote (or a checkpoint stored, `stored`: no realised
        saving); None for anything else (an older checkpoint has none)."""
        trigger = data.get("trigger")
        before, after = data.get("tokens_before"), data.get("tokens_after")
        if trigger not in TRIGGERS or not isinstance(before, int) or \
                not isinstance(after, int):
            return None
        unit = "tokens" if data.get("unit") == "tokens" else "usd"

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        def count(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) else None

        realised = data.get("realised")
        saving = None
        if isinstance(realised, Mapping) and isinstance(realised.get("requests"), int):
            usd = realised.get("usd")
            saving = Saving(float(usd) if isinstance(usd, (int, float)) else None,
                            int(realised.get("tokens") or 0), realised["requests"])
        return cls(trigger, before, after, unit, number("expected_saving"), number("carry"),
                   number("compact"), count("horizon"), count("break_even"), saving)

    def line(self) -> str:
        """One line for people: `cost: 43,746 → 22,412 tokens, expected +$0.21 over 61
        requests (break-even at request 9), realised −$0.02 over 40 requests`."""
        text = f"{self.trigger}: {self.tokens_before:,} → {self.tokens_after:,} tokens"
        if self.expected_saving is not None:
            text += f", expected {self.amount(self.expected_saving)}"
            if self.horizon is not None:
                text += f" over {self.horizon:,} requests"
            text += (f" (break-even at request {self.break_even:,})"
                     if self.break_even is not None else " (never breaks even)")
        realised = self.realised_saving
        if realised is not None and self.realised is not None:
            text += f", realised {self.amount(realised)} over " \
                    f"{self.realised.requests:,} requests"
        elif self.realised is not None:
            text += ", realised: no request since"
        return text

    def amount(self, value: float) -> str:
        """A signed saving: a loss shows with its minus sign, never as 0."""
        sign = "+" if value >= 0 else "−"
        if self.unit == "tokens":
            return f"{sign}{abs(value):,.0f} tokens"
        shown = f"{abs(value):,.2f}" if abs(value) >= 0.01 or value == 0 else \
            f"{abs(value):.4f}"
        return f"{sign}${shown}"


def stored_explanation(details: Mapping[str, Any]) -> CompactionExplanation | None:
    """The explanation a checkpoint's `details` hold, if any."""
    data = details.get(DETAILS_KEY)
    return CompactionExplanation.from_json(data) if isinstance(data, Mapping) else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
