"""What a request costs (SPEC Q1): per-model prices from data, each provider's cache rules.

Two questions are answered here, both pure:

* **What did a request cost?** `request_cost(prices, usage, rules)` prices provider-reported
  usage: uncached input, cache reads, cache writes and output, each at its own rate. Where the
  catalog lists no cache price, the provider's documented multiplier of the input price is
  used (`CacheRules.read_multiplier` / `write_multiplier`).
* **What would a request cost?** `PromptCache.charge` models how the provider's prompt cache
  splits a request that no provider has answered yet (a replay, a forecast, a benchmark): it
  remembers the prefixes earlier requests left in the cache, with their time to live, and says
  how many tokens of the next request are read from it, written to it, or neither.

Prices come from the packaged models.dev table (`contextfold/data/prices.json`, the same
catalog and commit as `models.json`, MIT) plus a `prices` table in the `$CONTEXTFOLD_MODELS`
overrides file. A model's name resolves the way its capacity does (`core.models.catalog`), so one
name means one model for both.

The cache rules, as the providers document them:

* **Anthropic** (`explicit`): caching happens only at `cache_control` breakpoints (at most 4 per
  request); a prefix shorter than the model's minimum is never cached (1,024 tokens for most
  models, 2,048 for Sonnet 4.6 and the Haiku 3 models, 4,096 for Opus 4.5+ and Haiku 4.5); an
  entry lives 5 minutes from its last use (or 1 hour when asked); a write costs 1.25x input
  (2x for the 1-hour TTL), a read 0.1x.
* **OpenAI** (`automatic`): every prompt of 1,024 tokens or more is cached by prefix, counted in
  128-token steps (modelled at message boundaries: a later prompt reads the longest start it
  shares with any cached prompt, not only a whole earlier one); cached input at the listed
  cache price; no write charge; entries are cleared after 5-10 minutes idle (5 is modelled).
* **Google** (`implicit`): automatic prefix caching on Gemini 2.5 and later, from 1,024 tokens
  (4,096 on Pro), read at the listed cache price, no write charge.
* **Any other provider**: no cache is assumed unless the catalog lists a cache-read price, in
  which case OpenAI-style automatic caching is assumed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ...errors import ContextfoldError
from ..values.messages import Usage

PER_MILLION = 1_000_000
LONG_PROMPT_TOKENS = 200_000  # where a provider's `context_over_200k` tier starts
PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")

CacheKind = Literal["explicit", "automatic", "implicit", "none"]


class PriceConfigError(ContextfoldError, ValueError):
    """A `prices` table in an overrides file that cannot be used; the message names the key."""

    kind = "bad_input"


@dataclass(frozen=True)
class TokenPrices:
    """US dollars per million tokens. `cache_read` / `cache_write` None: not listed (the
    provider's multiplier of `input` applies). `long`: the prices above `LONG_PROMPT_TOKENS`
    prompt tokens, where the provider prices long prompts apart."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    long: TokenPrices | None = None

    def for_prompt(self, prompt_tokens: int) -> TokenPrices:
        """The prices that apply to a request of `prompt_tokens` prompt tokens."""
        return self.long if self.long is not None and prompt_tokens > LONG_PROMPT_TOKENS \
            else self


@dataclass(frozen=True)
class CacheRules:
    """How one provider's prompt cache behaves for one model (see the module docstring)."""

    provider: str
    kind: CacheKind
    min_tokens: int = 0          # a shorter prefix is never cached
    step: int = 1                # cached tokens are counted in steps of this many
    ttl_seconds: float = 0.0     # an entry unused this long is gone
    read_multiplier: float = 1.0  # read price / input price when the catalog lists none
    write_multiplier: float = 0.0  # write price / input price when the catalog lists none
    max_breakpoints: int | None = None  # explicit caches only

    @property
    def caches(self) -> bool:
        return self.kind != "none"


ANTHROPIC_TTL = {"5m": 300.0, "1h": 3600.0}
ANTHROPIC_WRITE = {"5m": 1.25, "1h": 2.0}


def _anthropic_minimum(model: str) -> int:
    low = model.lower().replace(".", "-")
    if any(k in low for k in ("opus-4-5", "opus-4-6", "opus-4-7", "haiku-4-5")):
        return 4096
    if "sonnet-4-6" in low or "haiku-3" in low or "3-5-haiku" in low or "3-haiku" in low:
        return 2048
    return 1024


def cache_rules(provider: str | None, model: str, prices: TokenPrices | None = None, *,
                ttl: Literal["5m", "1h"] = "5m") -> CacheRules:
    """The cache rules of `model` as served by `provider` (None: judged from the model's
    name, e.g. `claude-*` → Anthropic). `ttl`: the Anthropic TTL the requests ask for."""
    vendor = (provider or _vendor_of(model) or "").lower()
    low = model.lower()
    if vendor in ("anthropic", "amazon-bedrock", "google-vertex-anthropic") or (
            not provider and low.startswith("claude")):
        return CacheRules(provider=vendor or "anthropic", kind="explicit",
                          min_tokens=_anthropic_minimum(model),
                          ttl_seconds=ANTHROPIC_TTL[ttl], read_multiplier=0.1,
                          write_multiplier=ANTHROPIC_WRITE[ttl], max_breakpoints=4)
    if vendor in ("openai", "azure"):
        return CacheRules(provider=vendor, kind="automatic", min_tokens=1024, step=128,
                          ttl_seconds=300.0, read_multiplier=0.5)
    if vendor in ("google", "google-vertex"):
        return CacheRules(provider=vendor, kind="implicit",
                          min_tokens=4096 if "pro" in low else 1024, ttl_seconds=300.0,
                          read_multiplier=0.25)
    if prices is not None and prices.cache_read is not None:
        return CacheRules(provider=vendor or "other", kind="automatic", min_tokens=1024,
                          step=1, ttl_seconds=300.0, read_multiplier=1.0)
    return CacheRules(provider=vendor or "other", kind="none")


def _vendor_of(model: str) -> str | None:
    low = model.lower()
    if "/" in low:
        return low.split("/", 1)[0]
    if low.startswith("claude"):
        return "anthropic"
    if low.startswith(("gpt-", "chatgpt", "o1", "o3", "o4", "codex")):
        return "openai"
    if low.startswith(("gemini", "gemma")):
        return "google"
    return None


# ------------------------------------------------------------------ the cost of a request


@dataclass(frozen=True)
class Cost:
    """What some requests cost: their tokens by kind and the dollars. `usd` None: unpriced."""

    input_tokens: int = 0        # uncached input
    cached_tokens: int = 0       # read from the cache
    cache_write_tokens: int = 0  # written to the cache
    output_tokens: int = 0
    usd: float | None = 0.0
    requests: int = 0

    def __add__(self, other: Cost) -> Cost:
        usd = None if self.usd is None or other.usd is None else self.usd + other.usd
        return Cost(self.input_tokens + other.input_tokens,
                    self.cached_tokens + other.cached_tokens,
                    self.cache_write_tokens + other.cache_write_tokens,
                    self.output_tokens + other.output_tokens, usd,
                    self.requests + other.requests)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cached_tokens + self.cache_write_tokens

    @property
    def cache_read_share(self) -> float | None:
        """read / (read + written + uncached) (SPEC Q3); None without a prompt."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_json(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "output_tokens": self.output_tokens,
                "usd": None if self.usd is None else round(self.usd, 6),
                "requests": self.requests}


def total(costs: Iterable[Cost]) -> Cost:
    """The sum of `costs` (an empty sum costs nothing)."""
    out = Cost()
    for c in costs:
        out = out + c
    return out


def request_cost(prices: TokenPrices | None, usage: Usage, rules: CacheRules) -> Cost:
    """Price one request's provider-reported usage. `usage.input` is the uncached input (the
    wire layer splits OpenAI's cached tokens out of its prompt count). `prices` None: the
    tokens are counted and `usd` is None."""
    tokens = Cost(usage.input, usage.cache_read, usage.cache_write, usage.output, None, 1)
    if prices is None:
        return tokens
    p = prices.for_prompt(usage.prompt)
    read = p.cache_read if p.cache_read is not None else p.input * rules.read_multiplier
    write = p.cache_write if p.cache_write is not None else p.input * rules.write_multiplier
    usd = (usage.input * p.input + usage.cache_read * read + usage.cache_write * write
           + usage.output * p.output) / PER_MILLION
    return replace(tokens, usd=usd)


# ------------------------------------------------------------------ a modelled prompt cache


@dataclass(frozen=True)
class Block:
    """One stable piece of a prompt, in order: `key` names its content (equal keys, equal
    bytes), `tokens` its size, `breakpoint` whether a `cache_control` mark ends it (explicit
    caches only)."""

    key: str
    tokens: int
    breakpoint: bool = False


@dataclass(frozen=True)
class PromptCache:
    """The prefixes a provider's cache holds for one session, with when each was last used.

    Immutable: `charge` returns the split of one request and the cache after it. A prefix is
    named by a chained hash of its block keys (so a lookup costs one step per block, not a
    slice); an entry records its token count and last use.
    """

    rules: CacheRules
    entries: Mapping[int, tuple[int, float]] = field(default_factory=dict)

    def live(self, now: float) -> dict[int, tuple[int, float]]:
        return {k: v for k, v in self.entries.items() if now - v[1] <= self.rules.ttl_seconds}

    def charge(self, blocks: Sequence[Block], output_tokens: int, now: float
               ) -> tuple[Usage, PromptCache]:
        """Split a request of `blocks` sent at `now` (seconds) into the usage the provider
        would report, and the cache after it."""
        prompt = sum(b.tokens for b in blocks)
        if not self.rules.caches:
            return Usage(input=prompt, output=output_tokens), self
        live = self.live(now)
        names = _prefix_names(blocks)
        cumulative = _cumulative(blocks)
        if self.rules.kind == "explicit":
            return self._explicit(blocks, names, cumulative, prompt, output_tokens, live, now)
        return self._automatic(names, cumulative, prompt, output_tokens, live, now)

    def _automatic(self, names: list[int], cumulative: list[int], prompt: int,
                   output: int, live: dict[int, tuple[int, float]], now: float
                   ) -> tuple[Usage, PromptCache]:
        # The longest start this prompt shares with a cached prompt, at a message boundary
        # (the provider caches every prompt by prefix, so any shared start is a hit, not
        # only a whole earlier prompt), counted down to the provider's step.
        hit = 0
        for n in range(len(names) - 1, 0, -1):
            if names[n] in live:
                hit = cumulative[n]
                break
        read = (hit // self.rules.step) * self.rules.step if hit >= self.rules.min_tokens \
            else 0
        if prompt >= self.rules.min_tokens:
            # The whole prompt is cached at no charge, so each of its starts can be read
            # back by a later prompt that shares it (and each start is used again now).
            for n in range(1, len(names)):
                if cumulative[n] >= self.rules.min_tokens:
                    live[names[n]] = (cumulative[n], now)
        usage = Usage(input=prompt - read, cache_read=read, output=output)
        return usage, PromptCache(self.rules, live)

    def _explicit(self, blocks: Sequence[Block], names: list[int], cumulative: list[int],
                  prompt: int, output: int, live: dict[int, tuple[int, float]],
                  now: float) -> tuple[Usage, PromptCache]:
        marks = [i + 1 for i, b in enumerate(blocks) if b.breakpoint]
        if self.rules.max_breakpoints is not None and len(marks) > self.rules.max_breakpoints:
            raise ValueError(f"{len(marks)} cache breakpoints; the provider takes at most "
                             f"{self.rules.max_breakpoints}")
        if not marks:
            return Usage(input=prompt, output=output), PromptCache(self.rules, live)
        last = marks[-1]
        # A read is the longest cached prefix ending at or before the last breakpoint (the
        # provider looks back from each breakpoint for an earlier entry).
        read_at = 0
        for n in range(last, 0, -1):
            if names[n] in live:
                read_at = n
                live[names[n]] = (cumulative[n], now)
                break
        read = cumulative[read_at]
        write = 0
        for n in marks:
            if n > read_at and cumulative[n] >= self.rules.min_tokens:
                live[names[n]] = (cumulative[n], now)
        if cumulative[last] >= self.rules.min_tokens and last > read_at:
            write = cumulative[last] - read
        usage = Usage(input=prompt - read - write, cache_read=read, cache_write=write,
                      output=output)
        return usage, PromptCache(self.rules, live)


def _prefix_names(blocks: Sequence[Block]) -> list[int]:
    """`names[n]`: a name for the prefix of the first n blocks (equal prefixes, equal names)."""
    out = [0]
    for b in blocks:
        out.append(hash((out[-1], b.key)))
    return out


def _cumulative(blocks: Sequence[Block]) -> list[int]:
    out = [0]
    for b in blocks:
        out.append(out[-1] + b.tokens)
    return out


# ------------------------------------------------------------------ the price book


@dataclass(frozen=True)
class ModelPrice:
    """A model's prices and its provider's cache rules, as one lookup answers them."""

    name: str  # the price row's `provider/id`, or the override's name
    prices: TokenPrices
    rules: CacheRules

    def cost(self, usage: Usage) -> Cost:
        return request_cost(self.prices, usage, self.rules)


def _prices_of(fields: Mapping[str, Any], where: str) -> TokenPrices:
    out: dict[str, float | None] = {}
    for key, value in fields.items():
        if key == "context_over_200k":
            continue
        if key not in PRICE_FIELDS:
            if key in ("reasoning", "input_audio", "output_audio"):
                continue  # priced apart by some providers; not a context cost
            raise PriceConfigError(f"{where}: unknown key {key!r} (allowed: "
                                   f"{', '.join(PRICE_FIELDS)}, context_over_200k)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise PriceConfigError(f"{where}: {key} must be a number >= 0 (US dollars per "
                                   f"million tokens), not {value!r}")
        out[key] = float(value)
    if "input" not in out or "output" not in out:
        raise PriceConfigError(f"{where}: needs both input and output prices")
    long = fields.get("context_over_200k")
    return TokenPrices(input=out["input"] or 0.0, output=out["output"] or 0.0,
                       cache_read=out.get("cache_read"), cache_write=out.get("cache_write"),
                       long=_prices_of(long, f"{where}.context_over_200k")
                       if isinstance(long, Mapping) else None)


class PriceBook:
    """Prices by model name: the packaged table plus overrides (exact names, any case)."""

    def __init__(self, rows: Mapping[str, Mapping[str, Any]],
                 overrides: Mapping[str, TokenPrices] | None = None) -> None:
        self._rows = {k.lower(): v for k, v in rows.items()}
        self._overrides = {k.strip().lower(): v for k, v in (overrides or {}).items()}

    @classmethod
    def packaged(cls) -> PriceBook:
        return _packaged_book()

    def with_overrides(self, overrides: Mapping[str, TokenPrices] | str | os.PathLike[str]
                       ) -> PriceBook:
        """A copy with more overrides (a mapping, or the `prices` table of a TOML/JSON file)."""
        if isinstance(overrides, (str, os.PathLike)):
            overrides = load_price_overrides(overrides)
        return PriceBook(self._rows, {**self._overrides, **overrides})

    def lookup(self, name: str, *, provider: str | None = None) -> ModelPrice | None:
        """The price of `name` (a catalog name, `provider/id` or bare id), or None when neither
        the table nor an override lists it. The name resolves as `core.models.catalog` resolves
        it."""
        query = name.strip()
        low = query.lower()
        if low in self._overrides:
            prices = self._overrides[low]
            return ModelPrice(query, prices, cache_rules(provider, query, prices))
        row_name = self._row_name(query, provider)
        if row_name is None:
            return None
        prices = _prices_of(self._rows[row_name], f"prices.json: {row_name}")
        row_provider, row_id = row_name.split("/", 1)
        return ModelPrice(row_name, prices, cache_rules(row_provider, row_id, prices))

    def _row_name(self, query: str, provider: str | None) -> str | None:
        from ..models.catalog import default_catalog

        low = query.lower()
        candidates = [f"{provider.lower()}/{low}"] if provider else []
        vendor = _vendor_of(query)
        if vendor and "/" not in low:
            # A bare first-party name is priced at its maker's rate, not a reseller's (the
            # condensed capacity table may lack the maker's row where the price table has it).
            candidates.append(f"{vendor}/{low}")
            own = default_catalog().resolve(f"{vendor}/{query}")  # its loose match: a date
            if own is not None:
                candidates.append(own.name.lower())
        entry = default_catalog().resolve(f"{provider}/{query}" if provider else query)
        if entry is not None:
            candidates.append(entry.name.lower())
        candidates.append(low)
        return next((c for c in candidates if c in self._rows), None)


@cache
def _packaged_book() -> PriceBook:
    text = resources.files("contextfold.data").joinpath("prices.json").read_text("utf-8")
    return PriceBook(json.loads(text)["prices"])


def load_price_overrides(path: str | os.PathLike[str]) -> dict[str, TokenPrices]:
    """The `prices` table of a TOML or JSON overrides file (the `$CONTEXTFOLD_MODELS` file):

    ```toml
    [prices."my-local-model"]
    input = 0.0
    output = 0.0

    [prices."claude-sonnet-4-5"]   # a negotiated rate
    input = 2.4
    output = 12.0
    cache_read = 0.24
    cache_write = 3.0
    ```

    A file without a `prices` table has no price overrides. Errors name the file and key."""
    from ..models.catalog import read_overrides_file

    file = Path(path)
    data = read_overrides_file(file)
    table = data.get("prices", {})
    if not isinstance(table, dict):
        raise PriceConfigError(f"{file}: 'prices' must be a table keyed by model name")
    out: dict[str, TokenPrices] = {}
    for name, fields in table.items():
        where = f"{file}: prices.{json.dumps(name)}"
        if not isinstance(fields, dict):
            raise PriceConfigError(f"{where}: expected a table of prices, not {fields!r}")
        out[name] = _prices_of(fields, where)
    return out
