"""contextfold as the compaction of an Inspect AI agent (extra `contextfold[inspect]`).

    from inspect_ai.agent import react
    from contextfold.integrations.inspect_ai import ContextfoldCompaction

    agent = react(tools=[...], compaction=ContextfoldCompaction("evals.db"))

Inspect's `react()` (and any agent built on `inspect_ai.model.compaction()`) takes a
`CompactionStrategy`: its handler counts the conversation before every model call and, over
the strategy's `threshold`, calls `strategy.compact(model, messages, tools)` and sends what
it returns; the messages that follow are appended to that until the threshold is passed
again. `ContextfoldCompaction` is such a strategy. When Inspect asks it to compact:

* the conversation is mirrored into contextfold's durable tree by content
  (`runtime.mirror`, SPEC Y1): one contextfold session per sample, nothing stored twice;
  the compacted view Inspect hands back is expanded to the whole conversation first (by
  message id), so a compaction never looks like an edit;
* contextfold compacts (SPEC M1-M6; P2 when the request is over the safe limit) and returns
  its projection: the checkpoint summary (and pins) as one user message, then the recent
  messages verbatim, Inspect's own message objects, tool calls and results paired (K1);
* `threshold` defaults to contextfold's auto threshold for the model's window (the budget
  of SPEC B1-B3), the window read from Inspect's model info (`set_model_info`) or
  contextfold's catalog.

Inspect keeps the sample's whole conversation in `state.messages` (compaction shapes what
the model is sent, never the record); contextfold keeps it too, with the checkpoints,
searchable and branchable (`contextfold show`, the page). See docs/inspect.md.

Inspect's messages read and written back are in `inspect_messages`; this module is the
strategy and the hook that tells it a sample ended.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingExtraError

try:
    from inspect_ai.hooks import Hooks, SampleEnd, hooks
    from inspect_ai.model import (
        ChatMessage,
        ChatMessageUser,
        CompactionStrategy,
        Model,
        get_model,
        get_model_info,
    )
    from inspect_ai.model._model_info import get_model_input_tokens
    from inspect_ai.tool import Tool, ToolDef, ToolInfo, ToolParams
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError.needed_by(__name__, "Inspect AI", "inspect") from exc

from ..core.models.budget import CompactionSettings, ModelCapacity, derive_budget
from ..core.models.catalog import capacity_for
from ..core.values.messages import Message, ToolCallPart
from ..providers.base import ToolSpec
from ..runtime.compaction import CompactionOutcome
from ..runtime.mirror import Mirror, Synced
from ..runtime.recall import RECALL_TOOLS, Recall
from ..store.protocol import SessionStore
from .inspect_messages import OWN_ID_PREFIX, _tool_specs, from_messages, to_messages
from .loop_thread import HeldStore

__all__ = ["ContextfoldCompaction", "from_messages", "to_messages"]


# --------------------------------------------------------------------------- the strategy


@dataclass
class _Conversation:
    """What the strategy holds of one sample's conversation: every message seen, in order
    (the whole conversation, which Inspect's compacted view stands for), and its session."""

    messages: list[ChatMessage] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    session_id: str | None = None
    last: Synced | None = None
    key: str = "default"  # the sample's (see `_sample_key`)

    def expand(self, given: Sequence[ChatMessage]) -> list[ChatMessage]:
        """The whole conversation behind `given`: the messages seen before, then those of
        `given` not seen yet. contextfold's own messages are left out, and so is a message
        Inspect merged from known ones (it collapses consecutive user messages for some
        APIs: the merged one has a new id and names its sources in `combined_from`)."""
        for m in given:
            mid = m.id or ""
            if mid in self.seen or mid.startswith(OWN_ID_PREFIX):
                continue
            merged = (m.metadata or {}).get("combined_from")
            if isinstance(merged, list) and merged and all(
                    isinstance(x, str) and (x in self.seen or x.startswith(OWN_ID_PREFIX))
                    for x in merged):
                self.seen.add(mid)
                continue
            self.messages.append(m)
            if mid:
                self.seen.add(mid)
        return list(self.messages)


class ContextfoldCompaction(CompactionStrategy):
    """contextfold's compaction as an Inspect `CompactionStrategy` (see the module doc).

    `store`: a database URL or path (None: the default contextfold database), opened by the
    strategy on its own loop thread (Inspect runs every `eval()` on a new event loop); or an
    open `SessionStore`, then used on Inspect's loop (one `eval()` per store).
    `threshold`: when Inspect asks for a compaction, in Inspect's token count: a number of
    tokens, or a share of the window (<= 1.0); None (default): contextfold's auto threshold
    for the model's window. `capacity`: the model's window (`ModelCapacity` or a catalog
    name); default: per call from the model Inspect compacts for (its window from Inspect's
    model info, else contextfold's catalog by its name). `summarizer`: as for `Mirror`
    (None: the offline extractive one); or `summarizer_model` (and `summarizer_base_url`):
    a model contextfold's providers serve (`anthropic/claude-haiku-4-5`, a local server's
    model), built as every face builds its LLM summariser (`summarize.factory`), not the
    model under evaluation. `settings`: contextfold's budgets' knobs.
    `instructions`: what the summary must keep (SPEC M6). `session_id`: keep every sample in
    this one session (default: one session per sample and epoch).
    """

    def __init__(self, store: SessionStore | str | None = None, *,
                 threshold: int | float | None = None,
                 capacity: ModelCapacity | str | None = None, summarizer: Any = None,
                 settings: CompactionSettings | None = None, instructions: str | None = None,
                 session_id: str | None = None, summarizer_model: str | None = None,
                 summarizer_base_url: str | None = None) -> None:
        if summarizer is not None and summarizer_model is not None:
            raise ValueError("give summarizer or summarizer_model, not both")
        self._threshold: int | float | None = None
        # Inspect's memory warning needs its memory tool; contextfold keeps every message.
        super().__init__(type="summary", threshold=threshold, memory=False)  # type: ignore[arg-type]
        self._held = HeldStore(store, thread="contextfold-inspect", make_mirror=self._mirror)
        self._capacity = capacity_for(capacity) if isinstance(capacity, str) else capacity
        self._summarizer = summarizer
        self._summarizer_model = summarizer_model
        self._summarizer_base_url = summarizer_base_url
        self.settings = settings
        self.instructions = instructions
        self._session_id = session_id
        self._conversations: dict[str, _Conversation] = {}
        # What stays after a sample ends (its messages are released): its session and the
        # compactions made in it.
        self._sessions: dict[str, str] = {}
        self._outcomes: dict[str, list[CompactionOutcome]] = {}
        _LIVE.add(self)

    # ------------------------------------------------------------------ Inspect's interface

    @property  # type: ignore[override]
    def threshold(self) -> int | float:
        """When Inspect's handler calls `compact`: the value given, else contextfold's auto
        threshold (SPEC A1) for the window of the model in use (read once per sample, by
        Inspect, on the sample's first model call)."""
        if self._threshold is not None:
            return self._threshold
        try:
            model = get_model()
        except Exception:  # no model in use (Inspect describing the strategy): the default
            return 0.9
        return derive_budget(self.capacity_of(model), self.settings).auto_threshold

    @threshold.setter
    def threshold(self, value: int | float | None) -> None:
        self._threshold = value

    async def compact(self, model: Model, messages: list[ChatMessage],
                      tools: list[ToolInfo]) -> tuple[list[ChatMessage], ChatMessageUser | None]:
        """Store the conversation, compact it and return the projection to send (Inspect's
        `CompactionStrategy.compact`). Nothing is returned to append to the record: the
        checkpoint lives in contextfold's store."""
        conversation = self._conversation()
        full = conversation.expand(messages)
        converted, sources, system = to_messages(full)
        if not converted:
            return list(messages), None
        capacity = self.capacity_of(model)
        synced = await self._held.run(self._compact(conversation, converted, capacity, system,
                                               _tool_specs(tools)))
        return from_messages(synced, full, sources), None

    # ------------------------------------------------------------------ application API

    def capacity_of(self, model: Model) -> ModelCapacity:
        """The window contextfold sizes for: `capacity` if given, else the model resolver's,
        from Inspect's model info for `model` (its window and max output), else the
        catalog by the model's name."""
        if self._capacity is not None:
            return self._capacity
        from ..core.models.catalog import UnknownModelError
        from ..core.sizing.resolver import ModelProfile, ModelResolver

        window = get_model_input_tokens(model)
        info = get_model_info(model)
        output = info.output_tokens if info is not None else None
        profile = ModelProfile(window, output) if window else None
        name = str(model)
        try:
            return ModelResolver(settings=self.settings).resolve(name, profile=profile).capacity
        except UnknownModelError as exc:
            raise UnknownModelError(name, close_names=exc.close_names, known=exc.known, give=(
                f"Inspect's set_model_info({name!r}, ModelInfo(context_length=N)), or "
                f"ContextfoldCompaction(capacity=capacity_for({name!r}, context_window=N)) "
                "(capacity_for is contextfold's: `from contextfold import capacity_for`)"
            )) from None

    def build_summarizer(self) -> Any:
        """The LLM summariser of `summarizer_model` (None without one), made by
        `summarize.factory.summarizer_for` with the model resolver: sized like any model,
        served by contextfold's providers with the user's own keys."""
        from ..core.sizing.resolver import ModelResolver
        from ..summarize.factory import summarizer_for

        return summarizer_for(self._summarizer_model, ModelResolver(settings=self.settings),
                              base_url=self._summarizer_base_url)

    def recall_tools(self) -> list[Tool]:
        """`history_search` / `history_expand` (SPEC L2) as Inspect tools over the running
        sample's session: what a compaction folded is one search away. Give them to the
        agent beside its own: `react(tools=[*tools, *strategy.recall_tools()], ...)`."""
        return [ToolDef(self._recall_runner(spec.name), name=spec.name,
                        description=spec.description,
                        parameters=_described(spec.input_schema)).as_tool()
                for spec in RECALL_TOOLS]

    def _recall_runner(self, name: str) -> Any:
        async def execute(**args: Any) -> str:
            conversation = self._conversations.get(_sample_key())
            if conversation is None or conversation.session_id is None or \
                    self._held.store is None:
                return ("[tool error] nothing was compacted yet: the whole conversation "
                        "is in front of you")
            call = ToolCallPart(id="recall", name=name, input=args)
            last = conversation.last
            seen = {n.id for n in last.projection.messages} if last is not None else set()
            recall = Recall(self._held.store, conversation.session_id)
            result = await self._held.run(recall.run(call, in_context=seen))
            return f"[tool error] {result.output}" if result.is_error else result.output

        return execute

    def session_ids(self) -> dict[str, str]:
        """The contextfold session of each sample compacted so far (key: the sample's
        Inspect uuid, "default" outside a sample)."""
        return dict(self._sessions)

    def outcomes(self) -> dict[str, list[CompactionOutcome]]:
        """The compactions contextfold made, per sample (the checkpoints it stored)."""
        return {key: list(outcomes) for key, outcomes in self._outcomes.items()}

    def held(self) -> list[str]:
        """The samples whose messages the strategy holds (the running ones)."""
        return list(self._conversations)

    def sample_ended(self, key: str) -> None:
        """Forget the messages held for the sample `key` (its session and outcomes stay
        listed). Called by the hook below when Inspect ends a sample, so a long eval holds
        only its running samples."""
        self._conversations.pop(key, None)

    @property
    def url(self) -> str | None:
        """The database the strategy opens (None: an application's store, or the default
        contextfold database when no store was given)."""
        return self._held.url

    @property
    def store(self) -> SessionStore | None:
        """The store the conversations are kept in (None before the first compaction)."""
        return self._held.store

    async def aclose(self) -> None:
        """Close the store the strategy opened (an application's own store stays open)."""
        await self._held.aclose()

    def close(self) -> None:
        """Sync form of `aclose` (after `eval()` returned)."""
        self._held.close()

    # ------------------------------------------------------------------ internals

    def _conversation(self) -> _Conversation:
        key = _sample_key()
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = self._conversations[key] = _Conversation(session_id=self._session_id,
                                                                    key=key)
        return conversation

    def _mirror(self, store: SessionStore) -> Mirror:
        if self._summarizer is None and self._summarizer_model is not None:
            self._summarizer = self.build_summarizer()
        # Inspect waits for the compaction, so the auto check runs in line.
        return Mirror(store, summarizer=self._summarizer, settings=self.settings,
                      background=False)

    async def _compact(self, conversation: _Conversation, converted: Sequence[Message],
                       capacity: ModelCapacity, system: str | None,
                       tools: Sequence[ToolSpec]) -> Synced:
        mirror = await self._held.ready()
        if conversation.session_id is None:
            # Made here, not found by content: every sync names the session, so the
            # content chain is always made in the same scope (a sample's first compaction
            # and its later ones hash alike).
            info = await mirror.store.create_session(title=_title(converted),
                                                     metadata={"source": "inspect_ai"})
            conversation.session_id = info.id
        synced = await mirror.sync(converted, capacity=capacity,
                                   session_id=conversation.session_id, system=system,
                                   tools=tools)
        self._sessions[conversation.key] = synced.session_id
        outcomes = self._outcomes.setdefault(conversation.key, [])
        outcomes += [o for o in synced.compactions if o.status == "compacted"]
        if not any(o.status == "compacted" for o in synced.compactions):
            # Inspect's threshold was passed but the request is still inside contextfold's
            # safe limit: compact now, as Inspect asks (SPEC M1), and project again.
            outcome = await mirror.compact(synced.session_id, capacity=capacity,
                                           instructions=self.instructions, system=system,
                                           tools=tools)
            if outcome.status == "compacted":
                outcomes.append(outcome)
                synced = await mirror.sync(converted, capacity=capacity,
                                           session_id=synced.session_id, system=system,
                                           tools=tools)
        conversation.last = synced
        return synced


# Every strategy alive, for the hook that tells them a sample ended.
_LIVE: weakref.WeakSet[ContextfoldCompaction] = weakref.WeakSet()


@hooks(name="compaction",
       description="releases what ContextfoldCompaction holds of a finished sample")
class _SampleEnded(Hooks):
    """Inspect's hook at the end of each sample (every epoch): the strategies forget the
    sample's messages (the store keeps them). Registered when this module is imported;
    Inspect lists it among the hooks it runs."""

    def enabled(self) -> bool:
        return len(_LIVE) > 0

    async def on_sample_end(self, data: SampleEnd) -> None:
        key = str(data.sample.uuid or "")
        for strategy in list(_LIVE):
            strategy.sample_ended(key)


# Inspect refuses a tool parameter without a description; contextfold's recall definitions
# leave them out (they travel with every request of the other faces, where the tool's own
# description says it), so they are added here, for Inspect only.
_PARAMETER_NOTES = {
    "query": "Words or identifiers to find.", "limit": "The most matches to return.",
    "node_id": "A node id from a search result or the checkpoint.",
    "before": "Messages to read before it.", "after": "Messages to read after it.",
    "to_node_id": "Read up to this node id.", "max_tokens": "The most tokens to return.",
}


def _described(schema: Mapping[str, Any]) -> ToolParams:
    """A recall tool's input schema as Inspect's `ToolParams`, every parameter described."""
    properties = {name: {**prop, "description": prop.get("description") or
                         _PARAMETER_NOTES.get(name, name.replace("_", " "))}
                  for name, prop in schema.get("properties", {}).items()}
    return ToolParams.model_validate({**schema, "properties": properties})


def _sample_key() -> str:
    """The running sample's Inspect uuid (one conversation per sample and epoch), or
    "default" outside a sample."""
    try:
        from inspect_ai.solver._task_state import sample_state
    except ImportError:  # pragma: no cover - Inspect moved it: one conversation
        return "default"
    state = sample_state()
    return str(getattr(state, "uuid", None) or "default") if state is not None else "default"


def _title(messages: Sequence[Message]) -> str:
    """The session's title: the task, the sample's first user message (shortened)."""
    for m in messages:
        if m.role == "user" and m.text.strip():
            first = " ".join(m.text.split())
            return "inspect: " + (first if len(first) <= 60 else first[:59] + "…")
    return "inspect"

