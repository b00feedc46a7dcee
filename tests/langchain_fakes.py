"""Offline LangChain models, tools and workloads for the middleware tests and bench rows.

`ScriptedToolModel` is LangChain's own `GenericFakeChatModel` (replies taken from an
iterator) made tool-capable (`bind_tools`), reporting `usage_metadata` for what it was sent,
and recording every request it received, so a test can judge each one with the project's
validity oracles. `tool_session` scripts a long tool-using session: turns of 0-3 tool rounds,
some with parallel calls, each tool result a few hundred tokens holding identifiers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool

from contextfold.core.render.validity import (
    anthropic_from_chat,
    anthropic_problems,
    openai_problems,
)
from contextfold.integrations.langchain_messages import as_openai


class ScriptedToolModel(GenericFakeChatModel):
    """`GenericFakeChatModel` that binds tools, reports usage and records its requests."""

    received: list[list[BaseMessage]] = []  # noqa: RUF012 - pydantic copies per instance
    systems: list[str | None] = []  # noqa: RUF012
    model_name: str = "fake-tool-model"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedToolModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        system = messages[0].text if messages and messages[0].type == "system" else None
        body = messages[1:] if system is not None else list(messages)
        self.received.append(body)
        self.systems.append(system)
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        reply = result.generations[0].message
        sent = count_tokens_approximately(messages)
        out = count_tokens_approximately([reply])
        reply.usage_metadata = {"input_tokens": sent, "output_tokens": out,
                                "total_tokens": sent + out}
        reply.response_metadata = {**reply.response_metadata, "model_name": self.model_name}
        return result


def scripted_model(replies: Iterator[AIMessage], window: int, *,
                   name: str = "fake-tool-model") -> ScriptedToolModel:
    """A fake model with a `window`-token input limit in its LangChain profile."""
    return ScriptedToolModel(messages=replies, model_name=name,
                             profile={"max_input_tokens": window,
                                      "max_output_tokens": 4096},
                             received=[], systems=[])


# --------------------------------------------------------------------------- tools


def file_text(path: str, size: int = 1400) -> str:
    """Deterministic file content naming its own identifiers (path, a ticket, a hash)."""
    ident = abs(hash_of(path)) % 10_000
    head = f"# {path}\nticket: TKT-{ident:04d}\ncommit: c{ident:04d}ab{len(path):02d}\n"
    line = f"def handler_{ident}(request): return route(request, '{path}')\n"
    return (head + line * (size // len(line) + 1))[:size]


def hash_of(text: str) -> int:
    value = 0
    for ch in text:
        value = (value * 131 + ord(ch)) % 1_000_003
    return value


def make_tools(file_chars: int = 1400) -> list[Any]:
    """`read_file` (results of `file_chars` characters) and `grep`, as LangChain tools."""

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return file_text(path, file_chars)

    @tool
    def grep(pattern: str) -> str:
        """Search the repository for a pattern."""
        return "\n".join(f"src/mod_{i}.py:{i * 7}: {pattern} used here" for i in range(12))

    return [read_file, grep]


TOOLS = make_tools()


# --------------------------------------------------------------------------- workloads


def tool_session(turns: int, *, seed: int = 7) -> tuple[list[str], Iterator[AIMessage]]:
    """User prompts and the model's replies for a long tool-using session.

    Turn t runs `t % 4` tool rounds (so 0-3); every third round calls tools in parallel
    (2-3 calls in one AI message, LangChain's parallel tool calls). The replies are exactly
    what the agent loop asks for, in order, so the script stays aligned with the loop.
    """
    prompts = [f"Task {t}: look at module {t % 9} and report on TKT-{t:04d}." for t in range(turns)]

    def replies() -> Iterator[AIMessage]:
        n = seed
        for t in range(turns):
            for r in range(t % 4):
                n += 1
                width = 2 + n % 2 if n % 3 == 0 else 1
                calls = []
                for k in range(width):
                    path = f"src/pkg{t % 5}/file_{t}_{r}_{k}.py"
                    name, args = ("grep", {"pattern": f"sym_{t}_{r}"}) if (n + k) % 5 == 0 \
                        else ("read_file", {"path": path})
                    calls.append({"id": f"call_{t}_{r}_{k}", "name": name, "args": args,
                                  "type": "tool_call"})
                yield AIMessage(content=f"Checking round {r} of task {t}.", tool_calls=calls,
                                id=f"ai_{t}_{r}")
            yield AIMessage(content=f"Task {t} done: TKT-{t:04d} is handled in module {t % 9}.",
                            id=f"ai_{t}_final")

    return prompts, replies()


def problems(request: list[BaseMessage], system: str | None = None) -> list[str]:
    """Why OpenAI or Anthropic would reject `request` (the project's validity oracles)."""
    wire = as_openai(request, system)
    return openai_problems(wire) + anthropic_problems(anthropic_from_chat(wire))


def tool_ids(messages: Sequence[BaseMessage]) -> set[str]:
    """Every tool-call id named by `messages` (calls and results)."""
    ids = set()
    for m in messages:
        ids.update(c["id"] for c in getattr(m, "tool_calls", ()) or ())
        if m.type == "tool":
            ids.add(m.tool_call_id)  # type: ignore[attr-defined]
    return ids


def dumps(messages: Sequence[BaseMessage]) -> str:
    return json.dumps([m.model_dump() for m in messages], default=str)[:4000]
