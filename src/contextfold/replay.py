"""Replay a recorded session as if contextfold had managed its context.

The recorded messages are fed, in order, into an in-memory session run by the pure core:
before each user message a preflight (SPEC P1-P3), before each model request a check that
the request fits (between rounds, never inside one: A4), after each completed turn the auto
check (A1-A3). Every request the model would have received is exported and checked with the
independent provider-validity oracles, so the report proves rather than assumes that no
request was invalid, none exceeded the safe limit, and no message was dropped.

Recorded usage is kept aside and never used as an estimate baseline here: it measured the
original agent's context, not the one contextfold would have sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .core.budget import Budget, ModelCapacity
from .core.estimator import Estimate, MessageCosts, estimate_request, usage_accuracy
from .core.export import to_anthropic, to_openai
from .core.mask_planner import MASKING_SUMMARIZER
from .core.messages import Message, Node
from .core.plan import NoOp, Plan, Trigger
from .core.planner import build_checkpoint, plan_compaction
from .core.projection import Projection, project
from .core.text_estimate import Count
from .core.tree import Branch, build_branch
from .core.validity import anthropic_problems, openai_problems
from .ids import new_id
from .summarize.extractive import summarize_extractive

Summarizer = Callable[[Plan], tuple[str, str]]  # plan -> (summary text, summariser name)


@dataclass(frozen=True)
class RequestRecord:
    index: int
    node_id: str  # the recorded reply this request produced
    estimated_tokens: int
    recorded_tokens: int | None  # what the original agent's request occupied
    problems: tuple[str, ...] = ()
    over_limit: bool = False


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

    def to_json(self) -> dict[str, Any]:
        return {
            "before_request": self.before_request, "trigger": self.trigger,
            "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
            "summarized_messages": self.summarized_messages,
            "kept_messages": self.kept_messages, "kept_tokens": self.kept_tokens,
            "folded_tokens": self.folded_tokens,
            "tail_budget": self.tail_budget, "split_turn": self.split_turn,
            "clipped_results": self.clipped_results,
        }


@dataclass
class ManagedSession:
    """An in-memory, linear session driven by the pure core (replay and demo engine)."""

    capacity: ModelCapacity
    budget: Budget
    summarizer: Summarizer
    system: str | None = None
    chain: list[Node] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    summarized_ids: set[str] = field(default_factory=set)
    requests_sent: int = 0
    blocked_drafts: int = 0
    costs: MessageCosts | None = None
    # An exact tokenizer for the model, when there is one (SPEC E5); else the estimate.
    counter: Count | None = None
    # Where the part the model needs begins: the latest checkpoint's first kept node (or the
    # checkpoint itself when nothing was kept raw), as the store's O(tail) load does.
    load_from: int = 0

    def __post_init__(self) -> None:
        # Stored nodes never change: estimate each once, whatever the number of requests.
        self.costs = self.costs or MessageCosts(self.capacity, counter=self.counter)

    def branch(self) -> Branch:
        """The part of the chain the model needs, oldest first: O(tail), not O(history).

        The chain is built here by appending at the leaf only, so it is valid by
        construction and needs no re-walk of parent links.
        """
        return Branch(nodes=tuple(self.chain[self.load_from:]), complete=self.load_from == 0,
                      revision=len(self.chain))

    def projection(self) -> Projection:
        return project(self.branch())

    def append(self, message: Message, node_id: str) -> Node:
        parent = self.chain[-1].id if self.chain else None
        node = Node(id=node_id, parent_id=parent, payload=message)
        self.chain.append(node)
        return node

    def estimate(self, pending: Sequence[Message] = (),
                 projection: Projection | None = None) -> Estimate:
        """The next request's estimate; `projection` when the caller has it already."""
        return estimate_request(projection or self.projection(), self.capacity,
                                system=self.system, pending=pending, costs=self.costs,
                                counter=self.counter)

    def compact(self, trigger: Trigger, pending: Sequence[Message] = (),
                instructions: str | None = None) -> CompactionRecord | NoOp:
        if not self.chain:
            return NoOp("the session is empty", trigger, "empty")
        result = plan_compaction(self.branch(), self.budget, trigger, capacity=self.capacity,
                                 pending=pending, system=self.system, instructions=instructions,
                                 costs=self.costs, estimate=self.estimate(pending))
        if isinstance(result, NoOp):
            return result
        # A masking step (SPEC V2) needs no summariser: it keeps the previous summary.
        text, name = ("", MASKING_SUMMARIZER) if result.action == "mask" else \
            self.summarizer(result)
        checkpoint = build_checkpoint(result, text, summarizer=name, model=self.capacity.model)
        # Application-generated like every stored id, so a replayed tree can be saved
        # (and saved again) without colliding with an earlier one.
        node_id = new_id()
        self.chain.append(Node(id=node_id, parent_id=result.session_leaf_id, payload=checkpoint))
        self.load_from = self._position(result.first_kept_id) if result.first_kept_id else (
            len(self.chain) - 1)
        self.summarized_ids.update(n.id for n in result.newly_old)
        after = self.estimate(pending).tokens
        record = CompactionRecord(
            before_request=self.requests_sent,
            trigger=trigger,
            checkpoint_id=node_id,
            first_kept_id=result.first_kept_id,
            tokens_before=result.tokens_before,
            tokens_after=after,
            summarized_messages=len(result.newly_old),
            kept_messages=len(result.kept),
            summarizer=name,
            kept_tokens=result.kept_tokens,
            folded_tokens=result.newly_old_tokens,
            tail_budget=result.tail_budget,
            split_turn=checkpoint.turn is not None and bool(result.kept),
            clipped_results=len(result.tail_clips),
        )
        self.compactions.append(record)
        return record

    def _position(self, node_id: str) -> int:
        for i in range(len(self.chain) - 1, self.load_from - 1, -1):
            if self.chain[i].id == node_id:
                return i
        raise ValueError(f"node {node_id!r} is not in the loaded part of the chain")

    def before_user_message(self, message: Message) -> bool:
        """A1 for the finished turn, then P1-P2 for the draft; False if it still won't fit."""
        if self.chain:
            self.compact("auto")
        self.compact("preflight", pending=[message])
        return self.estimate([message]).tokens <= self.budget.safe_input_limit

    def before_request(self) -> tuple[Projection, int]:
        """Make the next request fit (compacting between rounds if needed); return it."""
        # One projection and one estimate when nothing changes (the common case): this
        # runs before every model call.
        projection = self.projection()
        tokens = self.estimate(projection=projection).tokens
        if tokens > self.budget.safe_input_limit:
            self.compact("preflight")
            projection = self.projection()
            tokens = self.estimate(projection=projection).tokens
        return projection, tokens

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


@dataclass
class ReplayReport:
    model: str
    safe_input_limit: int
    context_window: int
    requests: list[RequestRecord]
    compactions: list[CompactionRecord]
    dropped_messages: int
    blocked_drafts: int
    chain: list[Node]
    estimate: dict[str, Any] | None = None
    # Tokens every request carries besides the messages: the agent's system prompt and tool
    # definitions, which a recorded session does not contain (0 when unknown).
    overhead: int = 0
    overhead_source: str = "none"
    started_from_checkpoint: bool = False

    @property
    def invalid_tool_sequences(self) -> int:
        return sum(1 for r in self.requests if r.problems)

    @property
    def max_projected_tokens(self) -> int:
        return max((r.estimated_tokens for r in self.requests), default=0)

    def to_json(self) -> dict[str, Any]:
        """The `contextfold replay --json` contract (see README)."""
        return {
            "model": self.model,
            "requests": len(self.requests),
            "compactions": len(self.compactions),
            "max_projected_tokens": self.max_projected_tokens,
            "safe_input_limit": self.safe_input_limit,
            "invalid_tool_sequences": self.invalid_tool_sequences,
            "dropped_messages": self.dropped_messages,
            "over_limit_requests": sum(1 for r in self.requests if r.over_limit),
            "blocked_drafts": self.blocked_drafts,
            "estimate": self.estimate,
            "overhead_tokens": self.overhead,
            "overhead_source": self.overhead_source,
            "started_from_checkpoint": self.started_from_checkpoint,
            "invalid_requests": [{"request": r.index, "reply_node_id": r.node_id,
                                  "problems": list(r.problems)}
                                 for r in self.requests if r.problems],
            # Per compaction: what was folded and how many raw messages / tokens stayed.
            "compaction_log": [c.to_json() for c in self.compactions],
        }


def request_problems(projection: Projection, system: str | None) -> tuple[str, ...]:
    """What either provider would reject in the request built from `projection`."""
    problems = openai_problems(to_openai(projection, system=system).messages)
    problems += anthropic_problems(to_anthropic(projection, system=system).messages)
    return tuple(problems)


def replay_messages(
    messages: Sequence[tuple[str, Message]],
    capacity: ModelCapacity,
    budget: Budget,
    summarizer: Summarizer,
    *,
    system: str | None = None,
    start: Node | None = None,
    overhead: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay `(node_id, message)` pairs, oldest first, under contextfold's management.

    `start`: a recorded checkpoint the session begins from (a file that starts after a
    compaction): its summary is the first thing the model sees. `overhead`: tokens every
    request carries besides the messages (the agent's system prompt and tools); compaction
    leaves room for them and each request's size includes them. `progress(done, total)` is
    called as the messages are fed.
    """
    session = ManagedSession(capacity, budget_after_overhead(budget, overhead), summarizer,
                             system=system)
    if start is not None:
        session.chain.append(start.model_copy(update={"parent_id": None}))
    requests: list[RequestRecord] = []
    total = len(messages)
    for done, (node_id, recorded) in enumerate(messages, 1):
        if progress is not None:
            progress(done, total)
        # Recorded usage measured the original agent's context, not this one (module doc).
        message = recorded.model_copy(update={"usage": None}) if recorded.usage else recorded
        record = session.step(node_id, message)
        if record is not None:
            recorded_tokens = recorded.usage.prompt if recorded.usage else None
            requests.append(replace(record, recorded_tokens=recorded_tokens,
                                    estimated_tokens=record.estimated_tokens + overhead))
    if session.chain:
        session.compact("auto")
    return ReplayReport(
        model=capacity.model,
        safe_input_limit=budget.safe_input_limit,
        context_window=budget.context_window,
        requests=requests,
        compactions=session.compactions,
        dropped_messages=session.dropped_messages(),
        blocked_drafts=session.blocked_drafts,
        chain=session.chain,
        overhead=overhead,
        started_from_checkpoint=start is not None,
    )


def budget_after_overhead(budget: Budget, overhead: int) -> Budget:
    """`budget` for the messages alone when every request also carries `overhead` tokens."""
    if overhead <= 0:
        return budget
    safe = budget.safe_input_limit - overhead
    if safe <= budget.summary_budget:  # not even a checkpoint summary would fit
        raise ValueError(f"a fixed overhead of {overhead:,} tokens leaves no room for the "
                         f"session in a safe input limit of {budget.safe_input_limit:,}")
    return budget.model_copy(update={
        "safe_input_limit": safe,
        "auto_threshold": int(budget.auto_threshold * safe / budget.safe_input_limit),
        # After a compaction the request is summary + tail: half of what the summary leaves
        # goes to the raw tail, half stays free so the next turns fit before compacting again
        # (a tail of 0 would leave a long tool loop nothing raw: K6).
        "tail_budget": max(0, min(budget.tail_budget, (safe - budget.summary_budget) // 2)),
    })


def recorded_start(nodes: Sequence[Node], leaf_id: str) -> Node | None:
    """The recorded checkpoint a session file begins with, if any (a transcript that starts
    after a compaction: its messages continue from that summary)."""
    branch = build_branch(nodes, leaf_id)
    chain = branch.nodes if isinstance(branch, Branch) else branch.readable
    if chain and chain[0].checkpoint is not None:
        return chain[0]
    return None


def active_messages(nodes: Sequence[Node], leaf_id: str) -> list[tuple[str, Message]]:
    """The messages on the branch ending at `leaf_id` (recorded checkpoints left out)."""
    branch = build_branch(nodes, leaf_id)
    chain = branch.nodes if isinstance(branch, Branch) else branch.readable
    return [(n.id, n.payload) for n in chain if isinstance(n.payload, Message)]


def extractive(plan: Plan) -> tuple[str, str]:
    """The offline summariser a replay runs with (no model call, the same on every machine)."""
    return summarize_extractive(plan), "extractive"


@dataclass(frozen=True)
class RecordedSession:
    """What a replay takes from an imported session file."""

    messages: list[tuple[str, Message]]  # the active branch's messages, oldest first
    start: Node | None  # the recorded checkpoint the file begins after, if any
    model: str | None  # the model of the latest recorded reply, if it says


def recorded_session(nodes: Sequence[Node], leaf_id: str) -> RecordedSession:
    """The messages, starting checkpoint and recorded model of the branch ending at `leaf_id`
    (the model resolver's `recorded_model` of the branch, the rule every face reads it by)."""
    from .core.resolver import recorded_model

    return RecordedSession(active_messages(nodes, leaf_id), recorded_start(nodes, leaf_id),
                           recorded_model(build_branch(nodes, leaf_id)))


def overhead_from_usage(messages: Sequence[tuple[str, Message]], start: Node | None,
                        capacity: ModelCapacity) -> int | None:
    """The agent's fixed overhead: the first recorded request's size minus our estimate of
    the messages it carried (what remains is the system prompt and tool definitions)."""
    nodes: list[Node] = [] if start is None else [start.model_copy(update={"parent_id": None})]
    for node_id, message in messages:
        if message.role == "assistant" and message.usage is not None \
                and message.usage.prompt > 0:
            estimate = estimate_request(project(Branch(nodes=tuple(nodes))), capacity).tokens
            return max(0, message.usage.prompt - estimate)
        parent = nodes[-1].id if nodes else None
        nodes.append(Node(id=node_id, parent_id=parent, payload=message))
    return None


def replay_overhead(session: RecordedSession, capacity: ModelCapacity, budget: Budget,
                    given: int | None, given_as: str) -> tuple[int, str]:
    """The fixed overhead every request carries and where it comes from: `given` (reported
    as `given_as`, the option that set it), else the first recorded usage, else 0 ("none").

    ValueError when it leaves no room for the session in `budget` (checked here, before a
    long replay starts, so the caller can word the error for its own options)."""
    fixed, source = given, given_as
    if fixed is None:
        fixed = overhead_from_usage(session.messages, session.start, capacity)
        source = "first recorded usage" if fixed is not None else "none"
    budget_after_overhead(budget, fixed or 0)
    return fixed or 0, source


def replay_recorded(session: RecordedSession, capacity: ModelCapacity, budget: Budget,
                    overhead: tuple[int, str] = (0, "none"), *,
                    progress: Callable[[int, int], None] | None = None) -> ReplayReport:
    """Replay a recorded session offline (extractive summaries), the report of `contextfold
    replay` and `POST /v1/replay`: `overhead` is `replay_overhead`'s (tokens, source), and
    the report also checks the estimator against the recorded usage."""
    fixed, source = overhead
    report = replay_messages(session.messages, capacity, budget, extractive,
                             start=session.start, overhead=fixed, progress=progress)
    report.overhead_source = source
    report.estimate = usage_accuracy([m for _, m in session.messages], capacity)
    return report


def replay_series(report: ReplayReport) -> dict[str, Any]:
    """The replay chart as data: request size per request (ours and the recorded agent's),
    the limits, and each compaction (what `replay --plot` draws)."""
    return {
        "requests": [{"request": r.index, "estimated_tokens": r.estimated_tokens,
                      "recorded_tokens": r.recorded_tokens} for r in report.requests],
        "safe_input_limit": report.safe_input_limit,
        "context_window": report.context_window,
        "compactions": [{"before_request": c.before_request, "kept_tokens": c.kept_tokens,
                         "tail_budget": c.tail_budget, "tokens_before": c.tokens_before,
                         "tokens_after": c.tokens_after} for c in report.compactions],
    }
