"""contextfold under the same harness as the peers (project venv).

The session is the engine `contextfold replay` runs (`contextfold.replay.ManagedSession`,
built as `replay_messages` builds it: no exact tokenizer, so the estimate is the one a user
of the model gets from the catalog's tokenizer family); the capacity is the catalog's
`capacity_for("gpt-4o")` as the CLI resolves it. This adapter only feeds the workload in the
order `ManagedSession.step` does and renders its projection with the production exporter
(`contextfold.core.render.export.to_openai`). Every check the engine makes between two
model calls (auto compaction after a turn, preflight before a user message, the fit check
before a request) runs inside the timed `decide()`, so contextfold is timed for all of its
work, as the peers are.

The summariser is contextfold's production LLM summariser (`summarize.llm.LlmSummarizer`:
chunking, prompts, validation, rolling update per chunk) over `EchoChatModel`, a `ChatModel`
that never leaves the process. Like the peers' fake it answers with the messages it was
shown, but in the section format contextfold's validator requires (each fact a bullet in the
section of its kind); an answer is rejected only for its size, and is then fitted to the
budget by priority (the run counts fitted answers and fallbacks).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from contextfold.core.models.budget import CompactionSettings, derive_budget
from contextfold.core.models.catalog import capacity_for
from contextfold.core.planning.plan import Plan
from contextfold.core.render.export import to_openai
from contextfold.core.values.messages import (
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    text_message,
)
from contextfold.core.view.projection import Projection
from contextfold.providers.base import ChatRequest, ChatResponse, StreamDone, StreamEvent
from contextfold.replay import ManagedSession
from contextfold.summarize.llm import LlmSummarizer
from contextfold.summarize.summary import Summary

from .common import CONTEXT_WINDOW, MAX_OUTPUT, SAFE_LIMIT, TAIL_TOKENS, TRIGGER_TOKENS, Neutral

# The shared model: what the catalog gives a user of gpt-4o (128k window, 16k output).
CAPACITY = capacity_for("gpt-4o")
assert (CAPACITY.context_window, CAPACITY.max_output) == (CONTEXT_WINDOW, MAX_OUTPUT), CAPACITY
# The shared trigger (60% of the window) as contextfold's threshold, a share of the safe limit.
SETTINGS = CompactionSettings(tail_tokens=TAIL_TOKENS,
                              auto_threshold_fraction=TRIGGER_TOKENS / SAFE_LIMIT)
BUDGET = derive_budget(CAPACITY, SETTINGS)
_FORMAT = "Format:\n"


def budget_with(**settings: Any) -> Any:
    """The bench's budget with other settings (`CompactionSettings` fields), the rest the
    same."""
    return derive_budget(CAPACITY, SETTINGS.model_copy(update=settings))


def to_message(m: Neutral) -> Message:
    """A neutral message as a contextfold message."""
    if m["role"] == "tool":
        part = ToolResultPart(call_id=m["call_id"], name=m.get("tool_name"), output=m["text"],
                              is_error=bool(m.get("is_error")))
        return Message(role="tool", parts=(part,))
    parts: list[Any] = [TextPart(text=m["text"])]
    parts += [ToolCallPart(id=c["id"], name=c["name"], input=c["args"]) for c in m["calls"]]
    return Message(role=m["role"], parts=tuple(parts))


# Where a summariser writing contextfold's sections would put each planted fact
# (`bench.peers.continuity`): matched against the headings the prompt asks for, first match.
_FACT_SECTIONS = (
    ("constraint", ("Constraint",)),
    ("decision", ("Decisions",)),
    ("continuation", ("Next Steps",)),
    ("recall", ("Critical Context",)),
    ("artifact", ("Done", "Files Modified")),
    ("identifiers", ("Key Zotero Resources", "Critical Context")),
)
_FACT = re.compile(r"FACT-([a-z]+)-\d+")


def echo_checkpoint(prompt: str, coverage: str) -> str:
    """A valid checkpoint in the format the prompt asks for, holding only `coverage`.

    The coverage line goes in the first section; each fact the fake echoes becomes its own
    bullet in the section its kind belongs to, as a model following the format would write
    it (one 10k-character bullet under the goal is no summary a model writes).
    """
    skeleton = prompt.rsplit(_FORMAT, 1)[-1]
    headings = [line for line in skeleton.splitlines() if line.startswith("#")]
    if not headings:
        raise ValueError("the summary request has no 'Format:' skeleton to answer in")
    head, _, listed = coverage.partition(". Facts: ")
    bullets: dict[str, list[str]] = {headings[0]: [f"(inferred) {head}"]}
    for fact in listed.split():
        kind = m.group(1) if (m := _FACT.fullmatch(fact)) else ""
        names = next((n for k, n in _FACT_SECTIONS if k == kind), ())
        target = next((h for name in names for h in headings if name in h), headings[0])
        bullets.setdefault(target, []).append(f"(inferred) {fact}")
    lines: list[str] = []
    for h in headings:
        lines += [h, *(f"- {b}" for b in bullets.get(h, ["(none)"]))]
    return "\n".join(lines)


class EchoChatModel:
    """contextfold's `ChatModel` protocol, answered by the offline fake."""

    def __init__(self, summarize: Callable[..., str]) -> None:
        self.summarize = summarize
        self.requests = 0

    @property
    def model(self) -> str:
        return "offline-echo"

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests += 1
        if request.projection.messages or request.projection.checkpoint is not None:
            # SPEC Q3: the session's own prefix, then the instruction: shown as chat messages
            # (what the session sent, byte for byte), so the bench prices its input through
            # the session's prompt cache.
            chat = [*([{"role": "system", "content": request.system}] if request.system
                      else []), *to_openai(request.projection).messages,
                    *({"role": "user", "content": m.text} for m in request.pending)]
            prompt = "\n\n".join(str(m.get("content") or "") for m in chat)
            reply = echo_checkpoint(prompt, self.summarize(prompt, chat))
        else:
            prompt = "\n\n".join([request.system or "", *(m.text for m in request.pending)])
            reply = echo_checkpoint(prompt, self.summarize(prompt))
        return ChatResponse(message=text_message("assistant", reply), stop_reason="end_turn")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield StreamDone(await self.complete(request))


class _Counting:
    """The system's LLM summariser, counting its fallbacks and fitted answers."""

    def __init__(self, system: Contextfold) -> None:
        self.system = system

    @property
    def name(self) -> str:
        return self.system.summarizer.name

    @property
    def session_prefix(self) -> bool:
        """SPEC Q3, as the wrapped summariser says (the engine prices compactions by it)."""
        return self.system.summarizer.session_prefix

    async def summarize(self, plan: Plan) -> Summary:
        outcome = await self.system.summarizer.summarize(plan)
        self.system.fallbacks += outcome.fell_back
        self.system.fitted += any("fitted" in p for p in outcome.problems)
        return outcome


class Contextfold:
    """contextfold's replay engine, trigger and tail set to the shared values."""

    name = "contextfold"

    def __init__(self, summarize: Callable[..., str], budget: Any = None, *,
                 offline: bool = False) -> None:
        # The summariser is the session's own model (the shared one), as `summarize.factory`
        # builds it when a user names no other: its request starts with the session's
        # prefix (SPEC Q3). `offline`: contextfold's offline summariser instead (None), the
        # default when no model is named; the shared fake is then never called.
        self.summarizer = LlmSummarizer(EchoChatModel(summarize), CAPACITY, session_prefix=True)
        # As `replay_messages` builds it: no exact counter, the catalog family's estimate.
        # The summariser answers in-process, so the engine's steps finish without waiting.
        self.session = ManagedSession(CAPACITY, budget or BUDGET,
                                      None if offline else _Counting(self))
        self.pending: list[tuple[int, Message]] = []
        self.repairs = 0
        self.fallbacks = 0
        self.fitted = 0  # answers over budget, trimmed by priority (summarize.llm)
        # SPEC L5: requests that carried an automatic recall block, and its tokens (the
        # engine's estimate), summed over the requests decided.
        self.recall_requests = 0
        self.recall_tokens = 0
        self.recall_seconds = 0.0  # spent choosing the blocks (search included)
        # SPEC Q5: the decisions (0-based, one per call in a quality run) whose request has
        # another checkpoint than the previous one: where a prefix break is expected.
        self.checkpoint_calls: list[int] = []
        self._decisions = 0
        self._checkpoint_id: str | None = None
        self._time_recall()

    def _time_recall(self) -> None:
        """Time the engine's automatic recall step (SPEC L5) inside each decision: what L5
        adds to a request, measured in the same process as the rest of the check."""
        recall = getattr(self.session, "auto_recall", None)
        if recall is None:  # an engine without L5
            return
        apply = recall.apply

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await apply(*args, **kwargs)
            finally:
                self.recall_seconds += time.perf_counter() - started

        recall.apply = timed


    def ingest(self, new: Sequence[Neutral]) -> None:
        # Converted here, untimed, as every peer converts to its framework's messages in
        # `ingest`: an application holds its messages in contextfold's types already.
        self.pending.extend((m["i"], to_message(m)) for m in new)

    def decide(self) -> Projection:
        # The replay engine's own steps: auto after a turn, preflight before a user message,
        # and the fit check before the request (contextfold.replay.ManagedSession).
        for i, message in self.pending:
            if message.role == "user":
                self.session.before_user_message(message)
            self.session.append(message, f"m{i}")
        self.pending = []
        projection, _ = self.session.before_request()
        checkpoint = projection.checkpoint.id if projection.checkpoint is not None else None
        if checkpoint != self._checkpoint_id:
            self.checkpoint_calls.append(self._decisions)
            self._checkpoint_id = checkpoint
        self._decisions += 1
        recalled = getattr(projection, "recalled", ())  # SPEC Q5: the blocks since the checkpoint
        if recalled:
            self.recall_requests += 1
            self.recall_tokens += sum(b.tokens for b in recalled)
        return projection

    def to_openai(self, request: Projection) -> list[dict[str, Any]]:
        exported = to_openai(request)
        self.repairs += len(exported.repairs)
        return exported.messages

    @staticmethod
    def cache_marks(request: Projection, chat: list[dict[str, Any]]) -> list[int]:
        """Where contextfold's Anthropic wire puts `cache_control` (SPEC Q3): the system
        prompt, the checkpoint (it opens the first user message) and the last message."""
        if not chat:
            return []
        marks = [0] if chat[0].get("role") == "system" else []
        if request.checkpoint is not None or request.summary is not None:
            marks.append(len(marks))
        return sorted({*marks, len(chat) - 1})
