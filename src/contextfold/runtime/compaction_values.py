"""What one compaction is asked and what it answers: `CompactionRequest` (the session, the model
it is sized for, the trigger, the summariser and what the next request holds besides the
branch) and `CompactionOutcome` (what it did; its `to_json` is the `compact --json` contract).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..core.models.budget import Budget, ModelCapacity
from ..core.money.costs import summary_cost
from ..core.money.prices import Cost
from ..core.planning.plan import NoOp, Trigger
from ..core.report.explain import CompactionExplanation
from ..core.sizing.estimator import MessageCosts
from ..core.sizing.resolver import ResolvedModel, user_prices
from ..core.values.messages import Message, Usage
from ..core.values.tree import Branch
from ..core.view.projection import RecallBlock
from ..store.protocol import CompactionStore
from .summarizers import Summarize, offline_summarize

if TYPE_CHECKING:
    from .compaction import PreviewBase  # an annotation only: compaction imports this module
    from .sizing import Sizer

# Receives one line per step of a long compaction (the CLI prints them on stderr).
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CompactionOutcome:
    """What one compaction did; `to_json` is the `contextfold compact --json` contract.

    `tokens_before` / `tokens_after`: the whole next request (system prompt, tools, pins,
    drafts included) before the compaction and as measured with the checkpoint it wrote,
    so they compare with the context gauge. `note`: a manual compaction committed although
    the request did not get smaller (the checkpoint outweighs what it folded).
    """

    status: Literal["compacted", "noop", "stale", "preview"]
    reason: str | None = None
    code: str | None = None
    checkpoint_id: str | None = None
    first_kept_id: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    summarized_messages: int = 0
    kept_messages: int = 0
    kept_tokens: int = 0  # raw tokens still projected after it (SPEC K6: a split turn's rounds)
    summarizer: str | None = None
    trigger: Trigger | None = None
    fallback_reason: str | None = None  # why the offline summary stands in, when it does
    note: str | None = None
    # SPEC S6/S7: the checkpoint's retention and attribution check (`summarize.retention`)
    check: dict[str, Any] | None = None
    # SPEC M7: a preview's summary (editable), the checkpoint text the model would see, and
    # the branch it was made on (commit an edit with `base=`); `edited`: the user wrote it.
    summary: str | None = None
    checkpoint_text: str | None = None
    base: str | None = None
    edited: bool = False
    # What the plan decided, for replay's compaction log (not in the JSON contract):
    folded_tokens: int = 0  # raw tokens folded into the summary
    tail_budget: int = 0  # the tail budget the boundary was chosen for
    split_turn: bool = False  # K6: the boundary is a tool round inside the current turn
    clipped_results: int = 0  # K6: kept messages whose tool results are clipped
    folded_ids: tuple[str, ...] = ()  # the messages it folded into the summary (K5)
    summarizer_usage: Usage | None = None  # SPEC Q4: what its summarising requests used
    # Issue 40: why it ran and what it is expected to save (`core.report.explain`); in the JSON.
    explanation: CompactionExplanation | None = None

    def cost(self) -> Cost:
        """What this compaction's summarising requests cost (SPEC Q4, `core.money.costs`' rule)."""
        return summary_cost(self.summarizer, self.summarizer_usage, user_prices())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["explanation"] = None if self.explanation is None else self.explanation.to_json()
        for internal in ("code", "trigger", "folded_tokens", "tail_budget", "split_turn",
                         "clipped_results", "folded_ids", "summarizer_usage"):
            data.pop(internal)
        if self.status == "compacted":
            data["cost"] = {"currency": "USD", "summarizer": self.cost().to_json()}
        for optional in ("fallback_reason", "note", "check", "summary", "checkpoint_text",
                         "base", "explanation"):
            if data[optional] is None:
                data.pop(optional)
        if not data["edited"]:
            data.pop("edited")
        return data


def noop_outcome(noop: NoOp) -> CompactionOutcome:
    return CompactionOutcome(status="noop", reason=noop.reason, code=noop.code,
                             trigger=noop.trigger)


@dataclass(frozen=True)
class CompactionRequest:
    """One compaction asked of `compact_session`: which session, for which model, why, and
    with what summariser. Every face builds one (`for_model` from a `ResolvedModel`); the
    model is decided before, never inside the compaction.

    store, session_id  the session (a `CompactionStore`: the SQL store, or replay's memory one)
    capacity, budget   the model it is sized for
    trigger            manual | auto | preflight
    summarize          the summariser (the offline one by default; faces pass it guarded)
    instructions       the user's focus for a manual compaction (SPEC M5)
    pending, system, tools
                       what the next request holds besides the branch: messages not yet
                       stored, the system prompt, the tools (as request JSON); they count in
                       the estimate
    summarizer_budget  the summariser's own model's budget, when it is another model
    estimate_tokens    the size of the next request when a provider said it (SPEC P4): it
                       overrides a smaller estimate
    costs              the caller's memo of message estimates for this model (`Conversation`
                       keeps one); otherwise one is made, so every message is estimated once
    progress           receives a line per step (loading, planning, each chunk, commit)
    branch             the branch as the caller holds it; used instead of reading it again
                       when the session's leaf and revision are still the ones it was read at
    preview, summary_text, base
                       SPEC M7: return what would be committed without committing; commit
                       this text (the user's) instead of a summariser's; refuse a commit on a
                       branch that moved since the preview (`StalePreviewError`)
    recalled           SPEC Q3 with Q5: the recall blocks the session's requests carry now
                       (`AutoRecall.held`), so a summariser reading the session's prefix
                       sends it as the session sent it, blocks included
    """

    store: CompactionStore
    session_id: str
    capacity: ModelCapacity
    budget: Budget
    trigger: Trigger = "manual"
    summarize: Summarize = offline_summarize
    instructions: str | None = None
    pending: Sequence[Message] = ()
    system: str | None = None
    tools: Sequence[dict[str, Any]] | None = None
    summarizer_budget: Budget | None = None
    estimate_tokens: int | None = None
    costs: MessageCosts | None = None
    progress: Progress | None = None
    branch: Branch | None = None
    preview: bool = False
    summary_text: str | None = None
    base: PreviewBase | None = None
    recalled: tuple[RecallBlock, ...] = ()

    @classmethod
    def for_model(cls, store: CompactionStore, session_id: str, model: ResolvedModel,
                  **options: Any) -> CompactionRequest:
        """A request sized for a model the resolver picked (`core.sizing.resolver`)."""
        return cls(store, session_id, model.capacity, model.budget, **options)

    @classmethod
    def for_sizer(cls, store: CompactionStore, session_id: str, sizer: Sizer,
                  **options: Any) -> CompactionRequest:
        """A request sized like the session's requests: its sizer's model, budget (unless
        `options` give another), system prompt, tools and memo of estimates."""
        sized: dict[str, Any] = {"capacity": sizer.capacity, "budget": sizer.budget,
                                 "system": sizer.system, "tools": sizer.tool_json,
                                 "costs": sizer.costs}
        return cls(store, session_id, **{**sized, **options})
