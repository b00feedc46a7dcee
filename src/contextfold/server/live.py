"""One open session of a service worker (`Live`) and how a session talks to its model
(`Settings`): what the worker's cache holds per session and how many bytes that is
(SPEC Y14). The manager that opens, refreshes and evicts them is `server.sessions`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..billing import SERVICE_KEY
from ..core.values.held import Held, nodes_bytes, text_bytes
from ..core.values.tree import Branch, DamagedBranch
from ..runtime import Conversation
from .models import Opened

META_KEY = SERVICE_KEY  # the session's settings in its metadata
# The estimate of an open session (`Live.size`), set against what tracemalloc saw freed
# when open sessions were dropped (sessions of 0, 3 and 10 turns of `bench/varied_data.py`
# text): what every open conversation holds besides its messages (the conversation, its
# event bus and compaction runner, sizer, budget and tool definitions, recall, this
# `Live`), about 10 KB; its branch, about twice `nodes_bytes` (the parsed payloads, and
# what is derived from them: the projection, the branch's index). Its recall memo counts
# itself (`core.recall.auto_recall.candidates_bytes`: each match's text and word set).
OPEN_BYTES = 10_000
BRANCH_FACTOR = 2
UNREAD = object()  # no lease holder read for this request: read it from the store


@dataclass(frozen=True)
class Settings:
    """How a session talks to its model (server-side values only: no key, ever). `model`
    None: the model recorded on the branch, else the server's default (a session the CLI,
    the library or the proxy wrote has no service settings)."""

    model: str | None = None
    context_window: int | None = None
    system: str | None = None
    base_url: str | None = None

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> Settings:
        raw = metadata.get(META_KEY) or {}
        return cls(model=raw.get("model") or None,
                   context_window=raw.get("context_window"), system=raw.get("system"),
                   base_url=raw.get("base_url"))


class Live:
    """One open session: its conversation, settings and what runs on it here."""

    def __init__(self, tenant: str, conv: Conversation, settings: Settings, opened: Opened,
                 info: Any) -> None:
        self.tenant = tenant
        self.conv = conv
        self.settings = settings
        self.opened = opened  # the model, and why this server cannot serve it (if so)
        self.info = info  # the session row as last read (title, leaf, read-only flag)
        self.turns = 0  # turns running on this worker
        self.keyed: set[str] = set()  # user node ids of the idempotent sends running here
        self.lock = asyncio.Lock()  # serialises refreshes
        # SPEC Q4: the session's cost, by the (leaf, revision) it was worked out for.
        self.cost: tuple[tuple[str | None, int], dict[str, Any]] | None = None
        # The compaction lease holder read with the session row by the latest refresh, for
        # the request that refreshed to use once instead of reading it again (issue 26).
        self.lease: str | object | None = UNREAD
        # When the branch held here was last read from the store (its rows' hashes checked).
        self.checked_at = time.monotonic()
        # The branch `size` last measured and its nodes' bytes: a branch grown at the leaf
        # is measured by its new nodes only.
        self._measured: tuple[Any, int] = (None, 0)
        self.on_evicted: Callable[[Live], None] | None = None  # the manager's

    @property
    def busy(self) -> bool:
        """In use here (a turn or its stream, a compaction, a refresh): the cache passes it
        over, so two requests of one session never get two conversations."""
        return self.active or self.lock.locked()

    def evicted(self) -> None:
        """Dropped from the cache while idle: the session's next request opens it again."""
        if self.on_evicted is not None:
            self.on_evicted(self)

    def size(self) -> int:
        """The estimated bytes this open session keeps (SPEC Y14): its branch's nodes, the
        sizer's memo of their costs and its system prompt, the session row, the cost
        worked out, the recall memo, and what every open conversation holds."""
        branch = self.conv.branch
        if branch is not self._measured[0]:
            self._measured = (branch, self._branch_bytes(branch))
        sizer = self.conv.sizer
        # The conversation's own memo of recall matches (`runtime.auto_recall`, a `Held` of
        # its own that the runtime does not expose): counted here, so the worker's bound
        # covers it.
        recall = getattr(getattr(self.conv, "_auto_recall", None), "_memo", None)
        return OPEN_BYTES + BRANCH_FACTOR * self._measured[1] + 48 * len(sizer.costs) + \
            text_bytes(sizer.system) + text_bytes(self.info) + \
            (text_bytes(self.cost) if self.cost is not None else 0) + \
            (recall.bytes if isinstance(recall, Held) else 0)

    def _branch_bytes(self, branch: Branch | DamagedBranch | None) -> int:
        old, old_bytes = self._measured
        if isinstance(branch, Branch) and isinstance(old, Branch) and old.nodes and \
                len(old.nodes) <= len(branch.nodes) and branch.nodes[0] is old.nodes[0] and \
                branch.nodes[len(old.nodes) - 1] is old.nodes[-1]:
            return old_bytes + nodes_bytes(branch.nodes[len(old.nodes):])  # grown at the leaf
        if isinstance(branch, Branch):
            return nodes_bytes(branch.nodes)
        return nodes_bytes(branch.readable) if isinstance(branch, DamagedBranch) else 0

    def take_lease(self) -> str | object | None:
        """The holder the latest refresh read (UNREAD if none since the last take)."""
        lease, self.lease = self.lease, UNREAD
        return lease

    @property
    def session_id(self) -> str:
        return self.conv.session_id

    @property
    def title(self) -> str:
        """The title every face shows (`contextfold.titles`: renamed, stored, "Untitled")."""
        from ..titles import shown_title

        return shown_title(self.info.title, self.info.metadata)

    @property
    def read_only(self) -> bool:
        """Damaged (SPEC D2): in the loaded tail, or in summarised history (the row says)."""
        return self.conv.read_only or bool(self.info.read_only)

    @property
    def active(self) -> bool:
        """Something runs on this session here (then the in-memory branch is current)."""
        return self.turns > 0 or self.conv.state.compacting
