"""`contextfold chat`: an interactive terminal chat whose context never overflows.

The terminal (line editing, Ctrl-C) lives on the main thread; the conversation, the store
and the model run on an asyncio loop in a background thread. So an automatic compaction
keeps running while the user types (SPEC U2), a send waits for it behind a spinner, and
Ctrl-C during that wait cancels the compaction and puts the unsent draft back on the input
line (U1, U3).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.markup import escape

from ..core.export import to_openai
from ..runtime import (
    Conversation,
    ConversationError,
    DraftTooLargeError,
    Event,
    SendAbortedError,
)
from .app import DB_OPTION, BadInput, Output, app, console, err_console, run
from .render import SHOW_PAGE, render_compaction, render_projection, render_tree

try:  # line editing and putting a draft back on the input line
    import readline
except ImportError:  # pragma: no cover - Windows without pyreadline
    readline = None  # type: ignore[assignment]

T = TypeVar("T")
PROMPT = "you> "
HELP = ("/compact [instructions]  /retry  /edit [text]  /fork [node-id]  /model NAME [window]  "
        "/history  /context  /pin [text]  /pins  /unpin N  /help  /quit")


class _Loop:
    """An asyncio loop on a daemon thread; the main thread submits coroutines to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="contextfold-chat",
                                        daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def call(self, fn: Callable[[], Any]) -> None:
        self.loop.call_soon_threadsafe(fn)

    def run_sync(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the loop thread (the conversation is not thread-safe)."""

        async def call() -> T:
            return fn()

        return self.run(call())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


def _read_line(prefill: str) -> str:
    """One line from the user; `prefill` is put on the line, editable (the kept draft)."""
    if prefill and readline is not None:
        readline.set_startup_hook(lambda: readline.insert_text(prefill))
    try:
        return input(PROMPT)
    finally:
        if readline is not None:
            readline.set_startup_hook(None)


class ChatSession:
    """The REPL: reads lines, runs them on the conversation, shows what happened."""

    def __init__(self, loop: _Loop, conv: Conversation, make_model: Callable[..., Any]) -> None:
        self.loop = loop
        self.conv = conv
        self.make_model = make_model
        self.prefill = ""
        self.reply_missing = False  # the last message got no reply (interrupted / error)
        self.events: queue.Queue[Event] = queue.Queue()
        self._unsubscribe = conv.subscribe(self.events.put)

    # ------------------------------------------------------------------ main loop

    def repl(self) -> None:
        console.print(f"[bold]contextfold chat[/] · {self.conv.capacity.model} · session "
                      f"{self.conv.session_id}\n[dim]{HELP}[/]")
        self.show_gauge()
        while True:
            self.show_events()
            if self.conv.state.compacting:
                console.print("[magenta]Compacting earlier context…[/] [dim](keep typing; a "
                              "send waits for it; Ctrl-C while waiting cancels it)[/]")
            try:
                line = _read_line(self.prefill)
            except EOFError:
                console.print()
                return
            except KeyboardInterrupt:
                console.print("\n[dim](Ctrl-D or /quit to leave)[/]")
                continue
            self.prefill = ""
            text = line.strip()
            if text in ("/quit", "/exit"):
                return
            try:
                if text.startswith("/"):
                    self.command(text)
                elif text:
                    self.send(line)
                elif self.reply_missing:
                    self.reply(self.conv.continue_turn())
            except (ConversationError, ValueError, LookupError) as exc:
                err_console.print(f"[red]{exc}[/]")
            except Exception as exc:  # provider and store errors: show, keep the session
                err_console.print(f"[red]{type(exc).__name__}: {exc}[/]")

    # ------------------------------------------------------------------ sending

    def send(self, text: str) -> None:
        try:
            self.reply(self.conv.send(text))
        except (DraftTooLargeError, SendAbortedError) as exc:
            err_console.print(f"[yellow]{exc}[/]")
            draft = exc.draft.text if exc.draft is not None else text
            self.prefill = draft  # nothing was sent: the draft goes back on the line
            self.show_events()

    def reply(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.reply_missing = True
        result = self.wait(coro)
        if result is None:
            console.print("[yellow]interrupted: no reply. Press Enter on an empty line to ask "
                          "again.[/]")
            return
        self.reply_missing = False
        self.show_events()
        console.print(f"[bold green]assistant>[/] {result.text}", highlight=False)
        self.show_gauge()

    def wait(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """Run `coro` behind a spinner. Ctrl-C cancels a running compaction (the call then
        reports it), or else the call itself (returns None)."""
        future = self.loop.submit(coro)
        with console.status(self._label(), spinner="dots") as status:
            while True:
                try:
                    return future.result(timeout=0.1)
                except concurrent.futures.TimeoutError:
                    status.update(self._label())
                except concurrent.futures.CancelledError:
                    return None
                except KeyboardInterrupt:
                    if self.conv.state.compacting:
                        self.loop.call(self.conv.cancel_compaction)
                    else:
                        future.cancel()

    def _label(self) -> str:
        if self.conv.state.compacting:
            return "[magenta]Compacting earlier context…[/] [dim](Ctrl-C cancels)[/]"
        return "Thinking…"

    # ------------------------------------------------------------------ commands

    def command(self, text: str) -> None:
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        if name == "/compact":
            outcome = self.wait(self._compact(arg or None))
            if outcome is not None:
                render_compaction(outcome.to_json())
            self.show_gauge()
        elif name == "/retry":
            self.reply(self.conv.retry())
        elif name == "/edit":
            self.edit(arg)
        elif name == "/fork":
            self.fork(arg)
        elif name == "/model":
            self.switch(arg)
        elif name == "/history":
            self.history()
        elif name == "/context":
            projection = self.conv.projection()
            render_projection({
                "model": self.conv.capacity.model,
                "estimated_tokens": self.conv.estimate().tokens,
                "safe_input_limit": self.conv.budget.safe_input_limit,
                "messages": to_openai(projection, self.conv.system).messages,
            })
        elif name in ("/pin", "/pins", "/unpin"):
            self.pins(name, arg)
        elif name == "/help":
            console.print(HELP)
        else:
            raise BadInput(f"unknown command {name!r}; {HELP}")

    async def _compact(self, instructions: str | None) -> Any:
        # An automatic compaction may be running: let it finish, then compact on top of it
        # (the library refuses a second concurrent compaction, SPEC U4).
        await self.conv.wait_idle()
        return await self.conv.compact(instructions)

    def edit(self, arg: str) -> None:
        if not arg:
            last = next((n.message.text for n in reversed(self.conv.projection().messages)
                         if n.is_user_message), "")
            self.prefill = f"/edit {last}"
            console.print("[dim]edit the last message and press Enter[/]")
            return
        try:
            self.reply(self.conv.edit(arg))
        except DraftTooLargeError as exc:
            err_console.print(f"[yellow]{exc}[/]")
            self.prefill = f"/edit {arg}"

    def fork(self, arg: str) -> None:
        node_id = arg or next((n.id for n in reversed(self.conv.projection().messages)
                               if n.message is not None and n.message.role == "assistant"), "")
        if not node_id:
            raise BadInput("nothing to fork from yet: fork needs an assistant reply")
        old = self.conv
        self.conv = self.loop.run(old.fork(node_id))
        self._unsubscribe()
        self._unsubscribe = self.conv.subscribe(self.events.put)
        self.loop.run(old.close())
        console.print(f"[green]forked[/] from {node_id} into session {self.conv.session_id}")
        self.show_gauge()

    def pins(self, name: str, arg: str) -> None:
        """/pin TEXT, /pin (the last user message), /pins, /unpin N (SPEC N1-N2)."""
        if name == "/pin":
            if arg:
                work = self.conv.pin(arg)
            else:
                last = next((n.id for n in reversed(self.conv.projection().messages)
                             if n.is_user_message), None)
                if last is None:
                    raise BadInput("nothing to pin yet: /pin TEXT, or send a message first")
                work = self.conv.pin(node_id=last)
            try:
                self.loop.run(work)
            except ValueError as exc:  # PinRefusedError says by how much
                raise BadInput(str(exc)) from exc
            console.print(f"[green]pinned[/] ({len(self.conv.pins())} active)", highlight=False)
        elif name == "/unpin":
            active = self.conv.pins()
            if not arg.isdigit() or not 1 <= int(arg) <= len(active):
                raise BadInput(f"usage: /unpin N with N from /pins (1-{len(active)})")
            pin = self.loop.run(self.conv.unpin(active[int(arg) - 1].pin_id))
            console.print(f"[green]unpinned[/] {escape(pin.text[:60])}", highlight=False)
        for n, pin in enumerate(self.conv.pins(), 1):
            console.print(f"[cyan]{n}[/] {escape(pin.text)}", highlight=False)
        if not self.conv.pins():
            console.print("[dim]no pins[/]")

    def switch(self, arg: str) -> None:
        parts = arg.split()
        if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise BadInput("usage: /model NAME [CONTEXT_WINDOW]")
        model, capacity = self.make_model(parts[0], int(parts[1]) if len(parts) == 2 else None)
        gauge = self.loop.run_sync(lambda: self.conv.switch_model(model, capacity))
        console.print(f"[green]model[/] {capacity.model}: {gauge}")
        if gauge.tokens > gauge.safe_input_limit:
            console.print("[dim]the history does not fit this model: the next send compacts "
                          "it first[/]")

    def history(self) -> None:
        store, sid = self.conv.store, self.conv.session_id

        async def load() -> tuple[Any, Any, Any]:
            # One page: /history stays instant however long the session has grown.
            return (await store.get_session(sid), await store.load_tree_page(sid, limit=SHOW_PAGE),
                    await self.conv.history(limit=SHOW_PAGE))

        info, nodes, branch = self.loop.run(load())
        render_tree(info, nodes, branch, self.conv.branch, page=True)

    # ------------------------------------------------------------------ display

    def show_gauge(self) -> None:
        gauge = self.conv.gauge()
        colour = "red" if gauge.tokens > gauge.auto_threshold else "dim"
        console.print(f"[{colour}]context {gauge.tokens:,} / {gauge.safe_input_limit:,} tokens "
                      f"({gauge.fraction:.0%} of the safe limit)[/]", highlight=False)

    def show_events(self) -> None:
        while not self.events.empty():
            event = self.events.get_nowait()
            if event.kind == "compaction_finished" and event.outcome is not None:
                render_compaction(event.outcome.to_json())
            elif event.kind == "compaction_cancelled":
                console.print("[yellow]compaction cancelled; nothing was changed[/]")
            elif event.kind == "compaction_failed":
                console.print(f"[red]compaction failed:[/] {event.reason}")
            elif event.kind == "compaction_stale":
                console.print("[yellow]the branch changed during compaction; reloaded it[/]")
            elif event.kind == "summarizer_fallback":
                console.print(f"[yellow]summary written offline instead:[/] {event.reason}")


@app.command("chat")
def chat_command(
    model: str = typer.Option(..., "--model", help="Chat model, e.g. anthropic/claude-sonnet-4-5,"
                              " openai/gpt-4o, ollama/qwen3:8b."),
    provider: str | None = typer.Option(None, "--provider",
                                        help="Provider, if the model name does not say."),
    base_url: str | None = typer.Option(None, "--base-url",
                                        help="Endpoint of an OpenAI-compatible server."),
    summarizer_model: str | None = typer.Option(
        None, "--summarizer-model",
        help="Model that writes checkpoint summaries (default: offline extractive)."),
    context_window: int | None = typer.Option(
        None, "--context-window", help="Context window in tokens (for a model the catalog "
        "lacks, or to use less of it)."),
    max_output: int | None = typer.Option(None, "--max-output", help="Max output tokens."),
    system: str | None = typer.Option(None, "--system", help="System prompt."),
    session: str | None = typer.Option(None, "--session", help="Resume this session id."),
    db: str | None = DB_OPTION,
) -> None:
    """Chat in the terminal; the history is stored and compacted as it grows."""
    out = Output(False)

    def make_model(name: str, window: int | None = None) -> tuple[Any, Any]:
        from ..core.catalog import capacity_for
        from ..providers import make_chat_model
        from .session_cmds import user_catalog

        chat = make_chat_model(name, base_url=base_url, provider=provider)
        capacity = capacity_for(name, context_window=window, max_output=max_output,
                                catalog=user_catalog())
        return chat, capacity

    async def setup() -> tuple[Any, Conversation]:
        from ..store import open_store
        from ..summarize.llm import LlmSummarizer

        chat, capacity = make_model(model, context_window)
        summarizer = None
        if summarizer_model:
            try:
                summ_chat, summ_capacity = make_model(summarizer_model)
            except LookupError:  # not in the catalog: assume the chat model's window
                summ_chat, summ_capacity = make_model(summarizer_model,
                                                      capacity.context_window)
            summarizer = LlmSummarizer(summ_chat, summ_capacity)
        store = await open_store(db)
        try:
            conv = await Conversation.open(store, session, model=chat, capacity=capacity,
                                           system=system, summarizer=summarizer,
                                           title="contextfold chat")
        except BaseException:
            await store.close()
            raise
        return store, conv

    async def check() -> None:  # bad options fail fast with the CLI's exit codes
        make_model(model, context_window)

    run(out, check)
    loop = _Loop()
    try:
        store, conv = loop.run(setup())
    except Exception as exc:
        loop.stop()
        out.fail(exc, 2 if isinstance(exc, BadInput | LookupError | ValueError) else 1)
    chat = ChatSession(loop, conv, make_model)
    try:
        chat.repl()
    finally:
        try:
            loop.run(chat.conv.close())
            loop.run(store.close())
        finally:
            loop.stop()
    console.print(f"session {chat.conv.session_id} saved; resume with "
                  f"--session {chat.conv.session_id}", highlight=False, style="dim")

