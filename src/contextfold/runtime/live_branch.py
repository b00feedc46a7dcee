"""One session's branch as a live conversation holds it: the state `Conversation` and its
parts (its pins, its compactions) share, as one value.

The branch is loaded O(tail), from the latest checkpoint's boundary; the appends the
conversation makes itself grow it in memory (each append is conditional on the leaf held,
so memory and the database agree), and anything unexpected re-reads it. A damaged branch
is held apart and makes the session read-only (SPEC D2). What the model sees next (SPEC T3)
is projected once per branch object: nodes never change, a new leaf is a new object.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.values.messages import Message, Node, ToolCallPart
from ..core.values.tree import Branch, DamagedBranch
from ..core.view.projection import Projection, project
from ..store import ReadOnlySessionError
from ..store.protocol import SessionStore
from .fitting import healthy
from .turns import open_tool_calls


class LiveBranch:
    """The store, the session id and the branch as last loaded, with its projection."""

    __slots__ = ("_projected", "branch", "damaged", "session_id", "store")

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.branch: Branch | None = None
        self.damaged: DamagedBranch | None = None
        # The projection of `branch`, derived once per branch object.
        self._projected: tuple[Branch | None, Projection] = (None, Projection(None, ()))

    # ------------------------------------------------------------------ reading

    @property
    def current(self) -> Branch | DamagedBranch | None:
        """The branch as last loaded, damaged or not (None before the first load)."""
        return self.damaged if self.damaged is not None else self.branch

    @property
    def leaf_id(self) -> str | None:
        """The leaf held: every append is conditional on it (None before the first load)."""
        return self.branch.leaf_id if self.branch is not None else None

    def projection(self) -> Projection:
        """What the model sees next (SPEC T3), without the system prompt and tools."""
        branch = self.branch
        if branch is None:
            return Projection(None, ())
        if self._projected[0] is not branch:
            self._projected = (branch, project(branch))
        return self._projected[1]

    def open_tool_calls(self) -> dict[str, ToolCallPart]:
        """Tool calls of the current turn that still wait for results, by id."""
        return open_tool_calls(self.branch)

    def last_message(self) -> Message | None:
        """The branch's latest message (pin events and checkpoints are not messages)."""
        if self.branch is None:
            return None
        for node in reversed(self.branch.nodes):
            if node.message is not None:
                return node.message
        return None

    def require_writable(self) -> None:
        """Refuse a write to a damaged session (SPEC D2), naming its problems."""
        if self.damaged is not None:
            raise ReadOnlySessionError(self.session_id, self.damaged.problems)

    # ------------------------------------------------------------------ loading

    async def reload(self) -> None:
        """Re-read the branch from the store (after a stale commit or an outside change)."""
        branch = await self.store.load_branch(self.session_id)
        if isinstance(branch, DamagedBranch):
            self.damaged, self.branch = branch, None
        else:
            self.damaged, self.branch = None, branch

    async def extend(self, nodes: Sequence[Node]) -> None:
        """Add nodes this conversation just appended at the leaf, without re-reading the
        tail (O(tail) per message adds up over hundreds of turns); anything unexpected
        re-reads."""
        branch = self.branch
        if branch is None or not nodes or nodes[0].parent_id != branch.leaf_id:
            await self.reload()
            return
        # One append (or append_many) is one leaf move, one revision bump.
        self.branch = branch.grown(nodes)

    async def history(self, *, limit: int | None = None,
                      before: str | None = None) -> Branch | DamagedBranch:
        """The durable branch, checkpoints included: the whole of it from its root, or
        (with `limit`) one page of `limit` nodes ending at the leaf or before `before`."""
        if limit is None:
            if before is not None:
                raise ValueError("history(before=...) pages back: give a limit too")
            return await self.store.load_full_branch(self.session_id)
        return await self.store.load_branch_page(self.session_id, limit=limit, before_id=before)

    async def before_last_user_message(self) -> Branch | None:
        """The branch ending just before the last user message (None: there is none).

        Reads what an edit needs, not the history: the last user message is found in the
        loaded tail (or the O(tail) segment before it), and the branch that would precede
        it is that tail cut before it, or, when a checkpoint made after that message would
        leave the branch, the store's O(tail) read at its parent.
        """
        loaded = self.branch
        if loaded is None:
            raise ReadOnlySessionError(self.session_id, self.damaged.problems
                                       if self.damaged is not None else ())
        while True:
            users = [i for i, n in enumerate(loaded.nodes) if n.is_user_message]
            if users:
                break
            parent = loaded.nodes[0].parent_id if loaded.nodes else None
            if loaded.complete or parent is None:
                return None
            loaded = healthy(await self.store.load_branch_at(self.session_id, parent),
                             self.session_id)
        cut = users[-1]
        checkpoint = loaded.latest_checkpoint_index
        after_checkpoint = checkpoint is not None and checkpoint < cut
        if after_checkpoint or (checkpoint is None and loaded.complete):
            return Branch(nodes=loaded.nodes[:cut], complete=loaded.complete,
                          revision=loaded.revision)
        parent = loaded.nodes[cut].parent_id
        if parent is None:
            return Branch(nodes=(), revision=loaded.revision)
        return healthy(await self.store.load_branch_at(self.session_id, parent),
                       self.session_id)
