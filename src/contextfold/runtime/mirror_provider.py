"""A provider's own compaction in a mirrored session (SPEC Y7).

A client may ask its provider to compact (Anthropic's `compaction` or a `compact_*` edit,
OpenAI's `context_management`). The provider's compaction item is stored like any message;
before anything is fitted, it becomes the checkpoint the projection starts from (never
summarised again, `compaction.take_up_provider_compaction`). From the first such request
on, the session's automatic compaction (A1) is left to the provider: this process compacts
only what the window forces (P1-P5).
"""

from __future__ import annotations

from ..core.values.tree import Branch
from ..core.view.projection import provider_compaction_index
from .compaction import take_up_provider_compaction
from .mirror_find import index_checkpoint
from .mirror_sessions import MirrorSession, MirrorSessions
from .sizing import Sizer


def left_to_provider(state: MirrorSession) -> bool:
    """Is the session's automatic compaction left to its provider? Yes once its client
    asked the provider to compact (this process saw it), or when its branch already goes on
    from a provider's compaction (also after a restart)."""
    if state.provider_compacts:
        return True
    branch = state.branch
    if branch is None:
        return False
    if provider_compaction_index(branch) is not None:
        return True
    latest = branch.latest_checkpoint
    cp = latest.checkpoint if latest is not None else None
    return cp is not None and bool(cp.provider_base)


async def take_up(sessions: MirrorSessions, session_id: str, sizer: Sizer,
                  branch: Branch) -> Branch:
    """`branch` with a provider's compaction on it taken up as the checkpoint the
    projection starts from (indexed under the message before it); as it is without one."""
    if provider_compaction_index(branch) is None:
        return branch
    outcome = await take_up_provider_compaction(sessions.store, session_id, branch,
                                                sizer.budget)
    if outcome is None:
        return branch
    await index_checkpoint(sessions.store, session_id, outcome, branch)
    return await sessions.read_branch(session_id)
