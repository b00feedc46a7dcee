"""`Committing`: the conditional commit of a checkpoint (SPEC C2-C4) — one transaction
re-checks that the branch is still the one the plan was made for, then inserts the
checkpoint and moves the leaf; any mismatch is `stale` and writes nothing.

A part of `contextfold.store.sql_store.SqlSessionStore`, over its `SqlAccess`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from contextfold.core.values.messages import Checkpoint, Node, utc_now
from contextfold.core.values.tree import Branch, DamagedBranch, build_branch, check_stability
from contextfold.ids import new_id

from ..errors import InvalidOperationError
from ..values import CommitResult
from . import queries
from .access import SqlAccess

if TYPE_CHECKING:
    from contextfold.core.planning.plan import Plan


class Committing:
    """`commit_checkpoint` and the re-checks it makes under the session's lock."""

    def __init__(self, access: SqlAccess) -> None:
        self.access = access

    async def commit_checkpoint(
        self, plan: Plan, checkpoint: Checkpoint, *, session_id: str
    ) -> CommitResult:
        """Append `checkpoint` at the leaf iff the branch is still the one `plan` was made for.

        One transaction re-checks leaf, revision, tool-workflow stability and that the
        boundary is on the branch; only then inserts the checkpoint, moves the leaf and bumps
        the revision. Any mismatch → `status="stale"` and nothing is written (SPEC C3).
        Cancelling the calling task before it returns rolls everything back (SPEC C4).
        """
        if not isinstance(checkpoint, Checkpoint):
            raise InvalidOperationError(
                f"commit_checkpoint takes a core Checkpoint, got {type(checkpoint).__name__}")
        if checkpoint.first_kept_id != plan.first_kept_id:
            raise InvalidOperationError(
                f"checkpoint keeps raw history from {checkpoint.first_kept_id!r} but the plan's "
                f"boundary is {plan.first_kept_id!r}; build the checkpoint from the plan")
        db = self.access

        async def op(conn: AsyncConnection) -> CommitResult:
            row = await db.lock_session(conn, session_id)
            await db.step("locked")
            # Damage first: a damaged session refuses every write, stale plan or not (D2).
            branch = await self._commit_view(conn, row, plan)
            if db.guard_commit:
                reason = _plan_mismatch(row, plan)
                if reason is not None:
                    return CommitResult("stale", None, reason, db.info(row, read_only=False))
            reason = await self._branch_mismatch(conn, row, branch, plan)
            if reason is not None:
                return CommitResult("stale", None, reason, db.info(row, read_only=False))
            await db.step("checked")
            node = Node(id=new_id(), parent_id=row["leaf_id"], created_at=utc_now(),
                        payload=checkpoint)
            await db.insert_chain(conn, row, [node])
            await db.step("inserted")
            info = await db.move_leaf(conn, row, node.id, op="commit", node_id=node.id,
                                      planned=(plan.session_leaf_id, plan.branch_revision))
            await db.step("moved")
            return CommitResult("committed", node, None, info)

        return await db.write(op)

    async def _commit_view(self, conn: AsyncConnection, row: RowMapping, plan: Plan) -> Branch:
        """The part of the branch the C2 re-checks need, after the damage check (D2).

        When this store has verified the branch already (it loaded it for the plan),
        only the kept tail is read: from the leaf up to the plan's boundary, which holds
        the current turn (stability) and proves the boundary is on the branch. A boundary
        that is not on the branch walks to the root and is reported as such.
        """
        db = self.access
        boundary = plan.first_kept_id
        if boundary is None or row["read_only"] or row["leaf_id"] is None or \
                (row["tree_id"], row["leaf_id"]) not in db.memo.sound:
            return await db.writable_branch(conn, row)
        found = await queries.walk_up(conn, row["tree_id"], row["leaf_id"], boundary)
        branch = build_branch(found, row["leaf_id"], revision=row["branch_revision"],
                              stop_at=boundary)
        if isinstance(branch, DamagedBranch):
            # The tail alone can look damaged when the new boundary lies between the latest
            # checkpoint's first_kept_id and that checkpoint (its raw start is older than the
            # tail read): decide on the verified branch, which raises only on real damage.
            return await db.writable_branch(conn, row)
        return branch

    async def _branch_mismatch(
        self, conn: AsyncConnection, row: RowMapping, branch: Branch, plan: Plan
    ) -> str | None:
        """The C2 re-checks that need the branch: stability and the boundary."""
        stability = check_stability(branch)
        if not stability.stable:
            return "the tool workflow is not stable: " + "; ".join(stability.reasons)
        boundary = plan.first_kept_id
        if boundary is None:
            return None
        if boundary in branch:
            node = branch.nodes[branch.index[boundary]]
            return None if node.message is not None else (
                f"boundary {boundary!r} is a checkpoint, not a message")
        if not branch.complete:
            full = await queries.load_full(conn, row["tree_id"], row["leaf_id"],
                                           row["branch_revision"])
            if isinstance(full, Branch) and boundary in full:
                return None
        return f"boundary {boundary!r} is not on the current branch"


def _plan_mismatch(row: RowMapping, plan: Plan) -> str | None:
    """C2: same leaf, same revision as when the plan was made."""
    if row["leaf_id"] != plan.session_leaf_id:
        return (f"the session moved while summarising (its latest node was "
                f"{plan.session_leaf_id!r}, now {row['leaf_id']!r})")
    if row["branch_revision"] != plan.branch_revision:
        return (f"branch revision is {row['branch_revision']}, the plan was made at "
                f"{plan.branch_revision}")
    return None
