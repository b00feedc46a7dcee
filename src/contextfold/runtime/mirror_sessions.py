"""What this process holds of each mirrored session (SPEC Y14): one value per session in the
process's `Held` cache, bounded by bytes, evicted when idle and read again from the store
when the conversation returns (the store stays the truth).

`MirrorSession` is that value: the session's lock, its sizer (`runtime.driver`), the branch
it was last synced to with the chain hash of its leaf, the metadata last written, and what
is pending on it (the expected reply, a deferred message's write, the background automatic
compaction). `MirrorSessions` keeps them and the two small memos beside them: a chain end
this process stored -> its session (a steady conversation needs no lookup), and what each
conversation last stored (its hashes and node ids, so a resent list is looked up from its
last known message only). It reads a branch from the store when the held one is missing,
stale (another process moved it) or held longer than the recheck period (SPEC D2).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.values.messages import Message, Node
from ..core.values.tree import Branch
from ..core.view.projection import project
from ..store.protocol import SessionStore
from .driver import BackgroundAuto, Tools, session_sizer
from .fitting import healthy
from .held import Held, nodes_bytes, text_bytes
from .sizing import Sizer
from .summarizers import GuardedSummarizer

log = logging.getLogger("contextfold.mirror")

Stored = tuple[str, list[str], tuple[str, ...]]  # session id, chain hashes, their node ids


@dataclass(eq=False)
class MirrorSession:
    """What this process holds of one mirrored session (see the module docstring).
    `provider_compacts`: its client asked the provider to compact (SPEC Y7), so the
    automatic check defers to it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sizer: Sizer | None = None
    sizer_bytes: int = 0
    branch: Branch | None = None
    branch_bytes: int = 0
    leaf_hash: str | None = None
    metadata: dict[str, Any] | None = None
    expected: asyncio.Event | None = None
    write: asyncio.Task[None] | None = None
    auto: BackgroundAuto = field(default_factory=lambda: BackgroundAuto(log))
    provider_compacts: bool = False
    # When the branch was last read from the store, its rows' hashes checked (SPEC D2).
    checked_at: float = field(default_factory=time.monotonic)

    @property
    def busy(self) -> bool:
        """In use: evicting it now would give its next request another lock."""
        return self.lock.locked() or self.expected is not None or \
            (self.write is not None and not self.write.done()) or \
            self.auto.running

    def size(self) -> int:
        return 600 + self.sizer_bytes + self.branch_bytes + \
            (48 * len(self.sizer.costs) if self.sizer is not None else 0) + \
            (text_bytes(self.metadata) if self.metadata else 0)


class MirrorSessions:
    """The mirrored sessions of one store in this process (see the module docstring)."""

    def __init__(self, store: SessionStore, held: Held,
                 settings: CompactionSettings | None,
                 summarize: GuardedSummarizer | None = None) -> None:
        self.store = store
        self.held = held
        self.settings = settings
        # The mirror's summariser: the cost trigger prices its compactions as every face
        # does (SPEC Q2, Q3), not as uncached input.
        self.summarize = summarize

    def state(self, session_id: str) -> MirrorSession:
        """What this process holds of the session (made afresh after an eviction)."""
        key = ("mirror", session_id)
        state = self.held.get(key)
        if state is None:
            state = MirrorSession()
            self.held.put(key, state, state.size())
        return state

    def held_state(self, session_id: str) -> MirrorSession | None:
        """The session's value when this process holds one (none is made)."""
        return self.held.get(("mirror", session_id))

    def ids(self) -> Iterator[str]:
        """The sessions this process holds."""
        return (key[1] for key in list(self.held)
                if isinstance(key, tuple) and key[0] == "mirror")

    def hold_branch(self, session_id: str, branch: Branch, leaf_hash: str,
                    grown: Sequence[Node] | None = None) -> None:
        """Keep `branch` as the session's memo (`grown`: the nodes it adds to the held one,
        so only those are measured)."""
        state = self.state(session_id)
        if branch is not state.branch:
            state.branch_bytes = state.branch_bytes + nodes_bytes(grown) \
                if grown is not None and state.branch is not None else nodes_bytes(branch.nodes)
        state.branch, state.leaf_hash = branch, leaf_hash
        self.held.resize(("mirror", session_id), state.size())

    def drop_branch(self, session_id: str) -> None:
        state = self.held_state(session_id)
        if state is not None:
            state.branch, state.leaf_hash, state.branch_bytes = None, None, 0

    def sizer(self, session_id: str, capacity: ModelCapacity, system: str | None,
              tools: Tools | None) -> Sizer:
        """The session's sizer for this request's model, prompt and tools (the held one
        while they stay the same)."""
        state = self.state(session_id)
        sizer = session_sizer(capacity, settings=self.settings, system=system, tools=tools,
                              summarize=self.summarize, held=state.sizer)
        if sizer is not state.sizer:
            state.sizer = sizer
            state.sizer_bytes = text_bytes(system) + text_bytes(sizer.tools, 6)
            self.held.resize(("mirror", session_id), state.size())
        return sizer

    def fits_after_held(self, session_id: str, sizer: Sizer, hashes: Sequence[str],
                        msgs: Sequence[Message]) -> bool:
        """Do `msgs` continue the held branch, and fit with it without compacting?"""
        state = self.state(session_id)
        cached, leaf_hash = state.branch, state.leaf_hash
        if cached is None or leaf_hash is None or cached.leaf_id is None:
            return False
        node = cached.nodes[-1] if cached.nodes else None
        if node is None or node.message is None:
            return False  # a checkpoint or pin at the leaf: take the careful path
        try:
            k = len(hashes) - 1 - list(reversed(hashes)).index(leaf_hash)
        except ValueError:
            return False
        new = tuple(msgs[k + 1:])
        if not new:
            return False
        estimate = sizer.estimate(project(cached), new)
        return estimate.tokens <= sizer.budget.safe_input_limit

    def stored(self, chain_scope: str, session_id: str) -> Stored | None:
        """What the last sync of `chain_scope` stored in `session_id`, when held: its
        hashes and node ids, so a resent list is looked up in the store from its last
        known message only (`mirror_extend(known=)`). Keyed by chain scope and session:
        clients that share a scope (the same key and agent) would otherwise evict one
        another's lists (issue 26: 4 clients cost ~2x the CPU per request of 1)."""
        return self.held.get(("stored", chain_scope, session_id))

    def remember_stored(self, key: tuple[str, str], stored: Stored) -> None:
        self.held.put(("stored", *key), stored, 130 * len(stored[1]) + 90 * len(stored[2]))

    def remember(self, chain_end: str, session_id: str) -> None:
        """`chain_end` was stored in `session_id`: a list ending there needs no lookup."""
        self.held.put(("end", chain_end), session_id, len(chain_end) + len(session_id) + 98)

    def session_of(self, chain_end: str) -> str | None:
        return self.held.get(("end", chain_end))

    async def set_metadata(self, session_id: str, metadata: Mapping[str, Any]) -> None:
        """Write the session's metadata, unless it is what was last written."""
        wanted = dict(metadata)
        state = self.state(session_id)
        if state.metadata != wanted:
            await self.store.update_session_metadata(session_id, wanted)
            state.metadata = wanted

    async def read_branch(self, session_id: str) -> Branch:
        """The session's branch from the store, its rows checked (SPEC D2)."""
        branch = healthy(await self.store.load_branch(session_id), session_id)
        self.state(session_id).checked_at = time.monotonic()
        return branch

    async def grown(self, session_id: str, branch: Branch, nodes: Sequence[Node]) -> Branch:
        """`branch` with `nodes` just appended at its leaf (else read again)."""
        if not nodes:
            return branch
        if nodes[0].parent_id == branch.leaf_id:
            return branch.grown(nodes)
        return await self.read_branch(session_id)

    async def recheck(self, session_id: str, seconds: float) -> None:
        """SPEC D2 in a long-running process: a branch held longer than `seconds` is read
        again before it is used, and the store checks each row it reads against its hash,
        so a row edited in place by hand (or by another program) makes the session
        read-only here as in a fresh process: `ReadOnlySessionError` naming the session and
        the node, before anything is written. One O(tail) read per active session per
        period, none per request."""
        state = self.state(session_id)
        held = state.branch
        if held is None or time.monotonic() - state.checked_at < seconds:
            return
        fresh = await self.read_branch(session_id)  # raises on damage; the held one stays
        if fresh.leaf_id == held.leaf_id and state.leaf_hash is not None:
            self.hold_branch(session_id, fresh, state.leaf_hash)
        else:  # moved by another process meanwhile: read again where it is needed
            self.drop_branch(session_id)

    async def settle_auto(self, session_id: str) -> None:
        """Wait for the session's background automatic compaction (`runtime.driver`)."""
        state = self.held_state(session_id)
        if state is not None:
            outcome = await state.auto.settle()
            if outcome is not None and outcome.status == "compacted":
                # The held branch has no checkpoint yet: read it again (a deferred message
                # would otherwise be sized without it).
                self.drop_branch(session_id)

    async def take_write(self, session_id: str) -> None:
        """Wait for a deferred message's write of the session (`Mirror.no_reply`)."""
        state = self.held_state(session_id)
        if state is None:
            return
        write, state.write = state.write, None
        if write is not None:
            await write
