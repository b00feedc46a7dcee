"""The JSON shapes of docs/service.md: nodes, outcomes, gauges, states, projections, turns."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..core.values.messages import Node
from ..core.view.projection import Projection
from ..runtime import ConversationState, Event, Gauge, SendResult
from ..runtime.compaction import CompactionOutcome


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def node_json(node: Node, *, on_branch: bool | None = None) -> dict[str, Any]:
    """A tree node: id, parent, kind, role, text, the stored payload (and `on_branch`)."""
    message = node.message
    checkpoint = node.checkpoint
    if message is not None:
        text = message.text
    elif checkpoint is not None:
        text = checkpoint.summary
    else:
        pin = node.pin_event
        text = pin.text if pin is not None else ""
    out: dict[str, Any] = {
        "id": node.id, "parent_id": node.parent_id, "kind": node.kind,
        "role": message.role if message is not None else None,
        "created_at": iso(node.created_at), "text": text,
        "payload": node.payload.model_dump(mode="json", exclude_none=True),
    }
    if on_branch is not None:
        out["on_branch"] = on_branch
    return out


def outcome_json(outcome: CompactionOutcome | None, trigger: str | None = None
                 ) -> dict[str, Any] | None:
    """The library's `CompactionOutcome.to_json()` plus `code` and `trigger`."""
    if outcome is None:
        return None
    return {**outcome.to_json(), "code": outcome.code, "trigger": trigger}


def gauge_json(gauge: Gauge) -> dict[str, Any]:
    return {"tokens": gauge.tokens, "safe_input_limit": gauge.safe_input_limit,
            "auto_threshold": gauge.auto_threshold, "context_window": gauge.context_window,
            "fraction": round(gauge.fraction, 4), "method": gauge.method,
            "model": gauge.model}


def state_json(state: ConversationState, *, busy: bool = False,
               remote_compaction: bool = False) -> dict[str, Any]:
    """idle / busy / compacting / failed (a compaction outranks a running turn)."""
    if state.compacting:
        return {"phase": "compacting", "trigger": state.trigger,
                "started_at": iso(state.started_at), "reason": None}
    if remote_compaction:
        return {"phase": "compacting", "trigger": None, "started_at": None,
                "reason": "compacting on another worker"}
    if busy:
        return {"phase": "busy", "trigger": None, "started_at": None, "reason": None}
    if state.phase == "failed":
        return {"phase": "failed", "trigger": state.trigger, "started_at": None,
                "reason": state.reason}
    return {"phase": "idle", "trigger": None, "started_at": None, "reason": None}


def event_json(event: Event) -> dict[str, Any]:
    """A runtime event's SSE data."""
    data: dict[str, Any] = {"trigger": event.trigger, "reason": event.reason,
                            "at": iso(event.at)}
    if event.tokens is not None:
        data["tokens"] = event.tokens
    if event.limit is not None:
        data["limit"] = event.limit
    if event.outcome is not None:
        data["outcome"] = outcome_json(event.outcome, event.trigger)
    return data


def projection_json(session_id: str, projection: Projection, estimate: Any,
                    limit: int, context_window: int) -> dict[str, Any]:
    """What the next request holds: checkpoint, pins, raw messages, estimate, limit."""
    checkpoint = projection.checkpoint
    return {
        "session_id": session_id,
        "checkpoint": node_json(checkpoint) if checkpoint is not None else None,
        "pins": [p.model_dump(mode="json", exclude_none=True) for p in projection.pins],
        "messages": [node_json(n) for n in projection.messages],
        "clips": dict(projection.clips),
        "estimate": {"tokens": estimate.tokens, "method": estimate.method,
                     "breakdown": dict(estimate.breakdown)},
        "limit": limit,
        "context_window": context_window,
    }


def tree_json(session_id: str, leaf_id: str | None, nodes: Iterable[Node],
              branch_ids: set[str]) -> dict[str, Any]:
    return {"session_id": session_id, "leaf_id": leaf_id,
            "nodes": [node_json(n, on_branch=n.id in branch_ids) for n in nodes]}


def turn_json(result: SendResult, gauge: Gauge, session: dict[str, Any], *,
              replayed: bool = False) -> dict[str, Any]:
    """The Turn object of docs/service.md (`replayed`: a repeated idempotent send answered
    with the stored turn)."""
    replies = [n for n in result.nodes if n.message is not None and n.message.role == "assistant"]
    return {
        "reply": {"node_id": replies[-1].id if replies else None,
                  "text": result.text, "stop_reason": result.stop_reason},
        "node_ids": [n.id for n in result.nodes],
        "compactions": [outcome_json(c) for c in result.compactions],
        "gauge": gauge_json(gauge),
        "session": session,
        "replayed": replayed,
    }
