"""The result objects of the prepare step: a compaction `Plan`, or a `NoOp` with its reason.

A plan is everything the summariser and the conditional commit need, computed without any
I/O: what to fold in, where raw retention resumes, and which branch state it was made for
(SPEC C1), so the store can refuse it if the branch moved meanwhile (SPEC C2-C3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ..models.budget import Budget
from ..text.identifiers import combine_identifiers, identifiers_by_message
from ..values.messages import Ledger, LedgerEntry, Message, Node, Pin, TurnContext
from ..view.projection import Projection

Trigger = Literal["manual", "auto", "preflight"]
Action = Literal["summarize", "mask"]
Profile = Literal["research", "coding", "general"]


@dataclass(frozen=True)
class NoOp:
    """A successful decision not to compact; `reason` says why (SPEC M3, A2, A3)."""

    reason: str
    trigger: Trigger
    code: str  # machine-readable: single_turn, already_compacted, unstable, ...

    @property
    def is_noop(self) -> bool:
        return True


@dataclass(frozen=True)
class RequestPrefix:
    """What the session's next request holds before any draft: the projection the plan was
    made from, the system prompt and the tools (as request JSON)."""

    projection: Projection
    system: str | None = None
    tools: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Plan:
    trigger: Trigger
    session_leaf_id: str  # C1: the leaf the plan was made for
    branch_revision: int  # C1: the revision the plan was made for
    first_kept_id: str | None  # new boundary; None = nothing kept raw (K3)
    previous_checkpoint_id: str | None
    previous_summary: str | None
    previous_ledger: Ledger
    newly_old: tuple[Node, ...]  # message nodes to fold into the summary (K5, M4, M5)
    kept: tuple[Node, ...]  # raw message nodes still projected after the commit
    chunks: tuple[tuple[Node, ...], ...]  # newly_old split to fit the summariser's input
    tokens_before: int
    kept_tokens: int
    newly_old_tokens: int
    budget: Budget
    summarizer_budget: Budget
    profile: Profile
    instructions: str | None = None

    @property
    def is_noop(self) -> bool:
        return False

    previous_first_kept_id: str | None = None
    # False for an M4 catch-up: the summary absorbs new nodes that also stay in the tail.
    boundary_moved: bool = True
    # The ledger the checkpoint will carry (previous + newly old identifiers, within its
    # cap). Made before summarising, because the summary gets what the ledger leaves.
    # None in hand-built plans: the ledger is then merged at commit within the cap.
    ledger: Ledger | None = None
    tail_budget: int = 0  # the tail budget the boundary was chosen for (P2 may shrink it)
    # SPEC K6: the split turn's context (request verbatim, rounds folded so far), and the
    # kept results clipped in the projection (node id -> characters per result).
    turn_context: TurnContext | None = None
    tail_clips: Mapping[str, int] = field(default_factory=dict)
    # "mask": a masking step (SPEC V2) -- no summariser call; the checkpoint keeps the
    # previous summary and boundary and masks tool results before `mask_before_id`.
    action: Action = "summarize"
    # Where masking ends in the new checkpoint (a summary carries an earlier mask forward
    # while its node is still in the kept tail); None: nothing masked.
    mask_before_id: str | None = None
    pins: tuple[Pin, ...] = ()  # SPEC N2: active pins, carried by the checkpoint
    # SPEC Y7: the provider compaction the previous checkpoint started from, carried on.
    provider_base: tuple[Message, ...] = ()
    # Each newly old message's identifiers, as the planner extracted them for the ledger
    # (None: extracted on first use). Not part of the plan's identity.
    extracted: Mapping[str, tuple[LedgerEntry, ...]] | None = field(
        default=None, compare=False, repr=False)
    # The previous checkpoint's details: its retention check (SPEC S6) lists what every
    # later checkpoint must still carry or name as evicted.
    previous_details: Mapping[str, Any] = field(default_factory=dict, compare=False,
                                                repr=False)
    # SPEC Q3: the request the plan was made from, for a summariser that is the session's
    # own model (its request then starts with exactly this prefix). Not part of the identity.
    request: RequestPrefix | None = field(default=None, compare=False, repr=False)

    @cached_property
    def message_identifiers(self) -> Mapping[str, tuple[LedgerEntry, ...]]:
        """Identifiers of each newly old message, extracted once for the whole plan (the
        ledger and the summariser's facts both read them from here)."""
        if self.extracted is not None:
            return self.extracted
        return identifiers_by_message(self.newly_old)

    def identifiers(self, nodes: Iterable[Node] | None = None) -> list[LedgerEntry]:
        """Deduplicated identifiers of `nodes` (default: all newly old nodes), which must
        be newly old nodes of this plan."""
        found = self.message_identifiers
        if nodes is None:
            return combine_identifiers(found.values())
        return combine_identifiers(found.get(n.id, ()) for n in nodes)
