"""Pins: texts the user keeps in front of the model, verbatim, across compactions (SPEC N).

A pin is a durable, append-only `PinEvent` node at the leaf (SPEC N2). The active pins of a
branch are a fold over its ancestor chain: the latest checkpoint carries the pins active at
its parent, and the pin events after it are applied in order. Retry, edit and fork move the
leaf, so they see exactly the pins on their own ancestry; nothing is copied or edited.

Every projection shows the active pins right after the checkpoint summary (or first, with no
checkpoint), as one user-side message (SPEC N1). Their size is bounded by the pin budget
(`Budget.pin_budget`, by default 10% of the safe input limit): a pin that does not fit is
refused with the numbers, never stored and never silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ...errors import ContextfoldError
from ..text.text_estimate import estimate_text
from ..values.messages import Node, Pin, PinEvent

PINS_HEADER = (
    "[contextfold pins] The user pinned these notes; they stay in every request, verbatim:"
)


class PinRefusedError(ContextfoldError, ValueError):
    """A pin that would exceed the pin budget (SPEC N1). Nothing was stored."""

    kind = "bad_input"

    def __init__(self, pin_tokens: int, used_tokens: int, budget_tokens: int) -> None:
        self.pin_tokens = pin_tokens
        self.used_tokens = used_tokens
        self.budget_tokens = budget_tokens
        free = max(0, budget_tokens - used_tokens)
        super().__init__(
            f"this pin needs about {pin_tokens} tokens but only {free} of the pin budget "
            f"({budget_tokens} tokens; {used_tokens} used by other pins) are free: shorten it "
            "or unpin something first")


def fold_pins(start: Sequence[Pin], events: Iterable[PinEvent]) -> tuple[Pin, ...]:
    """Apply pin/unpin events in order to `start`; pins keep the order they were made in."""
    active = {p.pin_id: p for p in start}
    for event in events:
        if event.action == "pin":
            active.setdefault(event.pin_id, Pin(pin_id=event.pin_id, text=event.text,
                                                source_id=event.source_id))
        else:
            active.pop(event.pin_id, None)
    return tuple(active.values())


def active_pins(nodes: Sequence[Node], checkpoint_index: int | None) -> tuple[Pin, ...]:
    """The pins active at the end of `nodes` (a branch, oldest first).

    `checkpoint_index`: position of the latest checkpoint in `nodes`; its carried pins are
    the starting state and only the events after it are folded (an O(tail) load may not
    hold the events before it).
    """
    start: Sequence[Pin] = ()
    begin = 0
    if checkpoint_index is not None:
        cp = nodes[checkpoint_index].checkpoint
        assert cp is not None
        start, begin = cp.pins, checkpoint_index + 1
    events = (n.pin_event for n in nodes[begin:] if n.pin_event is not None)
    return fold_pins(start, (e for e in events if e is not None))


def last_pin_change(nodes: Sequence[Node], begin: int) -> int | None:
    """Position in `nodes` of the latest pin event at or after `begin` (None: none)."""
    for i in range(len(nodes) - 1, begin - 1, -1):
        if nodes[i].pin_event is not None:
            return i
    return None


def pins_text(pins: Sequence[Pin]) -> str:
    """The pins message body exactly as the model sees it ("" with no pins)."""
    if not pins:
        return ""
    blocks = [PINS_HEADER]
    for n, pin in enumerate(pins, 1):
        blocks.append(f"[pin {n}]\n{pin.text}")
    return "\n\n".join(blocks)


def pin_event(pin_id: str, text: str, source_id: str | None = None) -> PinEvent:
    """A pin event for `text` (stripped; must not be empty)."""
    body = text.strip()
    if not body:
        raise ValueError("a pin needs some text: pin a message or give a short text")
    return PinEvent(action="pin", pin_id=pin_id, text=body, source_id=source_id)


def check_pin_fits(pins: Sequence[Pin], text: str, pin_budget: int,
                   count: Callable[[str], int] = estimate_text) -> int:
    """Raise `PinRefusedError` unless the pins plus `text` fit `pin_budget`; the new total.

    The whole pins message is measured (header and numbering included), so what is
    accepted here is what the estimator will count.
    """
    used = count(pins_text(pins)) if pins else 0
    new_total = count(pins_text([*pins, Pin(pin_id="(new)", text=text.strip() or "-")]))
    if new_total > pin_budget:
        raise PinRefusedError(new_total - used, used, pin_budget)
    return new_total
