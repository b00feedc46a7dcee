"""LangChain + contextfold under the peers' harness (project venv: LangChain is a dev extra).

The row "langchain + contextfold" is a LangChain agent's message list (the same conversion as
the LangChain peers, `peer_langchain.to_langchain`) driven through
`ContextfoldMiddleware.wrap_model_call` exactly as `create_agent`'s model node calls it: at
every call point the hook gets the agent's whole list, and its handler (the model) answers
with the transcript's recorded reply, which the middleware stores before the next call point
(so the automatic check runs where it runs in an agent, inside the timed decision). What is
measured is the request the handler received.

Same shared model and settings as the contextfold row (`cf_system`: gpt-4o's catalog
capacity, the shared trigger and tail, the production LLM summariser over the offline echo),
so "langchain-summarization" vs "langchain + contextfold" differ only in the middleware.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage

from contextfold.integrations.langchain import ContextfoldMiddleware
from contextfold.summarize.llm import LlmSummarizer

from .cf_system import BUDGET, CAPACITY, SETTINGS, EchoChatModel
from .common import Neutral, call_points
from .peer_langchain import to_langchain, to_openai

NAME = "langchain + contextfold"
# Which built-in rows this one is read against (docs/peers.md, "Frameworks with contextfold").
BUILT_INS = ("langchain-summarization", "langchain-summarization (trim_tokens_to_summarize=None)",
             "langchain-trim_messages", "langchain-context-editing (clear_tool_uses)")


class LangChainContextfold:
    """A LangChain agent's messages through `ContextfoldMiddleware` (sync hook, own store)."""

    name = NAME

    def __init__(self, summarize: Callable[[str], str], msgs: Sequence[Neutral]) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="cf-lc-bench-")
        self.middleware = ContextfoldMiddleware(
            str(Path(self._dir.name) / "sessions.db"), capacity=CAPACITY, settings=SETTINGS,
            summarizer=LlmSummarizer(EchoChatModel(summarize), CAPACITY), recall=False)
        self.replies = {k: msgs[k] for k in call_points(msgs)}
        self.messages: list[AnyMessage] = []
        self.repairs = 0

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(to_langchain(m) for m in new)

    def decide(self) -> list[AnyMessage]:
        sent: list[list[AnyMessage]] = []
        reply = self.replies.get(len(self.messages))

        def model(request: ModelRequest) -> ModelResponse:
            sent.append(request.messages)
            return ModelResponse(result=[to_langchain(reply)] if reply is not None else [])

        request = ModelRequest(model=None, messages=list(self.messages))  # type: ignore[arg-type]
        self.middleware.wrap_model_call(request, model)
        self.repairs += len(self.middleware.last_repairs)
        return sent[0]

    def to_openai(self, request: list[AnyMessage]) -> list[dict[str, Any]]:
        return to_openai(request)

    def close(self) -> None:
        self.middleware.close()
        self._dir.cleanup()


def factory(summarize: Callable[[str], str], msgs: Sequence[Neutral]) -> LangChainContextfold:
    return LangChainContextfold(summarize, msgs)


def describe() -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "packages": {p: version(p) for p in ("contextfold", "langchain", "langchain-core",
                                             "langgraph")},
        "config": f"ContextfoldMiddleware(capacity=capacity_for('gpt-4o'), settings as the "
                  f"contextfold row (auto threshold {BUDGET.auto_threshold}, tail budget "
                  f"{BUDGET.tail_budget}), summarizer=LlmSummarizer over the offline echo, "
                  "recall=False); wrap_model_call as create_agent's model node calls it, the "
                  "handler answering with the recorded reply",
        "estimator_name": "contextfold.core.sizing.estimator (via the runtime mirror)",
    }
