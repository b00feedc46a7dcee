"""Pins (SPEC N1-N2): `Pins`, the part of a `Conversation` that pins and unpins on its live
branch, and `pin_stored` / `stored_pins` for a session no conversation holds open.

A pin is checked against the pin budget of the current model before anything is written
(refused with the numbers: `PinRefusedError`), then stored as an append-only pin event at
the leaf. Pinning waits for nothing: `Conversation` refuses it with `BusyError` during a turn
or a compaction (a pin moves the leaf, which would make a running compaction stale).
"""

from __future__ import annotations

from ..core.models.budget import ModelCapacity
from ..core.models.catalog import tokenizer_family
from ..core.text.text_estimate import estimate_text
from ..core.values.messages import Message, Pin, PinEvent
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.pins import active_pins, check_pin_fits, pin_event
from ..core.view.projection import project
from ..ids import new_id
from ..store import ReadOnlySessionError
from ..store.protocol import SessionStore
from .live_branch import LiveBranch


def one_pin_source(text: str | None, node_id: str | None) -> None:
    """A pin is a text or a message: refuse neither and both."""
    if (text is None) == (node_id is None):
        raise ValueError("pin takes either a text or a node_id (not both, not neither)")


class Pins:
    """The pins of a live session: what its branch shows, and a pin or an unpin appended at
    the leaf the branch holds (growing it, as the conversation's own appends do)."""

    __slots__ = ("_live",)

    def __init__(self, live: LiveBranch) -> None:
        self._live = live

    def active(self) -> tuple[Pin, ...]:
        """The active pins, oldest first, as every request shows them (SPEC N1)."""
        return self._live.projection().pins

    async def pin(self, text: str | None = None, *, node_id: str | None = None,
                  capacity: ModelCapacity, pin_budget: int) -> Pin:
        """Pin `text`, or the message `node_id` of the branch, if the pins then fit
        `pin_budget` (estimated for `capacity`'s tokenizer); else `PinRefusedError`."""
        one_pin_source(text, node_id)
        source = None
        if node_id is not None:
            full = await self._live.history()
            if isinstance(full, DamagedBranch):
                raise ReadOnlySessionError(self._live.session_id, full.problems)
            text, source = _node_text(full, node_id), node_id
        assert text is not None
        family = capacity.family or tokenizer_family(capacity.model)
        check_pin_fits(self.active(), text, pin_budget, lambda t: estimate_text(t, family))
        event = pin_event(new_id(), text, source)
        await self._append(event)
        return Pin(pin_id=event.pin_id, text=event.text, source_id=source)

    async def unpin(self, pin_id: str) -> Pin:
        """Remove the active pin `pin_id`; the pin event stays in the history (SPEC N2)."""
        active = {p.pin_id: p for p in self.active()}
        pin = active.get(pin_id)
        if pin is None:
            known = ", ".join(active) or "none"
            raise ValueError(f"no active pin {pin_id!r} on this branch (active pins: {known})")
        await self._append(PinEvent(action="unpin", pin_id=pin_id))
        return pin

    async def _append(self, event: PinEvent) -> None:
        live = self._live
        node = await live.store.append_pin_event(
            live.session_id, event, expected_leaf_id=live.leaf_id,
            node_id=event.pin_id if event.action == "pin" else None)
        await live.extend([node])


def _node_text(branch: Branch, node_id: str) -> str:
    """The text of message `node_id` of `branch`, as a pin of it holds it."""
    node = next((n for n in branch.nodes if n.id == node_id), None)
    if node is None or node.message is None:
        raise ValueError(f"{node_id!r} is not a message on this session's branch")
    return _visible_text(node.message, node_id)


def _visible_text(msg: Message, node_id: str) -> str:
    text = msg.text.strip() or "\n\n".join(r.output for r in msg.tool_results).strip()
    if not text:
        raise ValueError(f"message {node_id!r} has no text to pin")
    return text


async def stored_pins(store: SessionStore, session_id: str) -> tuple[Pin, ...]:
    """The active pins of a stored session, as its next request shows them (SPEC N1)."""
    branch = await store.load_branch(session_id)
    if isinstance(branch, DamagedBranch):
        raise ReadOnlySessionError(session_id, branch.problems)
    return project(branch).pins


async def pin_stored(store: SessionStore, session_id: str, *, pin_budget: int,
                     text: str | None = None, node_id: str | None = None,
                     family: str | None = None) -> Pin:
    """`Conversation.pin` for a session no conversation holds open (`contextfold mcp`, the
    proxy's sessions): checked against `pin_budget` first, then appended at the leaf only if
    the leaf has not moved since it was read (else `StaleBranchError`: read and retry)."""
    one_pin_source(text, node_id)
    full = await store.load_full_branch(session_id)
    if isinstance(full, DamagedBranch):
        raise ReadOnlySessionError(session_id, full.problems)
    source = None
    if node_id is not None:
        text, source = _node_text(full, node_id), node_id
    assert text is not None
    checkpoint = max((i for i, n in enumerate(full.nodes) if n.checkpoint is not None),
                     default=None)
    current = active_pins(full.nodes, checkpoint)
    check_pin_fits(current, text, pin_budget, lambda t: estimate_text(t, family))
    event = pin_event(new_id(), text, source)
    await store.append_pin_event(session_id, event, expected_leaf_id=full.leaf_id,
                                 node_id=event.pin_id)
    return Pin(pin_id=event.pin_id, text=event.text, source_id=source)
