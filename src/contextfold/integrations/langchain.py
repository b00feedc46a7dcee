"""`ContextfoldMiddleware`: contextfold inside a LangChain v1 agent (`create_agent`).

    from langchain.agents import create_agent
    from contextfold.integrations.langchain import ContextfoldMiddleware

    agent = create_agent(model, tools=tools, middleware=[ContextfoldMiddleware("sessions.db")])

Before every model call the agent's whole message list is mirrored into the durable tree by
content (`runtime.mirror`: what is stored is not stored again, an earlier message that
changed starts a branch, nothing is ever rewritten) and the model is shown the projection
that fits its window: the latest checkpoint summary, then the recent messages verbatim (the
agent's own message objects), compacting first when they would not fit (SPEC P1-P3, Y1-Y3).
After the call the reply is stored with its usage (E1) and the auto check runs (A1).

The agent's state is left whole: LangGraph checkpointers, `thread_id`s, interrupts and
`get_state` work as without the middleware; only the model request is smaller. One
contextfold session per LangGraph thread (without a checkpointer: one per conversation,
found by content). See docs/integrations.md for sync use, model switches and recall.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ..errors import MissingExtraError

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise MissingExtraError.needed_by(__name__, "LangChain v1", "langchain") from exc

from ..core.models.budget import CompactionSettings, ModelCapacity
from ..core.models.catalog import capacity_for
from ..core.values.messages import ToolCallPart
from ..providers.base import ToolSpec
from ..runtime.compaction import CompactionOutcome
from ..runtime.mirror import Mirror, Synced
from ..runtime.recall import RECALL_TOOLS, Recall
from ..store.protocol import SessionStore
from .langchain_messages import (
    RECALL_ID_PREFIX,
    SUMMARY_ID_PREFIX,
    Converted,
    from_message,
    settle,
    to_message,
)
from .loop_thread import HeldStore

__all__ = ["ContextfoldMiddleware"]

T = TypeVar("T")
DEFAULT_SCOPE = "langchain"


class ContextfoldMiddleware(AgentMiddleware):
    """Durable history, checkpoints, preflight and recall for a `create_agent` agent.

    `store`: a database URL or path (None: the default contextfold database), opened by the
    middleware on its own loop thread, so both `invoke` and `ainvoke` work; or an open
    `SessionStore`, then used on the caller's event loop (`ainvoke` / `astream` only).
    `session_id`: keep every thread in this one session (default: one per `thread_id`).
    `capacity`: the model's window (`ModelCapacity` or a catalog name); default: read per
    call from the request's model (`profile["max_input_tokens"]`, else the catalog by its
    name), so a model switched mid-run is sized as it is. `summarizer`: as for
    `Conversation` (None: the offline extractive one). `instructions`: the default
    instructions of `compact` (SPEC M6: what the summary must keep).
    `recall`: offer `history_search` / `history_expand` as LangChain tools (SPEC L2).
    """

    def __init__(self, store: SessionStore | str | None = None, *, session_id: str | None = None,
                 capacity: ModelCapacity | str | None = None, summarizer: Any = None,
                 settings: CompactionSettings | None = None, instructions: str | None = None,
                 recall: bool = True, scope: str = DEFAULT_SCOPE,
                 background: bool = False) -> None:
        super().__init__()
        self._held = HeldStore(store, thread="contextfold-langchain", make_mirror=self._mirror)
        self._session_id = session_id
        self._capacity = capacity_for(capacity) if isinstance(capacity, str) else capacity
        self._summarizer = summarizer
        self._settings = settings
        self._background = background
        self.instructions = instructions
        self.scope = scope
        self._sessions: dict[str, str] = {}  # thread key -> session id
        self._last: dict[str, Synced] = {}  # session id -> what the model was last shown
        self._convert = Converted()
        self.tools: list[BaseTool] = _recall_tools(self) if recall else []
        self._warned_no_tools = False
        # What the last call sent, for applications and tests: the messages and the repairs
        # `settle` made (none unless the agent's own state broke tool pairing).
        self.last_request: list[BaseMessage] = []
        self.last_repairs: list[str] = []

    # ------------------------------------------------------------------ LangChain hooks

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        """Sync agents: the store work runs on the middleware's loop thread (blocking this
        one, as a sync model call does); the model runs here, in LangGraph's thread."""
        self._held.refuse_sync(
            "ContextfoldMiddleware was given an open store, which lives on its own event "
            "loop: run the agent with ainvoke/astream, or pass the store URL for invoke")
        key = _thread_key(request)
        request = self._bindable(request)
        synced = self._held.loop.run(self._sync(request, key))
        response = handler(self._shown(request, synced))
        self._held.loop.run(self._record(synced, response))
        return response

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> Any:
        """Async agents: the same steps, awaited (on the loop thread if the store is ours)."""
        key = _thread_key(request)
        request = self._bindable(request)
        synced = await self._held.run(self._sync(request, key))
        response = await handler(self._shown(request, synced))
        await self._held.run(self._record(synced, response))
        return response

    # ------------------------------------------------------------------ application API

    def compact(self, thread_id: str | None = None, *, instructions: str | None = None,
                model: Any = None) -> CompactionOutcome:
        """Compact a thread's session now (SPEC M1-M6); `instructions` say what the summary
        must keep. Sync form of `acompact`."""
        self._held.refuse_sync("the store is the caller's: use `await middleware.acompact()`")
        return self._held.loop.run(self._compact(thread_id, instructions, model))

    async def acompact(self, thread_id: str | None = None, *, instructions: str | None = None,
                       model: Any = None) -> CompactionOutcome:
        """Compact a thread's session now (SPEC M1-M6). The session is the one the thread's
        latest model call used; `model` (a chat model) sizes it, default its last size."""
        return await self._held.run(self._compact(thread_id, instructions, model))

    def session_id_for(self, thread_id: str | None = None) -> str | None:
        """The contextfold session of a LangGraph thread (None: no model call seen yet)."""
        return self._session_id or self._sessions.get(_key(thread_id))

    async def aclose(self) -> None:
        """Close the store the middleware opened (an application's own store stays open)."""
        await self._held.aclose()

    def close(self) -> None:
        """Sync form of `aclose`."""
        self._held.close()

    # ------------------------------------------------------------------ internals

    def _mirror(self, store: SessionStore) -> Mirror:
        return Mirror(store, summarizer=self._summarizer, settings=self._settings,
                      background=self._background)

    def _bindable(self, request: ModelRequest) -> ModelRequest:
        """The request without the recall tools when its chat model cannot bind tools
        (`bind_tools` raises NotImplementedError, as LangChain's base class does): the agent
        goes on without recall, and says so once (a RuntimeWarning)."""
        ours = {tool.name for tool in self.tools}
        if not ours or not any(getattr(t, "name", None) in ours for t in request.tools):
            return request
        if _binds_tools(request.model):
            return request
        if not self._warned_no_tools:
            self._warned_no_tools = True
            text = (f"{_model_name(request.model)} cannot bind tools (bind_tools is not "
                    "implemented): contextfold's history_search / history_expand are not "
                    "offered to it; pass recall=False to ContextfoldMiddleware to silence this")
            warnings.warn(text, RuntimeWarning, stacklevel=3)
        return request.override(tools=[t for t in request.tools
                                       if getattr(t, "name", None) not in ours])

    async def _sync(self, request: ModelRequest, key: str) -> Synced:
        mirror = await self._held.ready()
        # The mirror finds a thread's session by content under its scope each time (the
        # hash chain depends on the scope, so it must not change between calls); a fixed
        # session_id is its own scope.
        synced = await mirror.sync(
            self._convert(request.messages), capacity=self._capacity_of(request.model),
            scope=f"{self.scope}:{key}", session_id=self._session_id,
            system=request.system_prompt, tools=_tool_specs(request.tools))
        self._sessions[key] = synced.session_id
        self._last[synced.session_id] = synced
        return synced

    def _shown(self, request: ModelRequest, synced: Synced) -> ModelRequest:
        """The request with the projection instead of the whole list."""
        shown: list[BaseMessage] = []
        for item in synced.items():
            if item.recall:  # SPEC L5, Q5: a turn's recall block or a pin note
                text = item.message.text
                block = next((b for b in synced.projection.recalled
                              if text.endswith(b.text)), None)
                name = block.before_id if block is not None else \
                    "pin-" + hashlib.sha256(text.encode()).hexdigest()[:12]
                shown.append(HumanMessage(content=text, id=RECALL_ID_PREFIX + name))
            elif item.index is None:
                checkpoint = synced.projection.checkpoint
                shown.append(HumanMessage(content=item.message.text, id=SUMMARY_ID_PREFIX + (
                    checkpoint.id if checkpoint is not None else "pins")))
            elif item.verbatim:
                shown.append(request.messages[item.index])
            else:
                shown.append(from_message(item.message, request.messages[item.index]))
        messages, repairs = settle(shown)
        self.last_request, self.last_repairs = messages, repairs
        return request.override(messages=messages)

    async def _record(self, synced: Synced, response: Any) -> None:
        reply = _reply_of(response)
        if reply is not None:
            mirror = await self._held.ready()
            await mirror.record_reply(synced, to_message(reply))

    async def _compact(self, thread_id: str | None, instructions: str | None,
                       model: Any) -> CompactionOutcome:
        session_id = self.session_id_for(thread_id)
        if session_id is None:
            raise LookupError(f"no model call of thread {thread_id!r} went through this "
                              "middleware yet: nothing to compact")
        last = self._last.get(session_id)
        capacity = self._capacity_of(model) if model is not None else (
            last.capacity if last is not None else self._capacity)
        if capacity is None:
            raise ValueError("give the chat model (model=...) to size the compaction")
        mirror = await self._held.ready()
        return await mirror.compact(session_id, capacity=capacity,
                                    instructions=instructions or self.instructions)

    def _capacity_of(self, model: Any) -> ModelCapacity:
        """The window of the request's model (a switched model is sized as it is): the
        model resolver's, from the model's own profile (`max_input_tokens`) when it has one,
        else the catalog (with `$CONTEXTFOLD_MODELS`) by its name."""
        if self._capacity is not None:
            return self._capacity
        from ..core.sizing.resolver import ModelProfile, ModelResolver, UnknownModelError

        name = _model_name(model)
        try:
            return ModelResolver().resolve(name, profile=ModelProfile.of(model)).capacity
        except UnknownModelError as exc:
            raise UnknownModelError(name, close_names=exc.close_names, known=exc.known, give=(
                f"ContextfoldMiddleware(capacity=capacity_for({name!r}, context_window=N)) "
                "(capacity_for is contextfold's: `from contextfold import capacity_for`), "
                "or a chat model whose profile has max_input_tokens")) from None

    async def _recall(self, call: ToolCallPart, thread_id: str | None) -> str:
        """Answer one recall call against the session of the calling thread."""
        session_id = self.session_id_for(thread_id)
        if session_id is None:
            return "no history yet: this thread has not called the model through contextfold"
        mirror = await self._held.ready()
        last = self._last.get(session_id)
        seen = {n.id for n in last.projection.messages} if last is not None else set()
        result = await Recall(mirror.store, session_id).run(call, in_context=seen)
        return result.output


# --------------------------------------------------------------------------- helpers


def _key(thread_id: str | None) -> str:
    return f"thread:{thread_id}" if thread_id else "default"


def _config_thread() -> str | None:
    try:
        from langgraph.config import get_config

        return (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # outside a graph run
        return None


def _thread_key(request: ModelRequest) -> str:
    """The LangGraph thread of this call (one contextfold session per thread)."""
    info = getattr(request.runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None) or _config_thread()
    return _key(thread)


def _model_name(model: Any) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return getattr(model, "_llm_type", type(model).__name__)


def _binds_tools(model: Any) -> bool:
    """Whether a chat model can bind tools: binding (no call is made) does not raise
    NotImplementedError. Decided once per model class."""
    kind = type(model)
    if kind not in _BINDS_TOOLS:
        try:
            model.bind_tools([])
            _BINDS_TOOLS[kind] = True
        except NotImplementedError:
            _BINDS_TOOLS[kind] = False
        except Exception:  # another refusal (e.g. of an empty list) is not "cannot bind"
            _BINDS_TOOLS[kind] = True
    return _BINDS_TOOLS[kind]


_BINDS_TOOLS: dict[type, bool] = {}


def _tool_specs(tools: Sequence[Any]) -> list[ToolSpec]:
    """The request's tools as `ToolSpec`s, so their definitions count in the estimate."""
    specs = []
    for tool in tools:
        try:
            fn = convert_to_openai_tool(tool)["function"]
        except (ValueError, TypeError, KeyError):
            continue  # a provider built-in tool (a dict without a function): sized by nobody
        specs.append(ToolSpec(name=fn["name"], description=fn.get("description", ""),
                              input_schema=fn.get("parameters") or {"type": "object"}))
    return specs


def _reply_of(response: Any) -> AIMessage | None:
    if isinstance(response, AIMessage):
        return response
    inner = getattr(response, "model_response", response)
    for message in getattr(inner, "result", ()):
        if isinstance(message, AIMessage):
            return message
    return None


def _recall_tool(middleware: ContextfoldMiddleware, spec: ToolSpec) -> BaseTool:
    """One recall tool as a LangChain tool; the thread is read in the caller's context."""

    async def arun(**args: Any) -> str:
        call = ToolCallPart(id="recall", name=spec.name, input=args)
        return await middleware._held.run(middleware._recall(call, _config_thread()))

    def run(**args: Any) -> str:
        middleware._held.refuse_sync(
            "the store is the caller's: run the agent with ainvoke/astream")
        call = ToolCallPart(id="recall", name=spec.name, input=args)
        return middleware._held.loop.run(middleware._recall(call, _config_thread()))

    return StructuredTool.from_function(func=run, coroutine=arun, name=spec.name,
                                        description=spec.description,
                                        args_schema=spec.input_schema)


def _recall_tools(middleware: ContextfoldMiddleware) -> list[BaseTool]:
    """`history_search` and `history_expand` as LangChain tools (SPEC L2)."""
    return [_recall_tool(middleware, spec) for spec in RECALL_TOOLS]
