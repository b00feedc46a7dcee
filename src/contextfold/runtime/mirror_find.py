"""Which session a client's list belongs to, found by its content-hash chain (SPEC Y1).

Every message of a list has a chain hash (`core.values.content_chain`: its content and every
message before it). The longest prefix of the list already stored names the tree, through
the store's `mirror_index`; a list nothing matches starts a new session, unless it is one
message that no compaction could make fit (refused first, SPEC P3: a refused request leaves
no empty session). A checkpoint committed after a mirrored message is indexed under that
message's hash too, so a client that goes back to it (a retry) keeps the compaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.sizing.fit import Blocked
from ..core.values.messages import Message
from ..core.values.runs import leading_run
from ..core.values.tree import Branch
from ..core.view.projection import project
from ..store.protocol import SessionStore
from .compaction import CompactionOutcome
from .driver import Tools, session_sizer
from .fitting import too_large
from .mirror_sessions import MirrorSessions, Stored


def known_ids(stored: Stored | None, session_id: str, hashes: Sequence[str]) -> tuple[str, ...]:
    """The node ids of the leading `hashes` the last sync of the same scope stored in
    `session_id` (none when that sync went to another session)."""
    if stored is None or stored[0] != session_id:
        return ()
    old, ids = stored[1], stored[2]
    limit = min(len(old), len(ids), len(hashes))
    return ids[:leading_run(hashes[:limit], old[:limit])]


def refuse_alone(msgs: Sequence[Message], capacity: ModelCapacity,
                 settings: CompactionSettings | None, system: str | None,
                 tools: Tools | None) -> None:
    """A new conversation of one message that no compaction could fit is refused before its
    session is made (SPEC P3): a refused request leaves no empty session. (A longer list is
    stored up to its last message either way: that history is real.)"""
    if len(msgs) != 1:
        return
    sizer = session_sizer(capacity, settings=settings, system=system, tools=tools)
    decision = sizer.decide(project(Branch(nodes=(), complete=True, revision=0)), msgs)
    if isinstance(decision, Blocked):
        raise too_large(decision, capacity.model)


async def find_or_create(sessions: MirrorSessions, hashes: Sequence[str],
                         metadata: Mapping[str, Any] | None, title: str | None, *,
                         refuse: Callable[[], None] | None = None,
                         replies_due: Callable[[], list[asyncio.Event]] | None = None,
                         reply_wait: float = 30.0) -> tuple[str, bool]:
    """The session whose stored chain is the longest prefix of `hashes` (and False), or a
    new one (and True). `replies_due`: the list opens with a provider's compaction (SPEC
    Y7); the answers this process is still recording are waited for (at most `reply_wait`
    seconds) before a new session is made, since one of them may hold it."""
    store = sessions.store
    for h in reversed(hashes):  # a chain end stored by this process: no lookup needed
        sid = sessions.session_of(h)
        if sid is not None:
            if metadata:
                await sessions.set_metadata(sid, metadata)
            return sid, False
    for attempt in range(2):
        hits = await store.mirror_lookup(hashes)
        for h in reversed(hashes):  # the longest stored prefix names the tree
            if h in hits:
                sid = await store.mirror_session_of_tree(hits[h].tree_id)
                if sid is not None:
                    if metadata:
                        await sessions.set_metadata(sid, metadata)
                    return sid, False
        due = replies_due() if replies_due is not None and not attempt else []
        if not due:
            break
        # SPEC Y7: the list opens with a provider's compaction nothing stored knows; an
        # answer being recorded may hold it (the client swapped the block in, or dropped
        # what came before the item, as soon as it had it): wait for those, bounded, then
        # look again.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in due)), reply_wait)
    if refuse is not None:
        refuse()
    info = await store.create_session(title=title, metadata=metadata)
    if metadata:
        sessions.state(info.id).metadata = dict(metadata)
    return info.id, True


async def index_checkpoint(store: SessionStore, session_id: str, outcome: CompactionOutcome,
                           branch: Branch) -> None:
    """A checkpoint committed after a mirrored message is found by that message's hash, so
    a client that goes back to it (a retry) keeps the compaction."""
    if outcome.status != "compacted" or outcome.checkpoint_id is None:
        return
    message = next((n for n in reversed(branch.nodes) if n.message is not None), None)
    if message is None:
        return
    found = await store.mirror_node_hash(session_id, message.id)
    if found is not None:
        await store.mirror_index_node(session_id, found, outcome.checkpoint_id, message.id)
