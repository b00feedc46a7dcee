"""contextfold as an OpenAI Agents SDK `Session` (extra `contextfold[openai-agents]`).

    store = await open_store()
    session = await ContextfoldSession.open(store, capacity=capacity_for("gpt-4o-mini"))
    agent = Agent(name="helper", instructions="...", tools=[*my_tools, *session.recall_tools()])
    result = await Runner.run(agent, "Find ...", session=session,
                              run_config=session.run_config())

* `get_items` returns the projection (checkpoint summary + pins + recent turns verbatim) as
  Responses input items; `add_items` appends to the durable store (nothing is ever deleted),
  with the usage the SDK measured for the reply (SPEC E1); `pop_item` moves the branch back
  one message, as retry does (O1: the old message stays in the tree); `clear_session` starts
  an empty branch.
* `run_config()` (or `call_model_input_filter=session.fit_input`) sizes every model call of a
  run: the SDK keeps a run's tool rounds in memory, so without it a long tool loop grows past
  the window. Before each call the request is estimated for the calling agent's model
  (`capacities` by model name: a handoff to a smaller model is a model switch, P2) and
  compacted when it would not fit (P1-P3); nothing that cannot fit is sent.
* After a completed turn the auto check runs in the background (A1); the next call waits
  for it. `compact(instructions)` compacts now (M1-M6).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ..errors import MissingExtraError

try:
    from agents import FunctionTool, RunConfig
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - depends on the install
    raise MissingExtraError.needed_by(__name__, "the OpenAI Agents SDK", "openai-agents") from exc

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.values.messages import Message, ToolCallPart, Usage
from ..core.values.tree import Branch
from ..core.view.projection import Projection, project
from ..providers.base import ToolSpec
from ..runtime.compaction import CompactionOutcome
from ..runtime.driver import BackgroundAuto, session_sizer
from ..runtime.errors import RequestTooLargeError
from ..runtime.fitting import SessionFit, fit_request, healthy
from ..runtime.recall import RECALL_TOOLS, Recall
from ..runtime.sizing import Sizer
from ..runtime.summarizers import guarded
from ..store.protocol import SessionStore
from ..wire.openai_responses import usage_of
from ..wire.parts import tool_arguments
from .responses_items import Item, items_to_messages, message_items, paired, projection_items

__all__ = ["ContextfoldSession"]

log = logging.getLogger("contextfold.openai_agents")


class ContextfoldSession:
    """An Agents SDK session over a contextfold store (see the module docstring)."""

    session_settings = None  # the SDK's per-session settings: none (limit is not needed)

    def __init__(self, store: SessionStore, session_id: str, *, capacity: ModelCapacity,
                 capacities: Mapping[str, ModelCapacity] | None = None,
                 summarizer: Any = None, settings: CompactionSettings | None = None,
                 background: bool = True, summarizer_timeout: float | None = 300.0) -> None:
        if not isinstance(capacity, ModelCapacity):
            raise TypeError("capacity must be a ModelCapacity (e.g. capacity_for('gpt-4o'))")
        self.store = store
        self.session_id = session_id
        self.capacity = capacity
        self.capacities = dict(capacities or {})
        self.settings = settings
        self.background = background
        self._summarize = guarded(summarizer, timeout=summarizer_timeout)
        self._lock = asyncio.Lock()
        self._auto = BackgroundAuto(log)
        self._sizer: Sizer | None = None
        self._system: str | None = None
        self._tools: tuple[ToolSpec, ...] = ()
        self._read = 0  # items the last get_items returned (the start of the run's input)
        self._added = 0  # items given to add_items since then
        self._held: list[Message] = []  # a run's new input, stored once its call is sized
        # (the run's Usage object, entries used): the object itself, not its id(), since a
        # finished run's id can be reused by the next run's Usage
        self._usage_seen: tuple[Any, int] = (None, 0)
        self.compactions: list[CompactionOutcome] = []  # every compaction this object ran
        self.recall = Recall(store, session_id)

    @classmethod
    async def open(cls, store: SessionStore, session_id: str | None = None, *,
                   title: str | None = None, **options: Any) -> ContextfoldSession:
        """Open `session_id` of `store`, or a new session when None (options: see class)."""
        if session_id is None:
            session_id = (await store.create_session(title=title)).id
        else:
            await store.get_session(session_id)  # SessionNotFoundError names the id
        return cls(store, session_id, **options)

    # ------------------------------------------------------------------ the Session protocol

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Item]:
        """The projection as Responses input items (the latest `limit` if given, pairs kept).

        Compacts first when the stored projection is already over the auto threshold (a
        compaction that an earlier process did not get to run)."""
        del wrapper
        async with self._lock:
            await self._settle()
            await self._flush_held()
            fit = self._fit(self._current_sizer(self.capacity), await self._branch())
            await fit.auto()
            items, _ = paired(projection_items(fit.projection()))
            if limit is not None:
                items, _ = paired(items[-limit:] if limit > 0 else [])
            self._read, self._added = len(items), 0
            return items

    async def add_items(self, items: list[Item], *, wrapper: Any = None) -> None:
        """Append `items` to the durable branch (one transaction), with the usage the SDK
        measured for the model response they came from; then the auto check (A1).

        A run's new user input is held until its first model call is sized (`fit_input`):
        like a draft (P1) it must not be folded into the compaction that makes room for it.
        """
        if not items:
            return
        async with self._lock:
            await self._settle()
            branch = await self._branch()
            messages = items_to_messages(items, call_names=_call_names(branch),
                                         usage=self._take_usage(wrapper))
            self._added += len(items)
            if messages and all(m.role in ("user", "system") for m in messages):
                self._held += messages
                return
            await self._flush_held()
            if messages:
                await self.store.append_many(self.session_id, messages)
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and not last.tool_calls:
                self._start_auto()  # the turn ended with the model's answer

    async def pop_item(self, *, wrapper: Any = None) -> Item | None:
        """Remove the most recent item from the branch and return it.

        The branch moves back (retry's meaning, O1): the old message stays in the tree and
        checkpoints after it leave the branch. A message that held several items (a reply
        with its calls) is replaced on the branch by one without its last item."""
        del wrapper
        async with self._lock:
            await self._settle()
            await self._flush_held()
            node = await self.store.pop_message(self.session_id)
            if node is None or node.message is None:
                return None
            items = message_items(node.message)
            if len(items) > 1:
                rest = items_to_messages(items[:-1], call_names=_call_names(await self._branch()))
                await self.store.append_many(self.session_id, rest)
            self._read = max(0, self._read - 1)
            return items[-1] if items else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Start over with an empty branch; the durable history stays in the store."""
        del wrapper
        async with self._lock:
            await self._settle()
            self._held.clear()
            await self.store.clear_branch(self.session_id)
            self._read = self._added = 0

    async def run_compaction(self, args: Mapping[str, Any] | None = None) -> None:
        """The SDK's compaction hook (called after a turn): `force` compacts now (M1),
        otherwise the auto check (A1)."""
        if args and args.get("force"):
            await self.compact()
            return
        async with self._lock:
            self._start_auto()

    # ------------------------------------------------------------------ sizing every call

    def run_config(self, **options: Any) -> RunConfig:
        """A `RunConfig` whose `call_model_input_filter` is `fit_input` (other options as
        given)."""
        return RunConfig(call_model_input_filter=self.fit_input, **options)

    async def fit_input(self, data: CallModelData[Any]) -> ModelInputData:
        """Make the model call of a run fit the calling agent's model (SPEC P1-P3).

        The run's input is the history `get_items` returned, then what the run added; what
        of that is already stored is replaced by the current projection, so a compaction
        during the run (or a smaller model after a handoff) shrinks the request."""
        given = list(data.model_data.input)
        capacity = self.capacity_of(data.agent)
        async with self._lock:
            await self._settle()
            self._system = data.model_data.instructions
            self._tools = _agent_tools(data.agent)
            sizer = self._current_sizer(capacity)
            stored = self._read + self._added
            unsaved = given[stored:] if len(given) >= stored else []
            branch = await self._branch()
            pending = (*self._held, *items_to_messages(unsaved,
                                                       call_names=_call_names(branch)))
            try:
                fit = self._fit(sizer, branch)
                await fit_request(fit, pending)
                branch = fit.branch
            except RequestTooLargeError:
                self._held.clear()  # P3: the input is not saved (the caller still has it)
                raise
            if self._held:
                await self._flush_held()
                branch = await self._branch()
            items, _ = paired(projection_items(project(branch)) + unsaved)
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    def capacity_of(self, agent: Any) -> ModelCapacity:
        """The window of the model `agent` calls: `capacities[name]`, else `capacity`."""
        from ..core.sizing.resolver import given_capacity

        model = getattr(agent, "model", None)
        name = model if isinstance(model, str) else getattr(model, "model", None)
        return given_capacity(name, self.capacities, self.capacity)

    def switch_model(self, capacity: ModelCapacity) -> None:
        """Use `capacity` from the next call on (a smaller window compacts then, P2)."""
        self.capacity = capacity

    # ------------------------------------------------------------------ compaction, recall

    async def compact(self, instructions: str | None = None) -> CompactionOutcome:
        """Compact now (SPEC M1-M6); a no-op says why."""
        async with self._lock:
            await self._settle()
            await self._flush_held()
            fit = self._fit(self._current_sizer(self.capacity), await self._branch())
            return await fit.compact("manual", instructions=instructions)

    async def wait_idle(self) -> None:
        """Wait for a background auto compaction to end."""
        async with self._lock:
            await self._settle()

    async def projection(self) -> Projection:
        """What the model sees next (without system prompt and tools)."""
        return project(await self._branch())

    def recall_tools(self) -> list[FunctionTool]:
        """`history_search` / `history_expand` (SPEC L2) as Agents SDK `FunctionTool`s over
        this session's branch: everything compacted stays reachable."""
        return [FunctionTool(name=spec.name, description=spec.description,
                             params_json_schema=spec.input_schema,
                             on_invoke_tool=self._recall_runner(spec.name),
                             strict_json_schema=False) for spec in RECALL_TOOLS]

    def _recall_runner(self, name: str) -> Any:
        async def invoke(ctx: Any, arguments: str) -> str:
            args = tool_arguments(arguments)  # the one rule; a recall tool takes an object
            call = ToolCallPart(id=getattr(ctx, "tool_call_id", None) or "recall", name=name,
                                input=args if isinstance(args, dict) else {})
            seen = {n.id for n in (await self.projection()).messages}
            result = await self.recall.run(call, in_context=seen)
            return f"[tool error] {result.output}" if result.is_error else result.output

        return invoke

    # ------------------------------------------------------------------ internals

    def _current_sizer(self, capacity: ModelCapacity) -> Sizer:
        self._sizer = session_sizer(capacity, settings=self.settings, system=self._system,
                                    tools=self._tools, summarize=self._summarize,
                                    held=self._sizer)
        return self._sizer

    async def _flush_held(self) -> None:
        held, self._held = self._held, []
        if held:
            await self.store.append_many(self.session_id, held)

    async def _branch(self) -> Branch:
        return healthy(await self.store.load_branch(self.session_id), self.session_id)

    def _fit(self, sizer: Sizer, branch: Branch) -> SessionFit:
        """This session sized for `sizer`'s model, as the sizing driver's target; every
        compaction it runs is recorded in `compactions`."""
        return SessionFit(self.store, self.session_id, sizer, self._summarize, branch,
                          outcomes=self.compactions)

    def _start_auto(self) -> None:
        """A1: compact between turns when the projection is over the auto threshold
        (one check at a time: one not settled yet is left to run)."""
        sizer = self._current_sizer(self.capacity)

        async def fit() -> SessionFit:
            return self._fit(sizer, await self._branch())

        self._auto.start(self.session_id, fit)

    async def _settle(self) -> None:
        """Wait for the background check (its failure never breaks the next call)."""
        await self._auto.settle()

    def _take_usage(self, wrapper: Any) -> Usage | None:
        """The last model request's usage, once (the run's totals are never used, E3)."""
        usage = getattr(wrapper, "usage", None)
        entries = getattr(usage, "request_usage_entries", None)
        if not entries:
            return None
        run, seen = self._usage_seen
        if run is not usage:
            seen = 0
        self._usage_seen = (usage, len(entries))
        if len(entries) <= seen:
            return None
        # A request's usage is the Responses API's own object (input_tokens with the cached
        # ones inside, input_tokens_details.cached_tokens): read by that protocol's reader.
        return usage_of(entries[-1], self.capacity.model)


def _call_names(branch: Branch) -> dict[str, str]:
    """Tool names by call id in the loaded tail (an output item names only its call)."""
    names: dict[str, str] = {}
    for node in branch.nodes:
        if node.message is not None:
            names.update({c.id: c.name for c in node.message.tool_calls})
    return names


def _agent_tools(agent: Any) -> tuple[ToolSpec, ...]:
    """The agent's function tools as `ToolSpec`s (they count in every request, E2)."""
    out = []
    for tool in getattr(agent, "tools", None) or ():
        schema = getattr(tool, "params_json_schema", None)
        name = getattr(tool, "name", None)
        if name and isinstance(schema, dict):
            out.append(ToolSpec(name=name, description=getattr(tool, "description", "") or "",
                                input_schema=schema))
    for handoff in getattr(agent, "handoffs", None) or ():
        name = getattr(handoff, "tool_name", None)
        if name:
            out.append(ToolSpec(name=name, description=getattr(handoff, "tool_description",
                                                               "") or ""))
    return tuple(out)
