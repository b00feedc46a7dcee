"""Replay a recorded session as if contextfold had managed its context.

The recorded messages are fed, in order, into an in-memory session run by the engine every
face runs (the sizing driver and the one compaction path, over `store.memory`): before each
user message a preflight (SPEC P1-P3, P5), before each model request a check that the
request fits (between rounds, never inside one: A4), after each completed turn the auto
check (A1-A3). Every request the model would have received is exported and checked with the
independent provider-validity oracles, so the report proves rather than assumes that no
request was invalid, none exceeded the safe limit, and no message was dropped.

Recorded usage is kept aside and never used as an estimate baseline here: it measured the
original agent's context, not the one contextfold would have sent.

The session a replay drives, and its records of requests and compactions, are in
`replay_session`; this module reads a recording, runs it through that session and reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .core.models.budget import Budget, ModelCapacity
from .core.money.costs import (
    Fold,
    PricedRequest,
    modelled_cost,
    projection_blocks,
    realised_savings,
    session_cost,
)
from .core.money.prefix_breaks import count_prefix_breaks
from .core.money.prefix_summary import prefix_summary_costs
from .core.money.prices import Block, Cost, total
from .core.sizing.estimator import estimate_request, usage_accuracy
from .core.sizing.fit import OverheadTooLargeError, budget_after_overhead
from .core.sizing.resolver import user_prices
from .core.values.messages import Message, Node
from .core.values.tree import Branch, build_branch
from .core.view.projection import project
from .replay_session import (  # noqa: F401  (re-exported; moved out in issue 39)
    CompactionRecord,
    ManagedSession,
    RequestRecord,
    T,
    _now,
    request_problems,
)

if TYPE_CHECKING:
    from .core.sizing.resolver import ResolvedModel



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
    # SPEC Q4: the recorded agent's bill beside contextfold's modelled one (`replay_cost`).
    cost: dict[str, Any] | None = None

    @property
    def invalid_tool_sequences(self) -> int:
        return sum(1 for r in self.requests if r.problems)

    @property
    def recall_requests(self) -> int:
        """Requests that carried an automatic recall block (SPEC L5)."""
        return sum(1 for r in self.requests if r.recall_tokens)

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
            "recall_requests": self.recall_requests,
            "estimate": self.estimate,
            "overhead_tokens": self.overhead,
            "overhead_source": self.overhead_source,
            "started_from_checkpoint": self.started_from_checkpoint,
            "invalid_requests": [{"request": r.index, "reply_node_id": r.node_id,
                                  "problems": list(r.problems)}
                                 for r in self.requests if r.problems],
            # Per compaction: what was folded and how many raw messages / tokens stayed.
            "compaction_log": [c.to_json() for c in self.compactions],
            "cost": self.cost,
        }


def replay_messages(
    messages: Sequence[tuple[str, Message]],
    capacity: ModelCapacity,
    budget: Budget,
    summarizer: Any = None,
    *,
    system: str | None = None,
    start: Node | None = None,
    overhead: int = 0,
    progress: Callable[[int, int], None] | None = None,
    times: Mapping[str, float] | None = None,
) -> ReplayReport:
    """Replay `(node_id, message)` pairs, oldest first, under contextfold's management.

    `start`: a recorded checkpoint the session begins from (a file that starts after a
    compaction): its summary is the first thing the model sees. `overhead`: tokens every
    request carries besides the messages (the agent's system prompt and tools); compaction
    leaves room for them and each request's size includes them. `progress(done, total)` is
    called as the messages are fed. `times`: when each message was recorded (seconds, by
    node id), for the prompt cache's time to live in the cost report.
    """
    session = ManagedSession(capacity, budget_after_overhead(budget, overhead), summarizer,
                             system=system,
                             nodes=() if start is None else
                             (start.model_copy(update={"parent_id": None}),))
    requests: list[RequestRecord] = []
    billed: list[tuple[list[Block], int, float]] = []  # SPEC Q4: each request as sent
    total = len(messages)
    for done, (node_id, recorded) in enumerate(messages, 1):
        if progress is not None:
            progress(done, total)
        # Recorded usage measured the original agent's context, not this one (module doc).
        message = recorded.model_copy(update={"usage": None}) if recorded.usage else recorded
        record = session.step(node_id, message)
        if record is not None:
            recorded_tokens = recorded.usage.prompt if recorded.usage else None
            if record.projection is not None:
                blocks = projection_blocks(record.projection, session.costs, fixed=overhead)
                output = recorded.usage.output if recorded.usage else \
                    session.costs.measure(recorded)
                billed.append((blocks, output, (times or {}).get(node_id, float(done))))
            requests.append(replace(record, recorded_tokens=recorded_tokens,
                                    estimated_tokens=record.estimated_tokens + overhead,
                                    projection=None))
    if session.fit.branch.nodes:
        # A1/Q2 after the last turn, as after every other: the automatic check decides (a
        # compaction no trigger asked for would show as a loss nobody can explain).
        _now(session.fit.auto())
        session._record()
    compactions = realised(session.compactions, billed, capacity.model)
    summaries = same_model_summaries(session, compactions, billed, budget,
                                     carried=start is not None)
    compactions = [replace(c, summarizer_read_share=None if s is None else s.cache_read_share)
                   for c, s in zip(compactions, summaries, strict=True)]
    cost = replay_cost(messages, billed, capacity.model, times or {})
    cost["same_model_summarizer"] = summaries_json(summaries)
    return ReplayReport(
        model=capacity.model,
        safe_input_limit=budget.safe_input_limit,
        context_window=budget.context_window,
        requests=requests,
        compactions=compactions,
        dropped_messages=session.dropped_messages(),
        blocked_drafts=session.blocked_drafts,
        chain=session.chain,
        overhead=overhead,
        started_from_checkpoint=start is not None,
        cost=cost,
    )


def same_model_summaries(session: ManagedSession, compactions: Sequence[CompactionRecord],
                         billed: Sequence[tuple[list[Block], int, float]], budget: Budget, *,
                         carried: bool) -> list[Cost | None]:
    """SPEC Q3: what a summariser that is the session's model would have read from the
    prompt cache at each compaction (`core.money.prefix_summary`); the replay's own
    summaries are offline. Its instruction is the one `LlmSummarizer.prefix_request` sends,
    written for the checkpoint the compaction made (`carried`: the session started from a
    recorded one), and as there none for a preflight compaction (its plan's request is over
    the limit) or one whose request, instruction and answer would not fit the window."""
    from .core.planning.plan import Profile
    from .summarize.llm import prefix_fits
    from .summarize.prompts import build_prefix_summary_prompt

    profiles: dict[str, Profile] = {n.id: n.checkpoint.profile for n in session.chain
                                    if n.checkpoint is not None}
    instructions: list[int | None] = []
    for i, c in enumerate(compactions):
        tokens = session.costs.text_tokens(build_prefix_summary_prompt(
            profile=profiles.get(c.checkpoint_id, "research"), kept=c.kept_messages,
            carries_summary=carried or i > 0, max_tokens=budget.summary_budget,
            split_turn=c.split_turn))
        fits = prefix_fits(c.tokens_before, tokens, budget.summary_budget,
                           budget.context_window)
        instructions.append(tokens if c.trigger != "preflight" and fits else None)
    model = session.capacity.model
    return prefix_summary_costs(billed, [c.before_request for c in compactions], instructions,
                                user_prices().lookup(model), model)


def summaries_json(summaries: Sequence[Cost | None]) -> dict[str, Any]:
    """The `cost.same_model_summarizer` object of `replay --json`: the would-be summarising
    requests' input tokens by kind (their output is not modelled) and the share read, over
    the compactions whose request would start with the session's prefix (the others:
    `not_prefixed`)."""
    sent = total(s for s in summaries if s is not None)
    share = sent.cache_read_share
    return {"requests": sent.requests, "not_prefixed": len(summaries) - sent.requests,
            "input_tokens": sent.input_tokens, "cached_tokens": sent.cached_tokens,
            "cache_write_tokens": sent.cache_write_tokens,
            "input_usd": None if sent.usd is None else round(sent.usd, 6),
            "cache_read_share": None if share is None else round(share, 4)}


def realised(compactions: Sequence[CompactionRecord],
             billed: Sequence[tuple[list[Block], int, float]], model: str
             ) -> list[CompactionRecord]:
    """Each compaction with its realised saving (issue 40, `core.money.costs.realised_savings`)
    over the modelled requests after it: each request's prompt as sent, at `model`'s prices
    (the offline summaries cost nothing)."""
    price = user_prices().lookup(model)
    requests = [PricedRequest(price, model, sum(b.tokens for b in blocks), output, at)
                for blocks, output, at in billed]
    folds = [Fold(c.before_request, c.tokens_before - c.tokens_after)
             for c in compactions]
    return [replace(c, explanation=c.explanation.with_realised(saving))
            if c.explanation is not None else c
            for c, saving in zip(compactions, realised_savings(requests, folds), strict=True)]


def replay_cost(messages: Sequence[tuple[str, Message]],
                billed: Sequence[tuple[list[Block], int, float]], model: str,
                times: Mapping[str, float]) -> dict[str, Any]:
    """SPEC Q4: what the recorded agent was billed (its replies' reported usage, priced at
    their models' rates), the same requests through the provider's modelled prompt cache, and
    what contextfold's requests would have cost through that cache at the replay model's
    prices (offline summaries cost nothing)."""
    prices = user_prices()
    nodes = [Node(id=node_id, payload=message,
                  created_at=datetime.fromtimestamp(times.get(node_id, 0.0), UTC))
             for node_id, message in messages]
    recorded = session_cost(nodes, prices, model=model)
    ours = modelled_cost(billed, prices.lookup(model), model)
    # The recorded requests through the same modelled cache as ours: like for like, since a
    # real cache also misses for reasons no model knows (evictions, changed prefixes).
    return {"currency": "USD", "model": model,
            "recorded": {**recorded.requests.to_json(), "model": recorded.model},
            "recorded_modelled": recorded.full_history.to_json(),
            "contextfold": ours.to_json(),
            # SPEC Q5: requests that did not start with the previous one, and why.
            "prefix_breaks": count_prefix_breaks(b for b, _o, _t in billed).to_json()}


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


@dataclass(frozen=True)
class RecordedSession:
    """What a replay takes from an imported session file."""

    messages: list[tuple[str, Message]]  # the active branch's messages, oldest first
    start: Node | None  # the recorded checkpoint the file begins after, if any
    model: str | None  # the model of the latest recorded reply, if it says
    times: dict[str, float] = field(default_factory=dict)  # node id -> recorded at (s)


def recorded_session(nodes: Sequence[Node], leaf_id: str) -> RecordedSession:
    """The messages, starting checkpoint and recorded model of the branch ending at `leaf_id`
    (the model resolver's `recorded_model` of the branch, the rule every face reads it by)."""
    from .core.sizing.resolver import recorded_model

    return RecordedSession(active_messages(nodes, leaf_id), recorded_start(nodes, leaf_id),
                           recorded_model(build_branch(nodes, leaf_id)),
                           {n.id: n.created_at.timestamp() for n in nodes})


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
                    given: int | None, given_as: str, resolved: ResolvedModel | None = None
                    ) -> tuple[int, str]:
    """The fixed overhead every request carries and where it comes from: `given` (reported
    as `given_as`, the option that set it), else the first recorded usage, else 0 ("none").

    `OverheadTooLargeError` (a ValueError) when it leaves no room for the session in
    `budget` (checked here, before a long replay starts, so the caller can word the error for
    its own options); given the `resolved` model, it names the smallest window that works:
    the one whose checkpoint and recent tail fit beside the overhead (core.resolver)."""
    fixed, source = given, given_as
    if fixed is None:
        fixed = overhead_from_usage(session.messages, session.start, capacity)
        source = "first recorded usage" if fixed is not None else "none"
    try:
        budget_after_overhead(budget, fixed or 0)
    except OverheadTooLargeError as exc:
        if resolved is not None:
            from .core.sizing.resolver import smallest_window
            from .summarize.extractive import smallest_summary_tokens

            # A replay compacts a whole recorded history at once: the guaranteed floor.
            exc.smallest = smallest_window(resolved, smallest_summary_tokens(guaranteed=True),
                                           fixed=exc.overhead)
            exc.args = (exc.explain(),)
        raise
    return fixed or 0, source


def replay_recorded(session: RecordedSession, capacity: ModelCapacity, budget: Budget,
                    overhead: tuple[int, str] = (0, "none"), *,
                    progress: Callable[[int, int], None] | None = None) -> ReplayReport:
    """Replay a recorded session offline (extractive summaries), the report of `contextfold
    replay` and `POST /v1/replay`: `overhead` is `replay_overhead`'s (tokens, source), and
    the report also checks the estimator against the recorded usage."""
    fixed, source = overhead
    report = replay_messages(session.messages, capacity, budget, None,
                             start=session.start, overhead=fixed, progress=progress,
                             times=session.times)
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
