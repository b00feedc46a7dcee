"""LangChain v1 peers: `SummarizationMiddleware` (default and with the summariser shown
everything), `trim_messages`, and `ContextEditingMiddleware` with `ClearToolUsesEdit`
(Anthropic's clear-tool-uses defaults) (run in the peers venv).

Both are driven exactly where LangChain runs them: the middleware's `before_model` hook before
every model call (its state update replaces the message list, as the agent graph applies it),
and `trim_messages` as a stateless pre-model step that only shapes the request.
The summariser is `EchoChatModel`, a real `BaseChatModel` whose answer is the offline fake.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import count_tokens_approximately, trim_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from .common import CONTEXT_WINDOW, TAIL_TOKENS, TRIGGER_TOKENS, Neutral


class EchoChatModel(BaseChatModel):
    """A chat model that never leaves the process: it answers with the fake summary."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    summarize: Callable[[str], str]

    @property
    def _llm_type(self) -> str:
        return "offline-echo"

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        prompt = "\n".join(_text(m) for m in messages)
        reply = AIMessage(content=self.summarize(prompt))
        return ChatResult(generations=[ChatGeneration(message=reply)])


def echo_model(summarize: Callable[[str], str]) -> EchoChatModel:
    """The fake summariser, with the shared model's window in its profile."""
    return EchoChatModel(summarize=summarize, profile={"max_input_tokens": CONTEXT_WINDOW})


# --------------------------------------------------------------------------- conversion


def to_langchain(msg: Neutral) -> AnyMessage:
    """One workload message as the LangChain message an agent would hold."""
    mid = f"m{msg['i']}"
    role = msg["role"]
    if role == "user":
        return HumanMessage(content=msg["text"], id=mid)
    if role == "system":
        return SystemMessage(content=msg["text"], id=mid)
    if role == "tool":
        return ToolMessage(content=msg["text"], tool_call_id=msg["call_id"], id=mid,
                           name=msg.get("tool_name"),
                           status="error" if msg.get("is_error") else "success")
    calls = [{"id": c["id"], "name": c["name"], "args": _args(c["args"]), "type": "tool_call"}
             for c in msg["calls"]]
    return AIMessage(content=msg["text"], tool_calls=calls, id=mid)


def _args(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"input": value}


def _text(m: BaseMessage) -> str:
    content = m.content
    if isinstance(content, str):
        return content
    return "\n".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)


def to_openai(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as chat-completions messages, one for one, with no repair."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": _text(m)})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": _text(m)})
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": _text(m)})
        elif isinstance(m, AIMessage):
            msg: dict[str, Any] = {"role": "assistant", "content": _text(m) or None}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                    for c in m.tool_calls
                ]
            out.append(msg)
        else:
            raise TypeError(f"unexpected LangChain message type {type(m).__name__}")
    return out


# --------------------------------------------------------------------------- systems


class LangChainSummarization:
    """`SummarizationMiddleware(trigger=("tokens", T), keep=("tokens", K))`, library defaults
    otherwise (approximate counter, summariser input trimmed to 4,000 tokens)."""

    name = "langchain-summarization"
    # LangChain's default: the summariser sees only the last 4,000 tokens of what is cut.
    trim_tokens_to_summarize: int | None = 4000

    def __init__(self, summarize: Callable[[str], str]) -> None:
        self.middleware = SummarizationMiddleware(
            model=echo_model(summarize),
            trigger=("tokens", TRIGGER_TOKENS),
            keep=("tokens", TAIL_TOKENS),
            trim_tokens_to_summarize=self.trim_tokens_to_summarize,
        )
        self.messages: list[AnyMessage] = []

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(to_langchain(m) for m in new)

    def decide(self) -> list[AnyMessage]:
        update = self.middleware.before_model({"messages": self.messages}, None)  # type: ignore[arg-type]
        if update:
            # The graph's add_messages reducer: RemoveMessage(REMOVE_ALL) then the new list.
            self.messages = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
        return self.messages

    def to_openai(self, request: list[AnyMessage]) -> list[dict[str, Any]]:
        return to_openai(request)


class LangChainSummarizationUntrimmed(LangChainSummarization):
    """The same middleware configured sensibly: `trim_tokens_to_summarize=None`, so the
    summariser is shown everything that is cut (the middleware's own overflow retry still
    shortens a prompt that would not fit the summariser)."""

    name = "langchain-summarization (trim_tokens_to_summarize=None)"
    trim_tokens_to_summarize = None


class LangChainContextEditing:
    """`ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`: its defaults mirror Anthropic's
    `clear_tool_uses_20250919` (trigger 100,000 tokens, keep the last 3 tool results,
    placeholder "[cleared]"). Stateless: it edits a deep copy of the messages before every
    model call (`wrap_model_call`), which is what runs here."""

    name = "langchain-context-editing (clear_tool_uses)"
    stateless = True  # edits a copy of the messages per call (runner: no timing warm-up)

    def __init__(self, summarize: Callable[[str], str]) -> None:
        del summarize  # clearing never summarises
        self.middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit()])
        self.messages: list[AnyMessage] = []

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(to_langchain(m) for m in new)

    def decide(self) -> list[AnyMessage]:
        # The body of ContextEditingMiddleware.wrap_model_call, without a model to hand to.
        edited = deepcopy(self.messages)
        for edit in self.middleware.edits:
            edit.apply(edited, count_tokens=count_tokens_approximately)
        return edited

    def to_openai(self, request: list[AnyMessage]) -> list[dict[str, Any]]:
        return to_openai(request)


class LangChainTrim:
    """`trim_messages(strategy="last", start_on="human", include_system=True)` to the tail size,
    applied only when the approximate count is above the trigger (as a pre-model hook)."""

    name = "langchain-trim_messages"
    stateless = True  # shapes the request only (runner: no timing warm-up)

    def __init__(self, summarize: Callable[[str], str]) -> None:
        del summarize  # trimming never summarises
        self.messages: list[AnyMessage] = []

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(to_langchain(m) for m in new)

    def decide(self) -> list[AnyMessage]:
        if count_tokens_approximately(self.messages) <= TRIGGER_TOKENS:
            return self.messages
        return trim_messages(
            self.messages,
            max_tokens=TAIL_TOKENS,
            token_counter=count_tokens_approximately,
            strategy="last",
            start_on="human",
            include_system=True,
            allow_partial=False,
        )

    def to_openai(self, request: list[AnyMessage]) -> list[dict[str, Any]]:
        return to_openai(request)


def estimate(msgs: Sequence[Neutral], model: str) -> int:
    """The middleware's estimator for `model`: 3.3 characters per token for Anthropic models
    (its `_get_approximate_token_counter`), LangChain's default 4 otherwise."""
    ratio = 3.3 if "claude" in model.lower() else 4.0
    return count_tokens_approximately([to_langchain(m) for m in msgs], chars_per_token=ratio)
