"""OpenAI Agents SDK peers (run in the peers venv, `openai-agents` pinned).

* `ToolOutputTrimmer` (`agents.extensions`), the SDK's `call_model_input_filter` that
  replaces large tool outputs of older turns by a preview: called here exactly as the runner
  calls it before every model call, on the Responses input items, with its defaults
  (`recent_turns=2`, `max_output_chars=500`, `preview_chars=200`).
* `OpenAIResponsesCompactionSession`'s trigger: after a turn, compact when the session holds
  at least 10 candidate items (the SDK's own `select_compaction_candidate_items` and
  `default_should_trigger_compaction`). The compaction itself is the Responses API's
  server-side `responses.compact`, which cannot run offline; it is replaced by the same fake
  summariser as every other peer, shown every item, and its output modelled on the API's
  documented result: the user messages kept, everything else replaced by one compaction item
  (rendered here as an assistant message holding the fake summary).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agents.extensions import ToolOutputTrimmer
from agents.memory.openai_responses_compaction_session import (
    default_should_trigger_compaction,
    select_compaction_candidate_items,
)
from agents.run_config import CallModelData, ModelInputData

from .common import Neutral


def to_items(msgs: Sequence[Neutral]) -> list[dict[str, Any]]:
    """Workload messages as Responses API input items, one item per message or call."""
    out: list[dict[str, Any]] = []
    for m in msgs:
        if m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["call_id"],
                        "output": m["text"]})
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": m["text"]})
            out += [{"type": "function_call", "call_id": c["id"], "name": c["name"],
                     "arguments": json.dumps(c["args"])} for c in m["calls"]]
        else:
            out.append({"role": m["role"], "content": m["text"]})
    return out


def items_to_openai(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses items as chat-completions messages: calls join the assistant message
    before them, as the SDK's chat-completions converter does; nothing is repaired."""
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": item["output"]})
        elif kind == "compaction":
            out.append({"role": "assistant", "content": item["summary"]})
        else:
            out.append({"role": item["role"], "content": item["content"]})
    return out


class ToolOutputTrimmerPeer:
    """The SDK's `ToolOutputTrimmer()` with its defaults, before every model call."""

    name = "openai-agents-ToolOutputTrimmer"
    # "Does NOT mutate the original items" (its __call__ docstring): the runner skips the
    # timing warm-up, which cannot change its later decisions.
    stateless = True

    def __init__(self, summarize: Callable[[str], str]) -> None:
        del summarize  # trimming never summarises
        self.trimmer = ToolOutputTrimmer()
        self.items: list[dict[str, Any]] = []

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.items.extend(to_items(new))

    def decide(self) -> list[dict[str, Any]]:
        data = CallModelData(model_data=ModelInputData(input=self.items, instructions=None),
                             agent=None, context=None)  # type: ignore[arg-type]
        return list(self.trimmer(data).input)

    def to_openai(self, request: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return items_to_openai(request)


class CompactionSessionPeer:
    """`OpenAIResponsesCompactionSession`'s default trigger with an offline compaction."""

    name = "openai-agents-compaction-session"

    def __init__(self, summarize: Callable[[str], str]) -> None:
        self.summarize = summarize
        self.items: list[dict[str, Any]] = []
        self.compactions = 0

    def ingest(self, new: Sequence[Neutral]) -> None:
        for m in new:
            # The runner compacts after a turn, so before the next user message is added.
            if m["role"] == "user" and default_should_trigger_compaction(
                    {"compaction_candidate_items": select_compaction_candidate_items(
                        self.items)}):  # type: ignore[arg-type]
                self._compact()
            self.items.extend(to_items([m]))

    def _compact(self) -> None:
        prompt = "\n".join(str(i.get("content") or i.get("output") or i.get("summary")
                               or i.get("arguments") or "") for i in self.items)
        summary = self.summarize(prompt)
        users = [i for i in self.items if i.get("role") == "user" and i.get("type") is None]
        self.items = [*users, {"type": "compaction", "summary": summary}]
        self.compactions += 1

    def decide(self) -> list[dict[str, Any]]:
        return self.items

    def to_openai(self, request: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return items_to_openai(request)

