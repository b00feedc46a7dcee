"""Idempotent sends: `POST /v1/sessions/{id}/messages` with an `Idempotency-Key` header.

A client that lost the answer of a send (its connection dropped, the worker died) sends
again with the same key; the message must not be stored twice. The key names the user
message's node: its id is derived from (session, key), so the store's idempotent append
(one id per tree, checked under the session's lock) makes "stored once" hold on SQLite and
PostgreSQL across any number of workers, with no table of keys to expire.

What a repeat gets (docs/service.md, Idempotent sends): the stored turn if it was answered;
the reply generated now if the message is stored but unanswered (its worker died); 409
`in_progress` while the first attempt runs on this worker; 422 when the key was used for
another text; 409 `idempotency_key_replaced` when an edit took the message off the branch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..core.values.messages import Node
from ..core.values.tree import Branch
from ..runtime import Conversation, SendResult
from ..store import NodeNotFoundError
from .errors import ApiError

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 200
# Fixed namespace: the same (session, key) gives the same node id on every worker, forever.
_NAMESPACE = uuid.UUID("6f1d2a4e-8c3b-5e7a-9d10-c0f7e1d5a417")


def message_node_id(session_id: str, key: str) -> str:
    """The node id of the user message sent with `key` in `session_id` (deterministic)."""
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable() or not key.isascii():
        raise ApiError(400, "bad_request", f"the {HEADER} header must be 1 to {MAX_KEY_CHARS} "
                       "printable ASCII characters (e.g. a UUID, one per message)")
    return str(uuid.uuid5(_NAMESPACE, f"{session_id}\n{key}"))


@dataclass(frozen=True)
class StoredTurn:
    """The user message stored under a key and what followed it on the branch (up to the
    next user message)."""

    nodes: tuple[Node, ...]

    @property
    def messages(self) -> tuple[Node, ...]:
        """The message nodes (a checkpoint committed after the turn is not part of it)."""
        return tuple(n for n in self.nodes if n.message is not None)

    @property
    def reply(self) -> Node | None:
        replies = [n for n in self.messages if n.message.role == "assistant"]  # type: ignore[union-attr]
        return replies[-1] if replies else None

    def result(self) -> SendResult:
        """The turn as a `SendResult` (what the first attempt answered, minus the
        compactions and stop reason, which are not stored)."""
        reply = self.reply
        return SendResult(self.messages, reply.message if reply is not None else None)


def _turn_in(nodes: tuple[Node, ...], node_id: str) -> StoredTurn | None:
    for i, node in enumerate(nodes):
        if node.id == node_id:
            end = next((j for j in range(i + 1, len(nodes)) if nodes[j].is_user_message),
                       len(nodes))
            return StoredTurn(nodes[i:end])
    return None


def _check_same_text(node: Node, text: str, key: str) -> None:
    msg = node.message
    if msg is None or msg.role != "user" or msg.text != text:
        raise ApiError(422, "idempotency_key_reused",
                       f"{HEADER} {key!r} was already used in this session for a different "
                       "message; use a new key for each message")


def stored_in_tail(conv: Conversation, node_id: str, text: str, key: str) -> StoredTurn | None:
    """The turn of `node_id` if it is in the loaded tail of the branch (no store read):
    the usual place of a message whose answer was just lost."""
    branch = conv.branch
    if not isinstance(branch, Branch):
        return None
    turn = _turn_in(branch.nodes, node_id)
    if turn is not None:
        _check_same_text(turn.nodes[0], text, key)
    return turn


async def stored_anywhere(conv: Conversation, node_id: str, text: str,
                          key: str) -> StoredTurn | None:
    """The turn of `node_id` wherever it is stored: the tail, older history (whole-branch
    read, only on this rare path), or off the branch (409). None if it is not stored."""
    turn = stored_in_tail(conv, node_id, text, key)
    if turn is not None:
        return turn
    try:
        at = await conv.store.load_branch_at(conv.session_id, node_id)
    except NodeNotFoundError:
        return None
    if isinstance(at, Branch) and at.nodes:
        _check_same_text(at.nodes[-1], text, key)
    full = await conv.store.load_full_branch(conv.session_id)
    turn = _turn_in(full.nodes, node_id) if isinstance(full, Branch) else None
    if turn is None:
        raise ApiError(409, "idempotency_key_replaced",
                       f"the message sent with {HEADER} {key!r} is no longer on the session's "
                       "branch (an edit replaced it); send it again with a new key")
    return turn
