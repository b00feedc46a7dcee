"""`contextfold chat`: an interactive terminal chat whose context never overflows.

The terminal (line editing, Ctrl-C) lives on the main thread; the conversation, the store
and the model run on an asyncio loop in a background thread. So an automatic compaction
keeps running while the user types (SPEC U2), a send waits for it behind a spinner, and
Ctrl-C during that wait cancels the compaction and puts the unsent draft back on the input
line (U1, U3). The session itself is in `chat_session` (imported when the command runs).

Windows: `--context-window` is the largest window this chat may use, for every model (the
server's real limit, or "use less of it"); `/model NAME WINDOW` sets one explicitly. When
the provider refuses a request as too long and names its limit, that limit is learned for
the model in this session (stored with the session) and used from then on (SPEC P4).
"""

from __future__ import annotations

from typing import Any

import typer

from .app import DB_OPTION, BadInput, Output, app, console, run
from .session_args import resolve_model

LEARNED_KEY = "learned_context_windows"  # session metadata: model -> window the provider named


async def _whole_id(store: Any, ref: str) -> str:
    from ..store.refs import resolve_session_id

    return await resolve_session_id(store, ref)


@app.command("chat")
def chat_command(
    model: str | None = typer.Option(
        None, "--model", help="Chat model, e.g. anthropic/claude-sonnet-4-5, openai/gpt-4o, "
        "ollama/qwen3:8b (default: the resumed session's model, else $CONTEXTFOLD_MODEL, else "
        "offline/echo)."),
    provider: str | None = typer.Option(None, "--provider",
                                        help="Provider, if the model name does not say."),
    base_url: str | None = typer.Option(None, "--base-url",
                                        help="Endpoint of an OpenAI-compatible server."),
    summarizer_model: str | None = typer.Option(
        None, "--summarizer-model",
        help="Model that writes checkpoint summaries (default: offline extractive)."),
    context_window: int | None = typer.Option(
        None, "--context-window", help="Context window in tokens (for a model the catalog "
        "lacks, or to use less of it); the cap for every model of this chat."),
    max_output: int | None = typer.Option(None, "--max-output", help="Max output tokens."),
    on_overflow: str = typer.Option(
        "surface", "--on-overflow", help="When the provider still says the request is too "
        "long: 'surface' (tell me) or 'retry' (compact and retry once)."),
    system: str | None = typer.Option(None, "--system", help="System prompt."),
    session: str | None = typer.Option(
        None, "--session", help="Resume this session: its id, any unique prefix of it, or "
        "`latest`."),
    db: str | None = DB_OPTION,
) -> None:
    """Chat in the terminal; the history is stored and compacted as it grows."""
    out = Output(False)
    if on_overflow not in ("surface", "retry"):
        out.fail(BadInput(f"--on-overflow must be 'surface' or 'retry', not {on_overflow!r}"),
                 2)
    learned: dict[str, int] = {}
    resumed: list[str] = []  # the whole id of the session --session names

    def resolved_model(name: str | None, window: int | None = None, *,
                       recorded: str | None = None) -> Any:
        from ..core.sizing.resolver import ModelResolver

        # --context-window is the cap of every model of this chat (the window of one the
        # catalog lacks); `/model NAME WINDOW` gives one explicitly.
        return resolve_model(name, recorded, context_window=window, max_output=max_output,
                             learned=learned.get(name), guaranteed=False,
                             resolver=ModelResolver(cap=context_window))

    def make_model(name: str, window: int | None = None) -> tuple[Any, Any]:
        from ..providers import make_chat_model

        chat = make_chat_model(name, base_url=base_url, provider=provider)
        return chat, resolved_model(name, window).capacity

    async def setup() -> tuple[Any, Any]:
        from ..core.sizing.resolver import ModelResolver
        from ..runtime import Conversation
        from ..store import open_store
        from ..summarize.factory import summarizer_for

        store = await open_store(db)
        try:
            if resumed:
                info = await store.get_session(resumed[0])
                learned.update(info.metadata.get(LEARNED_KEY) or {})
            chat, capacity = make_model(model)
            summarizer = summarizer_for(summarizer_model, ModelResolver(cap=context_window),
                                        chat=resolved_model(model), base_url=base_url,
                                        provider=provider)
            policy = "compact_and_retry_once" if on_overflow == "retry" else "surface"
            conv = await Conversation.open(store, resumed[0] if resumed else None,
                                           model=chat, capacity=capacity, system=system,
                                           summarizer=summarizer, title="contextfold chat",
                                           overflow_policy=policy)
        except BaseException:
            await store.close()
            raise
        return store, conv

    def check() -> str:  # bad options fail fast with the CLI's exit codes
        recorded = None
        if session is not None:  # the session's whole id, and the model it was written with
            from .session_args import read_only, stored_model

            resumed[:] = [read_only(db, lambda store: _whole_id(store, session))]
            if model is None:
                recorded = read_only(db, lambda store: stored_model(store, resumed[0]))
        name = model or resolved_model(None, recorded=recorded).name
        make_model(name)
        return name

    model = run(out, check)
    from .chat_session import ChatSession, _Loop

    loop = _Loop()
    try:
        store, conv = loop.run(setup())
    except Exception as exc:
        loop.stop()
        out.fail(exc, 2 if isinstance(exc, BadInput | LookupError | ValueError) else 1)

    def learn(conv: Any, name: str, exc: Any) -> int | None:
        """Keep the limit the provider named for model `name` in this session (stored with
        the session, so a resumed chat knows it too) and use it from the next request on."""
        limit = getattr(exc, "limit_tokens", None)
        if not limit or limit >= conv.capacity.context_window:
            return None
        learned[name] = int(limit)
        loop.run(store.update_session_metadata(conv.session_id, {LEARNED_KEY: dict(learned)}))
        chat_model, capacity = make_model(name)
        loop.run_sync(lambda: conv.switch_model(chat_model, capacity))
        return int(capacity.context_window)

    chat = ChatSession(loop, conv, make_model, learn, model)
    try:
        chat.repl()
    finally:
        try:
            loop.run(chat.conv.close())
            loop.run(store.close())
        finally:
            loop.stop()
    console.print(f"session {chat.conv.session_id} saved; resume with "
                  f"--session {chat.conv.session_id}", highlight=False, style="dim",
                  markup=False)
