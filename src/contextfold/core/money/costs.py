"""What a session cost, and what its full history would have cost (SPEC Q4). Pure.

`session_cost(nodes, book)` reads one branch, root first:

* **requests** — every assistant message that carries provider-reported usage, priced as
  reported (uncached input, cache reads, cache writes, output; SPEC Q1). A model without a
  price has its tokens counted and its dollars `None`, never zero.
* **summarizer** — every checkpoint's recorded summarising usage
  (`details["summarizer_usage"]`, written by the compaction path), priced at the summariser's
  model. The offline summariser asks no model and costs nothing.
* **full history** — the same requests as if nothing had ever been compacted: each request's
  prompt plus everything the checkpoints before it folded away (a checkpoint's
  `tokens_before - tokens_after_estimate`), sent through the provider's modelled prompt cache
  (`core.money.prices.PromptCache`, a breakpoint at the end of each request as agents place it), at
  the times the replies were stored. It is what the session would have been billed had the
  window been large enough.
* **saved** — the full history's modelled bill minus the same model's bill of the requests
  as they were sent (their prompts through the same modelled cache) and the summarising
  calls. Both sides go through one model, so a session that never compacted saved exactly
  nothing: the model's distance from the provider's real bill (a cache it does not see, a
  TTL it guesses) cancels out instead of showing up as money saved or lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..values.messages import Checkpoint, Message, Node, Usage
from ..view.masking import MASKING_SUMMARIZER, MaskedNode
from ..view.projection import PinNote, Projection
from .prices import (
    Block,
    Cost,
    ModelPrice,
    PriceBook,
    PromptCache,
    cache_rules,
    request_cost,
    total,
)


@dataclass(frozen=True)
class SessionCost:
    """A branch's bill (see the module docstring). `model`: the model the requests were
    priced at when they agree (None when they name several or none)."""

    model: str | None
    requests: Cost
    summarizer: Cost
    full_history: Cost
    compactions: int
    # The requests as sent, through the same modelled cache as `full_history` (for `saved`).
    as_sent: Cost
    # Each checkpoint's realised saving (`realised_savings`), by checkpoint node id.
    savings: Mapping[str, Saving] = field(default_factory=dict)

    @property
    def usd(self) -> float | None:
        """What the session cost: its requests plus its summarising calls."""
        return (self.requests + self.summarizer).usd

    @property
    def saved_usd(self) -> float | None:
        """The full history's modelled bill minus the modelled bill as sent and the
        summarising calls (see the module docstring): 0 for a session never compacted."""
        full, spent, summaries = self.full_history.usd, self.as_sent.usd, self.summarizer.usd
        if full is None or spent is None or summaries is None:
            return None
        return full - spent - summaries

    def to_json(self) -> dict[str, Any]:
        """The `cost` object of the CLI's and the service's session views (docs/service.md)."""
        spent = self.requests + self.summarizer
        return {
            "currency": "USD",
            "model": self.model,
            "usd": _round(self.usd),
            "full_history_usd": _round(self.full_history.usd),
            # The other side of `saved_usd`: the requests as sent through the same modelled
            # cache, plus the summaries (what a face shows beside the full history's figure,
            # never the reported `usd`, which is of another kind).
            "as_sent_usd": _round(None if self.as_sent.usd is None or self.summarizer.usd is None
                                  else self.as_sent.usd + self.summarizer.usd),
            "saved_usd": _round(self.saved_usd),
            "input_tokens": spent.input_tokens,
            "cached_tokens": spent.cached_tokens,
            "cache_write_tokens": spent.cache_write_tokens,
            "output_tokens": spent.output_tokens,
            "summarizer_usd": _round(self.summarizer.usd),
            "compactions": self.compactions,
            "requests": self.requests.to_json(),
            "summarizer": self.summarizer.to_json(),
            "full_history": self.full_history.to_json(),
            # Issue 40: each checkpoint's realised saving (its explanation's last figure).
            "checkpoints": {cid: s.to_json() for cid, s in self.savings.items()},
        }


def _round(usd: float | None) -> float | None:
    return None if usd is None else round(usd, 6)


class _Prices:
    """Lookups by model name, once each."""

    def __init__(self, book: PriceBook) -> None:
        self._book = book
        self._seen: dict[str, ModelPrice | None] = {}

    def __call__(self, name: str | None) -> ModelPrice | None:
        if not name:
            return None
        if name not in self._seen:
            self._seen[name] = self._book.lookup(name)
        return self._seen[name]

    def cost(self, name: str | None, usage: Usage) -> Cost:
        return priced_usage(self(name), name, usage)


def priced_usage(price: ModelPrice | None, name: str | None, usage: Usage) -> Cost:
    """One request's reported usage at `price` (`name`'s lookup): its tokens, and `usd` None
    when the model has no price."""
    if price is None:
        return request_cost(None, usage, cache_rules(None, name or ""))
    return price.cost(usage)


def summarizer_model(checkpoint: Checkpoint, usage: Usage) -> str | None:
    """The model a checkpoint's summary was asked of (`summarizer_name`)."""
    return summarizer_name(checkpoint.summarizer, usage)


def summarizer_name(summarizer: str | None, usage: Usage) -> str | None:
    """The model a summary was asked of: the usage's, else the one its summariser names
    (`llm:<model>`, or `llm-<model>` as older checkpoints wrote it); None for one that asked
    no model (the offline summary)."""
    if usage.model:
        return usage.model
    return _named_model(summarizer)


def _named_model(summarizer: str | None) -> str | None:
    for prefix in ("llm:", "llm-"):
        if summarizer and summarizer.startswith(prefix):
            return summarizer[len(prefix):]
    return None


def names_a_model(summarizer: str | None) -> bool:
    """Whether a summariser's name says a model wrote the summary (`llm:<model>`)."""
    return _named_model(summarizer) is not None


def summary_cost(summarizer: str | None, usage: Usage | None, book: PriceBook) -> Cost:
    """What one compaction's summarising requests cost (SPEC Q4), the one rule for a stored
    checkpoint (`session_cost`) and a compaction's outcome: the offline summary asks no model
    and costs nothing; an unpriced model's dollars are None."""
    if usage is None:
        return Cost()
    name = summarizer_name(summarizer, usage)
    return priced_usage(book.lookup(name) if name else None, name, usage)


def session_cost(nodes: Iterable[Node], book: PriceBook, *, model: str | None = None
                 ) -> SessionCost:
    """The bill of one branch, root first (`model`: the session's model, for replies whose
    usage names none)."""
    prices = _Prices(book)
    requests: list[Cost] = []
    summarising: list[Cost] = []
    models: set[str] = set()
    folded = 0  # tokens the checkpoints so far took out of every later request
    full = _FullHistory()
    sent = _FullHistory()  # the same model over the prompts as sent: `saved` compares these
    compactions = 0
    priced: list[PricedRequest] = []  # for each checkpoint's realised saving
    folds: list[Fold] = []
    ids: list[str] = []
    for node in nodes:
        payload = node.payload
        if isinstance(payload, Checkpoint):
            if payload.summarizer != MASKING_SUMMARIZER:
                compactions += 1
            after = payload.tokens_after_estimate
            # Signed for the checkpoint's own saving (one that made requests larger lost);
            # the full history adds back only what was taken out.
            took = 0 if after is None else payload.tokens_before - after
            folded += max(0, took)
            used = payload.details.get("summarizer_usage")
            summary = Cost()
            if isinstance(used, dict):
                usage = Usage.model_validate(used)
                summary = prices.cost(summarizer_model(payload, usage), usage)
                summarising.append(summary)
            # A masking step (SPEC V2) summarises nothing but takes tokens out all the same.
            folds.append(Fold(len(priced), took, summary))
            ids.append(node.id)
            continue
        if not isinstance(payload, Message) or payload.role != "assistant" or \
                payload.usage is None:
            continue
        usage = payload.usage
        name = usage.model or payload.model or model
        if name:
            models.add(name)
        requests.append(prices.cost(name, usage))
        priced.append(PricedRequest(prices(name), name or "", usage.prompt, usage.output,
                                    node.created_at.timestamp()))
        full.add(prices(name), name or "", usage.prompt, usage.output, folded,
                 node.created_at.timestamp())
        sent.add(prices(name), name or "", usage.prompt, usage.output, 0,
                 node.created_at.timestamp())
    return SessionCost(model=models.pop() if len(models) == 1 else None,
                       requests=total(requests), summarizer=total(summarising),
                       full_history=full.cost(), compactions=compactions, as_sent=sent.cost(),
                       savings=dict(zip(ids, realised_savings(priced, folds), strict=True)))


class _FullHistory:
    """The uncompacted requests through a modelled prompt cache, one per reply."""

    def __init__(self) -> None:
        self._caches: dict[str, PromptCache] = {}
        self._blocks: dict[str, list[Block]] = {}
        self._costs: list[Cost] = []

    def fork(self) -> _FullHistory:
        """The same cache state, to go on another way (the caches are immutable values)."""
        other = _FullHistory()
        other._caches = dict(self._caches)
        other._blocks = {k: list(v) for k, v in self._blocks.items()}
        other._costs = list(self._costs)
        return other

    def add(self, price: ModelPrice | None, name: str, prompt: int, output: int, folded: int,
            now: float) -> Cost:
        prompt = max(0, prompt + folded)
        rules = price.rules if price is not None else cache_rules(None, name)
        cache = self._caches.get(name) or PromptCache(rules)
        blocks = [Block(b.key, b.tokens) for b in self._blocks.get(name, [])]
        grown = sum(b.tokens for b in blocks)
        if prompt < grown:  # an edit or a fork point: the history is another one
            blocks, grown = [], 0
        if prompt > grown:
            blocks.append(Block(f"{name}#{len(self._costs)}", prompt - grown))
        if blocks:
            blocks[-1] = Block(blocks[-1].key, blocks[-1].tokens, breakpoint=True)
        charged, self._caches[name] = cache.charge(blocks, output, now)
        self._blocks[name] = blocks
        cost = request_cost(price.prices if price else None, charged, rules)
        self._costs.append(cost)
        return cost

    def cost(self) -> Cost:
        return total(self._costs)


# ------------------------------------------------------------------ each checkpoint's saving


@dataclass(frozen=True)
class PricedRequest:
    """One request as a saving reads it: its model's price (None: unpriced), the model's
    name, its prompt's and its reply's tokens (reported, or modelled for a replay) and when
    it was sent (seconds)."""

    price: ModelPrice | None
    name: str
    prompt: int
    output: int
    at: float


@dataclass(frozen=True)
class Fold:
    """One checkpoint as a saving reads it: the request it took effect before (its index in
    the requests), the tokens it took out of every later request (negative when it made
    them larger: a manual compaction may), and its summarising requests' cost."""

    before_request: int
    tokens: int
    summary: Cost = field(default_factory=Cost)


@dataclass(frozen=True)
class Saving:
    """What one compaction saved over the requests after it, up to the next checkpoint or
    now (`requests` of them): `usd` by the one definition of `SessionCost.saved_usd`
    restricted to those requests (None: a model without a price, or no request yet), and
    the input `tokens` those requests did not carry. A loss is negative, never 0."""

    usd: float | None
    tokens: int
    requests: int

    def to_json(self) -> dict[str, Any]:
        return {"usd": _round(self.usd), "tokens": self.tokens, "requests": self.requests}


class SavingMeter:
    """Realised savings (`realised_savings`) one request at a time, for a face that sees a
    session live (the proxy's stats): `fold` when a checkpoint takes effect, `request` for
    each request sent after it. It holds the modelled cache as sent and, for the latest
    fold only, the cache as if that fold had not happened: a fold's saving is final when
    the next one starts."""

    def __init__(self) -> None:
        self._sent = _FullHistory()
        self._closed: list[Saving] = []
        self._open: tuple[Fold, _FullHistory] | None = None
        self._kept = self._as_sent = Cost()
        self._count = 0

    def fold(self, fold: Fold) -> None:
        """A checkpoint takes effect before the next request."""
        self._close()
        self._open = (fold, self._sent.fork())
        self._kept, self._as_sent, self._count = Cost(), Cost(), 0

    def request(self, r: PricedRequest) -> None:
        """One request sent (its reported or modelled usage)."""
        cost = self._sent.add(r.price, r.name, r.prompt, r.output, 0, r.at)
        if self._open is not None:
            fold, carried = self._open
            self._kept = self._kept + carried.add(r.price, r.name, r.prompt, r.output,
                                                  fold.tokens, r.at)
            self._as_sent = self._as_sent + cost
            self._count += 1

    def savings(self) -> list[Saving]:
        """Each fold's saving so far, in the order they were folded."""
        return self._closed + ([self._current()] if self._open is not None else [])

    def _current(self) -> Saving:
        assert self._open is not None
        fold = self._open[0]
        if not self._count:
            return Saving(None, 0, 0)
        kept, sent, summary = self._kept.usd, self._as_sent.usd, fold.summary.usd
        usd = None if kept is None or sent is None or summary is None else \
            kept - sent - summary
        return Saving(usd, fold.tokens * self._count, self._count)

    def _close(self) -> None:
        if self._open is not None:
            self._closed.append(self._current())
        self._open = None


def realised_savings(requests: Sequence[PricedRequest], folds: Sequence[Fold]
                     ) -> list[Saving]:
    """Each fold's realised saving (SPEC Q2, Q4): the requests after it up to the next fold
    (or the last request) as if this checkpoint had not taken its tokens out (carrying
    the context it folded), minus the same requests as sent and its summarising calls,
    both through the one modelled prompt cache of `session_cost` starting from the same
    state. The same definition as `SessionCost.saved_usd`, over one checkpoint's requests
    and its own fold; the first request after it pays its cache rewrite. A fold no request
    followed saved nothing yet (`usd` None, 0 requests). O(requests + folds)."""
    order = sorted(range(len(folds)), key=lambda i: folds[i].before_request)
    meter = SavingMeter()
    pending = iter(order)
    nxt = next(pending, None)
    for index, r in enumerate(requests):
        while nxt is not None and folds[nxt].before_request <= index:
            meter.fold(folds[nxt])
            nxt = next(pending, None)
        meter.request(r)
    while nxt is not None:
        meter.fold(folds[nxt])
        nxt = next(pending, None)
    out: list[Saving] = [Saving(None, 0, 0)] * len(folds)
    for i, saving in zip(order, meter.savings(), strict=True):
        out[i] = saving
    return out


# ------------------------------------------------------------------ requests not yet billed


def projection_blocks(projection: Projection, cost: Callable[[Node], int], *,
                      fixed: int = 0, pins_tokens: int = 0) -> list[Block]:
    """A request built from `projection` as prompt-cache blocks (SPEC Q1, Q3): the fixed part
    (system prompt and tools, `fixed` tokens), the checkpoint, the pins, then each message
    (the automatic recall block, SPEC L5, before the one it precedes), with cache marks
    where the library puts them (the fixed part, the checkpoint, the end)."""
    blocks: list[Block] = []
    if fixed:
        blocks.append(Block("fixed", fixed, breakpoint=True))
    if projection.checkpoint is not None:
        cp = projection.checkpoint
        blocks.append(Block(f"checkpoint:{cp.id}", cost(cp), breakpoint=True))
    if projection.sent_pins and pins_tokens:
        blocks.append(Block("pins:" + ",".join(p.pin_id for p in projection.sent_pins),
                            pins_tokens))
    recall_at = projection.recall_at
    notes: dict[str | None, list[PinNote]] = {}
    for note in projection.pin_notes:
        notes.setdefault(note.before_id, []).append(note)

    def add_notes(before: str | None) -> None:
        # SPEC Q5: a pin or unpin since the checkpoint, where it happened.
        for note in notes.get(before, ()):
            digest = hashlib.sha256(note.text.encode()).hexdigest()[:12]
            blocks.append(Block(f"pin-note:{digest}", note.tokens))

    for node in projection.messages:
        add_notes(node.id)
        recalled = recall_at.get(node.id)
        if recalled is not None:
            # SPEC L5, Q5: each turn's block right before its user message.
            # Keyed by its text too: equal keys must mean equal bytes (`Block`).
            digest = hashlib.sha256(recalled.text.encode()).hexdigest()[:12]
            blocks.append(Block(f"recall:{','.join(recalled.node_ids)}@{digest}",
                                recalled.tokens))
        # A masked copy shares its node's id but not its bytes (SPEC V1).
        key = ("masked:" if isinstance(node, MaskedNode) else "") + node.id
        blocks.append(Block(key, cost(node)))
    add_notes(None)
    if blocks and not blocks[-1].breakpoint:
        blocks[-1] = Block(blocks[-1].key, blocks[-1].tokens, breakpoint=True)
    return blocks


def modelled_cost(requests: Iterable[tuple[Sequence[Block], int, float]],
                  price: ModelPrice | None, model: str) -> Cost:
    """The bill of requests no provider has answered: each `(blocks, output_tokens, at)`
    goes through the provider's modelled prompt cache in order (`at`: seconds)."""
    rules = price.rules if price is not None else cache_rules(None, model)
    cache = PromptCache(rules)
    out: list[Cost] = []
    for blocks, output, at in requests:
        usage, cache = cache.charge(blocks, output, at)
        out.append(request_cost(price.prices if price is not None else None, usage, rules))
    return total(out)
