"""Google ADK token-threshold events compaction (run in the peers venv).

Driven as ADK's own `CompactionRequestProcessor` does before every model call: run
`_run_compaction_for_token_threshold_config` on the session (which appends a compaction event
when the latest prompt-size estimate is over `token_threshold`), then build the request
contents with `_get_contents`, as the contents processor does. The summariser is ADK's own
`LlmEventSummarizer` (its prompt, its 2,000-character cap on tool content) over a `BaseLlm`
that answers with the offline fake. The session service is a stub that appends in memory, so
what is timed is ADK's logic, not storage.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.compaction import _run_compaction_for_token_threshold_config
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.events.event import Event
from google.adk.flows.llm_flows.context._contents import _get_contents
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions.session import Session
from google.genai import types

from .common import TAIL_TOKENS, TRIGGER_TOKENS, Neutral

AGENT = "agent"
_EPOCH = 1_760_000_000.0  # realistic timestamps: ADK orders compaction ranges by them


class EchoLlm(BaseLlm):
    """A `BaseLlm` that never leaves the process: it answers with the fake summary."""

    summarize: Callable[[str], str]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        prompt = "\n".join(
            p.text for c in llm_request.contents for p in (c.parts or []) if p.text
        )
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=self.summarize(prompt))])
        )


class _MemorySessionService:
    """Only what the compactor calls: append an event to the session in memory."""

    async def append_event(self, session: Session, event: Event) -> Event:
        session.events.append(event)
        return event


# --------------------------------------------------------------------------- conversion


def to_events(msgs: Sequence[Neutral], invocation: str) -> tuple[list[Event], str]:
    """Workload messages as ADK events; consecutive tool results share one event, as ADK
    merges parallel function responses. Returns the events and the current invocation id."""
    events: list[Event] = []
    group: list[Neutral] = []

    def flush() -> None:
        if group:
            parts = [
                types.Part(function_response=types.FunctionResponse(
                    id=m["call_id"], name=m.get("tool_name") or "tool",
                    response={"error" if m.get("is_error") else "result": m["text"]}))
                for m in group
            ]
            events.append(Event(author=AGENT, invocation_id=invocation,
                                timestamp=_EPOCH + group[0]["i"],
                                content=types.Content(role="user", parts=parts)))
            group.clear()

    for m in msgs:
        if m["role"] == "tool":
            group.append(m)
            continue
        flush()
        if m["role"] in ("user", "system"):
            invocation = Event.new_id()
            events.append(Event(author="user", invocation_id=invocation,
                                timestamp=_EPOCH + m["i"],
                                content=types.Content(role="user",
                                                      parts=[types.Part(text=m["text"])])))
        else:
            parts = [types.Part(text=m["text"])] + [
                types.Part(function_call=types.FunctionCall(
                    id=c["id"], name=c["name"],
                    args=c["args"] if isinstance(c["args"], dict) else {"input": c["args"]}))
                for c in m["calls"]
            ]
            events.append(Event(author=AGENT, invocation_id=invocation,
                                timestamp=_EPOCH + m["i"],
                                content=types.Content(role="model", parts=parts)))
    flush()
    return events, invocation


def to_openai(contents: Sequence[types.Content]) -> list[dict[str, Any]]:
    """ADK request contents as chat-completions messages, one for one, with no repair."""
    out: list[dict[str, Any]] = []
    for c in contents:
        parts = c.parts or []
        texts = [p.text for p in parts if p.text and not p.thought]
        if c.role == "model":
            msg: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            calls = [p.function_call for p in parts if p.function_call]
            if calls:
                msg["tool_calls"] = [
                    {"id": fc.id, "type": "function",
                     "function": {"name": fc.name, "arguments": json.dumps(fc.args or {})}}
                    for fc in calls
                ]
            out.append(msg)
            continue
        for p in parts:
            if p.function_response:
                resp = p.function_response.response or {}
                body = resp.get("result", resp.get("error"))
                out.append({"role": "tool", "tool_call_id": p.function_response.id,
                            "content": body if isinstance(body, str) else json.dumps(resp)})
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
    return out


def retention_events(msgs: Sequence[Neutral]) -> int:
    """ADK keeps a number of raw *events*: the count that holds about the shared tail size,
    from the transcript's mean event size (4 characters per token, ADK's own estimate)."""
    events, _ = to_events(msgs, "")
    chars = sum(len(json.dumps(e.content.model_dump(exclude_none=True))) for e in events)
    mean_tokens = max(chars / 4 / max(len(events), 1), 1.0)
    return max(2, round(TAIL_TOKENS / mean_tokens))


# --------------------------------------------------------------------------- system


class AdkTokenThreshold:
    """`EventsCompactionConfig(token_threshold=T, event_retention_size=N, summarizer=
    LlmEventSummarizer(...))`, with N from `retention_events` for each transcript."""

    name = "google-adk-compaction"

    def __init__(self, summarize: Callable[[str], str], retention: int) -> None:
        self.config = EventsCompactionConfig(
            token_threshold=TRIGGER_TOKENS,
            event_retention_size=retention,
            summarizer=LlmEventSummarizer(llm=EchoLlm(model="offline-echo", summarize=summarize)),
        )
        self.session = Session(id="bench", app_name="bench", user_id="bench")
        self.service = _MemorySessionService()
        self.invocation = Event.new_id()
        self.loop = asyncio.new_event_loop()

    def ingest(self, new: Sequence[Neutral]) -> None:
        events, self.invocation = to_events(new, self.invocation)
        self.session.events.extend(events)

    def decide(self) -> list[types.Content]:
        self.loop.run_until_complete(_run_compaction_for_token_threshold_config(
            config=self.config, session=self.session, session_service=self.service,
            agent=None, agent_name=AGENT, current_branch=None,
        ))
        return _get_contents(None, self.session.events, AGENT, preserve_function_call_ids=True)

    def to_openai(self, request: list[types.Content]) -> list[dict[str, Any]]:
        return to_openai(request)


def estimate(msgs: Sequence[Neutral], model: str) -> int:
    """ADK's own prompt-size estimate (characters / 4 of the request contents)."""
    from google.adk.apps.compaction import _count_chars_in_content

    del model  # ADK's estimate is the same for every model

    events, _ = to_events(msgs, "")
    return sum(_count_chars_in_content(e.content) for e in events) // 4
