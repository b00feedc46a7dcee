"""What `contextfold eval` measured, as values with their JSON form (`eval --json`).

Per compaction: what it folded, which summariser wrote the checkpoint (an LLM summary that
failed validation is replaced by the offline one, and says why), what the retention check
(SPEC S6) had to re-add because the summary lacked it, the lines it re-marked as inferred
(S7: attributed to the user or a tool, and traced to neither) and the summariser's tokens
and dollars (SPEC Q4, packaged prices). Per milestone K: every fact planted in a folded
turn, probed (`evaluate.probes`), counted per kind (the six categories and the five kinds
of natural rule), per source, and per where it was stated (the first user message, a middle
one, the latest one when compacting began).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.money.prices import Cost, total
from .facts import CATEGORIES, KINDS, SOURCES, STATED
from .probes import ProbeResult
from .rules import RULE_KINDS

_MISSING_LISTED = 20  # facts missing from the request, listed per milestone


@dataclass(frozen=True)
class CompactionRow:
    """One compaction of the run."""

    k: int
    turn: int  # turns played when it ran
    trigger: str
    summarizer: str | None
    fallback_reason: str | None
    tokens_before: int | None
    tokens_after: int | None
    summarized_messages: int
    check: dict[str, Any]  # the checkpoint's S6/S7 check, as `compact --json` shows it
    cost: Cost

    @property
    def readded(self) -> list[dict[str, Any]]:
        """SPEC S6: required items the summary lacked (re-added or named for recall)."""
        return [*self.check.get("readded", ()), *self.check.get("evicted", ())]

    @property
    def ungrounded(self) -> list[dict[str, Any]]:
        """SPEC S7: lines attributed to the user or a tool that neither supports."""
        return list(self.check.get("ungrounded", ()))

    def to_json(self) -> dict[str, Any]:
        return {"k": self.k, "turn": self.turn, "trigger": self.trigger,
                "summarizer": self.summarizer, "fallback_reason": self.fallback_reason,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "summarized_messages": self.summarized_messages,
                "required": self.check.get("required", 0), "kept": self.check.get("kept", 0),
                "summary_lacked": self.readded, "ungrounded": self.ungrounded,
                "cost": self.cost.to_json()}


def _counts(probes: Sequence[ProbeResult]) -> dict[str, int]:
    return {"total": len(probes), "in_request": sum(p.in_request for p in probes),
            "in_checkpoint": sum(p.in_checkpoint for p in probes),
            "in_checkpoint_or_named": sum(p.in_checkpoint_or_named for p in probes),
            "in_recall_block": sum(p.in_recall_block for p in probes)}


@dataclass(frozen=True)
class Milestone:
    """The probes after compaction `k`: every fact planted in a folded turn."""

    k: int
    turn: int
    probes: tuple[ProbeResult, ...]

    def category(self, name: str, source: str | None = None) -> dict[str, int]:
        return _counts([p for p in self.probes if p.fact.category == name
                        and (source is None or p.fact.source == source)])

    def stated(self, where: str, rules_only: bool = False) -> dict[str, int]:
        """The facts stated at `where` (first, middle, latest), or only its natural rules."""
        return _counts([p for p in self.probes if p.fact.stated == where
                        and (not rules_only or p.fact.category in RULE_KINDS)])

    def to_json(self) -> dict[str, Any]:
        missing = [p.to_json() for p in self.probes if not p.in_request]
        return {"k": self.k, "turn": self.turn, "facts": len(self.probes),
                "categories": {c: self.category(c) for c in KINDS},
                "natural_rules": _counts([p for p in self.probes
                                          if p.fact.category in RULE_KINDS]),
                "stated": {w: self.stated(w) for w in STATED},
                "rules_stated": {w: self.stated(w, rules_only=True) for w in STATED},
                "sources": {s: _counts([p for p in self.probes if p.fact.source == s])
                            for s in SOURCES},
                "by_source": {c: {s: self.category(c, s) for s in SOURCES} for c in CATEGORIES},
                "missing": missing[:_MISSING_LISTED], "missing_count": len(missing)}


@dataclass
class EvalResult:
    """One `contextfold eval` run."""

    summarizer: str  # as asked for: "extractive" or "llm:<model>"
    model: str
    context_window: int
    safe_input_limit: int
    recall_budget: int
    asked: tuple[int, ...]  # the K asked for
    turns_played: int = 0
    compactions: list[CompactionRow] = field(default_factory=list)
    milestones: list[Milestone] = field(default_factory=list)
    seconds: float = 0.0
    base_url: str | None = None

    @property
    def cost(self) -> Cost:
        return total(c.cost for c in self.compactions)

    @property
    def violations(self) -> list[dict[str, Any]]:
        """SPEC S7 over the run: every re-marked line, with the compaction it was in."""
        return [{"k": c.k, **u} for c in self.compactions for u in c.ungrounded]

    @property
    def fallbacks(self) -> list[CompactionRow]:
        return [c for c in self.compactions if c.fallback_reason]

    @property
    def not_reached(self) -> list[int]:
        done = {m.k for m in self.milestones}
        return [k for k in self.asked if k not in done]

    def summary_lacked(self) -> dict[str, int]:
        """SPEC S6 over the run: required items the summaries lacked, per kind."""
        out: dict[str, int] = {}
        for c in self.compactions:
            for item in c.readded:
                out[item["kind"]] = out.get(item["kind"], 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "summarizer": self.summarizer, "base_url": self.base_url, "model": self.model,
            "context_window": self.context_window, "safe_input_limit": self.safe_input_limit,
            "recall_budget": self.recall_budget, "compactions_asked": list(self.asked),
            "compactions_done": len(self.compactions), "not_reached": self.not_reached,
            "turns_played": self.turns_played,
            "milestones": [m.to_json() for m in self.milestones],
            "attribution_violations": len(self.violations), "violations": self.violations,
            "summary_lacked": self.summary_lacked(),
            "required": sum(c.check.get("required", 0) for c in self.compactions),
            "fallbacks": len(self.fallbacks),
            "fallback_reasons": [{"k": c.k, "reason": c.fallback_reason}
                                 for c in self.fallbacks],
            "summarizers_used": sorted({c.summarizer or "?" for c in self.compactions}),
            "cost": {"currency": "USD", "summarizer": self.cost.to_json()},
            "compaction_log": [c.to_json() for c in self.compactions],
            "seconds": round(self.seconds, 2),
        }
