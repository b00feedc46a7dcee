"""Pins on a live conversation (SPEC N1-N2): `pin`, `unpin`, `pins`.

A pin is checked against the pin budget of the current model before anything is written
(refused with the numbers: `PinRefusedError`), then stored as an append-only pin event at
the leaf. Pinning waits for nothing: during a turn or a compaction it is refused with
`BusyError` (a pin moves the leaf, which would make a running compaction stale).
"""

from __future__ import annotations

from ..core.models.catalog import tokenizer_family
from ..core.text.text_estimate import estimate_text
from ..core.values.messages import Message, Node, Pin, PinEvent
from ..core.values.tree import DamagedBranch
from ..core.view.pins import active_pins, check_pin_fits, pin_event
from ..core.view.projection import project
from ..ids import new_id
from ..store import ReadOnlySessionError
from ..store.protocol import SessionStore
from .base import ConversationBase
from .errors import BusyError


class PinOperations(ConversationBase):
    """The pin operations of `Conversation`."""

    def pins(self) -> tuple[Pin, ...]:
        """The active pins, oldest first, as every request shows them (SPEC N1)."""
        return self.projection().pins

    async def pin(self, text: str | None = None, *, node_id: str | None = None) -> Pin:
        """Pin a short `text`, or the message `node_id` of this branch, verbatim.

        Raises `PinRefusedError` (a `ValueError`) when the pins would exceed the pin budget,
        `ValueError` for an empty text or a node that is not a message of this branch.
        """
        if (text is None) == (node_id is None):
            raise ValueError("pin takes either a text or a node_id (not both, not neither)")
        self._pin_allowed("pin")
        source = None
        if node_id is not None:
            text, source = await self._message_text(node_id), node_id
        assert text is not None
        family = self.capacity.family or tokenizer_family(self.capacity.model)
        check_pin_fits(self.pins(), text, self.budget.pin_budget,
                       lambda t: estimate_text(t, family))
        event = pin_event(new_id(), text, source)
        await self._append_event(event)
        return Pin(pin_id=event.pin_id, text=event.text, source_id=source)

    async def unpin(self, pin_id: str) -> Pin:
        """Remove the active pin `pin_id`; the pin event stays in the history (SPEC N2)."""
        self._pin_allowed("unpin")
        active = {p.pin_id: p for p in self.pins()}
        pin = active.get(pin_id)
        if pin is None:
            known = ", ".join(active) or "none"
            raise ValueError(f"no active pin {pin_id!r} on this branch (active pins: {known})")
        await self._append_event(PinEvent(action="unpin", pin_id=pin_id))
        return pin

    # ------------------------------------------------------------------ internals

    def _pin_allowed(self, operation: str) -> None:
        self._not_busy(operation)
        if self._turn_lock.locked():
            raise BusyError(operation, "a turn")
        self._require_writable()

    async def _append_event(self, event: PinEvent) -> None:
        node = await self.store.append_pin_event(
            self.session_id, event, expected_leaf_id=self._leaf_id(),
            node_id=event.pin_id if event.action == "pin" else None)
        await self._extend([node])
        self._publish("branch_changed", reason=event.action,
                      data={"pin_id": event.pin_id})

    async def _message_text(self, node_id: str) -> str:
        full = await self.history()
        if isinstance(full, DamagedBranch):
            raise ReadOnlySessionError(self.session_id, full.problems)
        node: Node | None = next((n for n in full.nodes if n.id == node_id), None)
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
    if (text is None) == (node_id is None):
        raise ValueError("pin takes either a text or a node_id (not both, not neither)")
    full = await store.load_full_branch(session_id)
    if isinstance(full, DamagedBranch):
        raise ReadOnlySessionError(session_id, full.problems)
    source = None
    if node_id is not None:
        node = next((n for n in full.nodes if n.id == node_id), None)
        if node is None or node.message is None:
            raise ValueError(f"{node_id!r} is not a message on this session's branch")
        text, source = _visible_text(node.message, node_id), node_id
    assert text is not None
    checkpoint = max((i for i, n in enumerate(full.nodes) if n.checkpoint is not None),
                     default=None)
    current = active_pins(full.nodes, checkpoint)
    check_pin_fits(current, text, pin_budget, lambda t: estimate_text(t, family))
    event = pin_event(new_id(), text, source)
    await store.append_pin_event(session_id, event, expected_leaf_id=full.leaf_id,
                                 node_id=event.pin_id)
    return Pin(pin_id=event.pin_id, text=event.text, source_id=source)
