"""`ManagedSession`: replay's shape of a session, messages read from a file and fed in order into
the engine every face runs (over `store.memory`), with a record of each request the model
would have received and of each compaction (what the replay report is made of).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ._sync import WouldWait, run_now
from .core.models.budget import Budget, ModelCapacity
from .core.planning.plan import NoOp, Trigger
from .core.render.export import to_anthropic, to_openai
from .core.render.validity import anthropic_problems, openai_problems
from .core.report.explain import CompactionExplanation
from .core.sizing.estimator import Estimate, MessageCosts
from .core.values.messages import Message, Node
from .core.values.tree import Branch
from .core.view.projection import Projection
from .runtime.auto_recall import AutoRecall
from .runtime.driver import session_sizer
from .runtime.errors import RequestTooLargeError
from .runtime.fitting import SessionFit, fit_request
from .runtime.summarizers import guarded
from .store.memory import MemoryStore

if TYPE_CHECKING:
    pass


T = TypeVar("T")


@dataclass(frozen=True)
class RequestRecord:
    index: int
    node_id: str  # the recorded reply this request produced
    estimated_tokens: int
    recorded_tokens: int | None  # what the original agent's request occupied
    problems: tuple[str, ...] = ()
    over_limit: bool = False
    recall_tokens: int = 0  # SPEC L5: the automatic recall block it carried (0: none)
    # The request itself, for its modelled cost (SPEC Q4); not part of the report.
    projection: Projection | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class CompactionRecord:
    before_request: int
    trigger: Trigger
    checkpoint_id: str
    first_kept_id: str | None
    tokens_before: int
    tokens_after: int
    summarized_messages: int
    kept_messages: int
    summarizer: str
    kept_tokens: int = 0  # raw tokens the projection still holds after it (clipped as sent)
    folded_tokens: int = 0  # raw tokens folded into the summary by it
    tail_budget: int = 0  # the tail budget the boundary was chosen for
    split_turn: bool = False  # K6: the boundary is a tool round inside the current turn
    clipped_results: int = 0  # K6: kept messages whose tool results are clipped
    # Issue 40: why it ran, what it was expected to save and (after the replay) what it did.
    explanation: CompactionExplanation | None = None
    # SPEC Q3: the share of a same-model summarising request's input the cache would serve
    # (`replay.same_model_summaries`; None: no request before it to start from).
    summarizer_read_share: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "before_request": self.before_request, "trigger": self.trigger,
            "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
            "summarized_messages": self.summarized_messages,
            "kept_messages": self.kept_messages, "kept_tokens": self.kept_tokens,
            "folded_tokens": self.folded_tokens,
            "tail_budget": self.tail_budget, "split_turn": self.split_turn,
            "clipped_results": self.clipped_results,
            "summarizer_cache_read_share": None if self.summarizer_read_share is None
            else round(self.summarizer_read_share, 4),
            "explanation": None if self.explanation is None else self.explanation.to_json(),
        }


class ManagedSession:
    """A recorded session fed into contextfold's own engine (replay, the demo, benchmarks).

    The engine is the one every face runs: the sizing driver (`runtime.fitting`) and the
    compaction path (`runtime.compaction`) over an in-memory store (`store.memory`), with
    the summariser guarded as everywhere (None: the offline one). The session is linear:
    messages are appended at the leaf, in the order they were recorded. Its methods are
    synchronous: with a summariser that does not wait (the offline one, or one answering
    in-process) every step finishes at once; one that waits for a network raises.

    `nodes`: a chain to start from (oldest first, checkpoints included), e.g. the history
    of another `ManagedSession` replayed on a smaller model.
    """

    def __init__(self, capacity: ModelCapacity, budget: Budget, summarizer: Any = None, *,
                 system: str | None = None, nodes: Sequence[Node] = ()) -> None:
        self.capacity = capacity
        self.budget = budget
        self.system = system
        self.store = MemoryStore()
        if nodes:
            info = _now(self.store.import_tree(nodes, nodes[-1].id, title="replay"))
        else:
            info = _now(self.store.create_session(title="replay"))
        self.session_id = info.id
        summarize = guarded(summarizer, timeout=None)
        # SPEC Q2/Q3: the summariser prices the cost trigger's compactions (the offline one
        # is free; one reading the session's prefix pays cache reads).
        self.sizer = session_sizer(capacity, budget=budget, system=system,
                                   summarize=summarize)
        self.fit = SessionFit(self.store, self.session_id, self.sizer, summarize,
                              _now(self.store.load_branch(self.session_id)))
        # SPEC L5 as the product applies it: the memory store searches like the SQL one.
        self.auto_recall = AutoRecall(self.store)
        self.fit.recall = self.auto_recall  # SPEC Q5: full blocks compact; Q3 prefix
        self.compactions: list[CompactionRecord] = []
        self.summarized_ids: set[str] = set()
        self.requests_sent = 0
        self.blocked_drafts = 0
        self._recorded = 0  # outcomes of `fit` already turned into records

    @property
    def costs(self) -> MessageCosts:
        """The one memo of message estimates for this model."""
        return self.sizer.costs

    @property
    def chain(self) -> list[Node]:
        """Every node of the session, oldest first (checkpoints included)."""
        return list(_now(self.store.load_full_branch(self.session_id)).nodes)

    def branch(self) -> Branch:
        """The part of the chain the model needs, oldest first: O(tail), not O(history)."""
        return self.fit.branch

    def projection(self) -> Projection:
        return self.fit.projection()

    def append(self, message: Message, node_id: str) -> Node:
        node = _now(self.store.append(self.session_id, message, node_id=node_id))
        held = self.fit.branch
        if held.leaf_id == node.parent_id and held.revision + 1 == \
                _now(self.store.get_session(self.session_id)).branch_revision:
            # The store's branch is the held one and this message (a message never moves
            # the part loaded, SPEC T2): grown from it, its projection extends the held
            # one's instead of being derived from every node again (issue 40).
            self.fit.branch = held.grown((node,))
        else:
            _now(self.fit.reload())
        return node

    def estimate(self, pending: Sequence[Message] = (),
                 projection: Projection | None = None) -> Estimate:
        """The next request's estimate; `projection` when the caller has it already."""
        return self.sizer.estimate(projection or self.projection(), pending)

    def compact(self, trigger: Trigger, pending: Sequence[Message] = (),
                instructions: str | None = None) -> CompactionRecord | NoOp:
        """One compaction through the one path (a no-op says why)."""
        if not self.fit.branch.nodes:
            return NoOp("the session is empty", trigger, "empty")
        outcome = _now(self.fit.compact(trigger, pending, instructions=instructions))
        records = self._record()
        if records:
            return records[-1]
        return NoOp(outcome.reason or outcome.status, trigger, outcome.code or outcome.status)

    def before_user_message(self, message: Message) -> bool:
        """A1 for the finished turn, then P1-P3 for the draft; False if it cannot fit."""
        try:
            if self.fit.branch.nodes:
                _now(self.fit.auto())
            _now(fit_request(self.fit, (message,), draft=message))
            return True
        except RequestTooLargeError:
            return False
        finally:
            self._record()

    def before_request(self) -> tuple[Projection, int]:
        """Make the next request fit (compacting between rounds if needed); return it with
        its automatic recall block (SPEC L5, in the room the fitted request leaves) and its
        estimate, the block counted."""
        with contextlib.suppress(RequestTooLargeError):  # recorded as over the limit
            _now(fit_request(self.fit))
        self._record()
        projection = _now(self.auto_recall.apply(self.session_id, self.projection(),
                                                 self.sizer))
        return projection, self.estimate(projection=projection).tokens

    def step(self, node_id: str, message: Message) -> RequestRecord | None:
        """Feed one recorded message; for a reply, return the request that produced it."""
        record = None
        if message.role == "user" and not message.tool_results:
            if not self.before_user_message(message):
                self.blocked_drafts += 1  # P3: a real user would be asked to shorten it
        elif message.role == "assistant":
            projection, tokens = self.before_request()
            record = RequestRecord(
                index=self.requests_sent,
                node_id=node_id,
                estimated_tokens=tokens,
                recorded_tokens=None,
                problems=request_problems(projection, self.system),
                over_limit=tokens > self.budget.safe_input_limit,
                recall_tokens=projection.recall_tokens,
                projection=projection,
            )
            self.requests_sent += 1
        self.append(message, node_id)
        return record

    def dropped_messages(self) -> int:
        """Message nodes neither folded into a checkpoint nor projected (must be 0)."""
        projected = {n.id for n in self.projection().messages}
        return sum(1 for n in self.chain
                   if n.message is not None and n.id not in projected
                   and n.id not in self.summarized_ids)

    def _record(self) -> list[CompactionRecord]:
        """The compactions the engine committed since the last call, as records."""
        new = self.fit.outcomes[self._recorded:]
        self._recorded = len(self.fit.outcomes)
        records = []
        for o in new:
            if o.status != "compacted" or o.checkpoint_id is None:
                continue
            self.summarized_ids.update(o.folded_ids)
            records.append(CompactionRecord(
                before_request=self.requests_sent, trigger=o.trigger or "manual",
                checkpoint_id=o.checkpoint_id, first_kept_id=o.first_kept_id,
                tokens_before=o.tokens_before or 0, tokens_after=o.tokens_after or 0,
                summarized_messages=o.summarized_messages, kept_messages=o.kept_messages,
                summarizer=o.summarizer or "", kept_tokens=o.kept_tokens,
                folded_tokens=o.folded_tokens, tail_budget=o.tail_budget,
                split_turn=o.split_turn, clipped_results=o.clipped_results,
                explanation=o.explanation))
        self.compactions += records
        return records


def _now(work: Awaitable[T]) -> T:
    """Run one engine step over the in-memory store (see `ManagedSession`)."""
    try:
        return run_now(work)
    except WouldWait as exc:
        raise RuntimeError(
            "a replay runs synchronously, and its summariser waited for something "
            f"({exc}): use the offline summariser or one that answers in-process") from None


def request_problems(projection: Projection, system: str | None) -> tuple[str, ...]:
    """What either provider would reject in the request built from `projection`."""
    problems = openai_problems(to_openai(projection, system=system).messages)
    problems += anthropic_problems(to_anthropic(projection, system=system).messages)
    return tuple(problems)
