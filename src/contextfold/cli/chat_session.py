"""The `contextfold chat` session: the REPL, its commands and what it shows.

Imported only when `chat` runs (it needs the runtime and, through the chosen model, a
provider SDK).

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

from rich.text import Text

from ..core.render.export import to_openai
from ..errors import ContextfoldError
from ..providers.errors import ContextOverflowError
from ..runtime import (
    Conversation,
    DraftTooLargeError,
    Event,
    SendAbortedError,
)
from .app import BadInput, cli_message, console, err_console
from .render import SHOW_PAGE, plain, render_compaction, render_projection, render_tree, say

try:  # line editing and putting a draft back on the input line
    import readline
except ImportError:  # pragma: no cover - Windows without pyreadline
    readline = None  # type: ignore[assignment]
else:
    # A pasted block arrives as one input (readline >= 8.1); make sure it is on even if an
    # inputrc turned it off, so a multi-line paste is one message, not one per line.
    readline.parse_and_bind("set enable-bracketed-paste on")

T = TypeVar("T")
PROMPT = "you> "
MORE = "...> "
BLOCK = '"""'  # a line of three quotes opens / closes a multi-line message
HELP = ("/compact [instructions]  /retry  /edit [text]  /fork [node-id]  /model NAME [window]  "
        "/history  /context  /request  /pin [text]  /pins  /unpin N  /help  /quit   "
        '(""" on its own line starts / ends a multi-line message; a paste is one message)')


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


def _read_line(prefill: str, prompt: str = PROMPT) -> str:
    """One line from the user; `prefill` is put on the line, editable (the kept draft)."""
    if prefill and readline is not None:
        readline.set_startup_hook(lambda: readline.insert_text(prefill))
    try:
        return input(prompt)
    finally:
        if readline is not None:
            readline.set_startup_hook(None)


def read_message(prefill: str) -> str:
    """One message: a line (a bracketed paste may hold several), or a triple-quote block."""
    line = _read_line(prefill)
    if line.strip() != BLOCK:
        return line
    lines: list[str] = []
    while (more := _read_line("", MORE)).strip() != BLOCK:
        lines.append(more)
    return "\n".join(lines)


class ChatSession:
    """The REPL: reads lines, runs them on the conversation, shows what happened."""

    def __init__(self, loop: _Loop, conv: Conversation, make_model: Callable[..., Any],
                 learn: Callable[[Conversation, str, ContextOverflowError], int | None]
                 | None = None, model_name: str = "") -> None:
        self.loop = loop
        self.learn = learn
        self.model_name = model_name or conv.capacity.model  # as typed: make_model takes it
        self.conv = conv
        self.make_model = make_model
        self.prefill = ""
        self.reply_missing = False  # the last message got no reply (interrupted / error)
        self.events: queue.Queue[Event] = queue.Queue()
        self._unsubscribe = conv.subscribe(self.events.put)

    # ------------------------------------------------------------------ main loop

    def repl(self) -> None:
        say(("contextfold chat", "bold"), f" · {self.conv.capacity.model} "
            f"({self.conv.capacity.context_window:,}-token window) · session "
            f"{self.conv.session_id}")
        say((HELP, "dim"))
        self.show_gauge()
        while True:
            self.show_events()
            if self.conv.state.compacting:
                console.print("[magenta]Compacting earlier context…[/] [dim](keep typing; a "
                              "send waits for it; Ctrl-C while waiting cancels it)[/]")
            try:
                line = read_message(self.prefill)
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
            except ContextOverflowError as exc:
                self.overflowed(exc)
            except (ContextfoldError, ValueError, LookupError) as exc:
                self.error(cli_message(exc))
            except Exception as exc:  # anything unexpected: show it with its type, keep going
                self.error(f"{type(exc).__name__}: {cli_message(exc)}")

    def error(self, message: str) -> None:
        err_console.print(plain(message, "red"), soft_wrap=True, highlight=False)

    def overflowed(self, exc: ContextOverflowError) -> None:
        """The provider said the request was too long (SPEC P4): say so, and learn the
        window it named, so the next send is sized for it (and compacts first if needed)."""
        self.error(f"the provider refused the request as too long: {cli_message(exc)}")
        window = (self.learn(self.conv, self.model_name, exc) if self.learn is not None
                  else None)
        if window is not None:
            say((f"learned: {self.conv.capacity.model} accepts {window:,} tokens here; the "
                 "next send fits that window (compacting first if needed). Press Enter on an "
                 "empty line to ask again.", "yellow"))

    # ------------------------------------------------------------------ sending

    def send(self, text: str) -> None:
        try:
            self.reply(self.conv.send(text))
        except (DraftTooLargeError, SendAbortedError) as exc:
            err_console.print(plain(cli_message(exc), "yellow"), soft_wrap=True)
            draft = exc.draft.text if exc.draft is not None else text
            self.prefill = draft  # nothing was sent: the draft goes back on the line
            self.show_events()

    def reply(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.reply_missing = True
        result = self.wait(coro)
        if result is None:
            say(("interrupted: no reply. Press Enter on an empty line to ask again.", "yellow"))
            return
        self.reply_missing = False
        self.show_events()
        line = Text("assistant>", style="bold green")
        line.append(" ")
        line.append_text(plain(reply_text(result.reply)))
        console.print(line, soft_wrap=True, highlight=False)
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

    def _label(self) -> str:  # our own words: markup is safe here
        if self.conv.state.compacting:
            return "[magenta]Compacting earlier context…[/] [dim](Ctrl-C cancels)[/]"
        return "Thinking…"

    # ------------------------------------------------------------------ commands

    def command(self, text: str) -> None:
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        if name == "/compact":
            self.show_events()  # whatever happened before this command
            outcome = self.wait(self._compact(arg or None))
            if outcome is not None:
                self.drop_manual_compaction_events()  # reported once, here
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
            self.context()
        elif name == "/request":
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
            say(HELP)
        else:
            raise BadInput(f"unknown command {name}; the commands are: {HELP}")

    def context(self) -> None:
        """/context: the next request by category, the free space, the next compaction and
        the saving (`core.report.breakdown.context_report`: what `contextfold context` and the
        page show), like Claude Code's /context."""
        from ..core.report.breakdown import context_report, history_figures
        from ..core.values.tree import Branch
        from .render import render_context

        conv, sizer = self.conv, self.conv.sizer
        estimate = conv.estimate()
        full = self.loop.run(conv.store.load_full_branch(conv.session_id))
        nodes = full.nodes if isinstance(full, Branch) else full.readable
        total, checkpoints = history_figures(nodes, sizer.costs, system=sizer.system,
                                             tools=sizer.tool_json)
        render_context({"model": conv.capacity.model, **context_report(
            conv.projection(), sizer.costs, system=sizer.system, tools=sizer.tool_json,
            used=estimate.tokens, method=estimate.method, limit=conv.budget.safe_input_limit,
            threshold=conv.budget.auto_threshold, context_window=conv.capacity.context_window,
            full_history=total, checkpoints=checkpoints)})

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
            say(("pinned", "green"), f" ({len(self.conv.pins())} active)")
        elif name == "/unpin":
            active = self.conv.pins()
            if not arg.isdigit() or not 1 <= int(arg) <= len(active):
                raise BadInput(f"usage: /unpin N with N from /pins (1-{len(active)})")
            pin = self.loop.run(self.conv.unpin(active[int(arg) - 1].pin_id))
            say(("unpinned", "green"), " ", pin.text[:60])
        for n, pin in enumerate(self.conv.pins(), 1):
            say((str(n), "cyan"), " ", pin.text)
        if not self.conv.pins():
            say(("no pins", "dim"))

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
            say(("edit the last message and press Enter", "dim"))
            return
        try:
            self.reply(self.conv.edit(arg))
        except DraftTooLargeError as exc:
            err_console.print(plain(cli_message(exc), "yellow"), soft_wrap=True)
            self.prefill = f"/edit {arg}"

    def fork(self, arg: str) -> None:
        node_id = arg or next((n.id for n in reversed(self.conv.projection().messages)
                               if n.message is not None and n.message.role == "assistant"), "")
        if not node_id:
            raise BadInput("nothing to fork from yet: fork needs an assistant reply")
        if arg:  # any unique prefix of the node's id, as everywhere an id is taken
            from ..store.refs import resolve_node_id

            node_id = self.loop.run(resolve_node_id(self.conv.store, self.conv.session_id,
                                                    arg))
        old = self.conv
        self.conv = self.loop.run(old.fork(node_id))
        self._unsubscribe()
        self._unsubscribe = self.conv.subscribe(self.events.put)
        self.loop.run(old.close())
        say(("forked", "green"), f" from {node_id} into session {self.conv.session_id}")
        self.show_gauge()

    def switch(self, arg: str) -> None:
        parts = arg.split()
        if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise BadInput("usage: /model NAME [CONTEXT_WINDOW]")
        model, capacity = self.make_model(parts[0], int(parts[1]) if len(parts) == 2 else None)
        gauge = self.loop.run_sync(lambda: self.conv.switch_model(model, capacity))
        self.model_name = parts[0]
        say(("model", "green"), f" {capacity.model} ({capacity.context_window:,}-token window): "
            f"{gauge}")
        if gauge.tokens > gauge.safe_input_limit:
            say(("the history does not fit this model: the next send compacts it first", "dim"))

    def history(self) -> None:
        store, sid = self.conv.store, self.conv.session_id

        async def load() -> tuple[Any, Any, Any]:
            # One page: /history stays instant however long the session has grown.
            return (await store.get_session(sid), await store.load_tree_page(sid, limit=SHOW_PAGE),
                    await self.conv.history(limit=SHOW_PAGE))

        info, nodes, branch = self.loop.run(load())
        complete = getattr(branch, "complete", True)
        render_tree(info, nodes, branch, self.conv.branch, page=None if complete else SHOW_PAGE)

    # ------------------------------------------------------------------ display

    def show_gauge(self) -> None:
        gauge = self.conv.gauge()
        colour = "red" if gauge.tokens > gauge.auto_threshold else "dim"
        say((f"context {gauge.tokens:,} / {gauge.safe_input_limit:,} tokens "
             f"({gauge.fraction:.0%} of the safe limit)", colour))

    def drop_manual_compaction_events(self) -> None:
        """Forget the events of the /compact just reported (it printed its own outcome)."""
        kept = []
        while not self.events.empty():
            event = self.events.get_nowait()
            if not (event.trigger == "manual" and event.kind.startswith("compaction_")):
                kept.append(event)
        for event in kept:
            self.events.put(event)

    def show_events(self) -> None:
        while not self.events.empty():
            event = self.events.get_nowait()
            if event.kind == "compaction_finished" and event.outcome is not None:
                render_compaction(event.outcome.to_json())
            elif event.kind == "compaction_cancelled":
                say(("compaction cancelled; nothing was changed", "yellow"))
            elif event.kind == "compaction_failed":
                say(("compaction failed:", "red"), " ", event.reason or "")
            elif event.kind == "compaction_stale":
                say(("the branch changed during compaction; reloaded it", "yellow"))
            elif event.kind == "summarizer_fallback":
                say(("summary written offline instead:", "yellow"), " ", event.reason or "")


def reply_text(message: Any) -> str:
    """A reply as shown: its text, else the tool calls it made (never "None")."""
    if message is None:
        return ""
    if message.text:
        return str(message.text)
    calls = ", ".join(f"{c.name}()" for c in message.tool_calls)
    return f"(tool calls: {calls})" if calls else "(empty reply)"
