"""The `contextfold` command: shared options, output and error handling.

Exit codes are a contract: 0 success (a no-op is a success), 2 bad input, 3 busy (another
process is compacting the session; `compact --wait` waits instead), 1 anything else.
With `--json`, stdout carries exactly one JSON document (also for errors); humans get Rich
output instead.

Only Typer and Rich are imported at start: every command imports what it needs (the store,
the core, the provider SDKs) when it runs, so `--help` and the offline commands stay quick
and a base install without the provider extras works.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..errors import ContextfoldError, Kind, kind_of
from .help import CONTEXT, Typer, version_option

if TYPE_CHECKING:
    from ..runtime.errors import RequestTooLargeError

T = TypeVar("T")

app = Typer(
    name="contextfold",
    help="Long agent sessions that never overflow: durable history + a projection that fits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)

console = Console()
err_console = Console(stderr=True)

DB_ENV = "CONTEXTFOLD_DB"
DB_OPTION = typer.Option(
    None, "--db", envvar=DB_ENV,
    help="Database URL (default: the embedded SQLite file in your data directory).",
)
JSON_OPTION = typer.Option(False, "--json", help="Machine-readable output on stdout.")
# SPEC Y14: the one per-process cache of `proxy` and `serve` (`core.values.held.DEFAULT_BYTES`).
MEMORY_CACHE_OPTION = typer.Option(256, "--memory-cache", min=1, max=1 << 20,
                                   help="MiB a process holds of the conversations it serves "
                                   "(least recently used out; default 256).")


@app.callback()
def main(db: str | None = typer.Option(
    None, "--db", help="Database URL or SQLite file for the command that follows (the same "
    "as its own --db; default: $CONTEXTFOLD_DB, else the embedded SQLite file)."),
         version: bool = version_option()) -> None:
    """Long agent sessions that never overflow: durable history + a projection that fits."""
    # `--db` before the command, like `git -C`: handed on through the variable every
    # command's own --db reads (a --db after the command still wins).
    if db is not None:
        os.environ[DB_ENV] = db


def command_prefix() -> str:
    """How the user can run `contextfold` again from here, for hints that name a command.

    `contextfold` when that name on PATH is this installation's command; else the command's
    path (relative to the working directory when under it: `make demo` runs
    `.venv/bin/contextfold`, which is not on PATH until the venv is activated); else
    `python -m contextfold` with this interpreter."""
    import shutil
    from pathlib import Path

    script = Path(sys.executable).parent / ("contextfold.exe" if os.name == "nt" else
                                            "contextfold")
    on_path = shutil.which("contextfold")
    if on_path and script.exists() and Path(on_path).resolve() == script.resolve():
        return "contextfold"
    if script.exists():
        try:
            relative = script.absolute().relative_to(Path.cwd())
            return str(relative) if relative.parent != Path(".") else f"./{relative}"
        except ValueError:
            return str(script)
    return f"{sys.executable} -m contextfold"


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY = 0, 1, 2, 3

# The exit code of each kind of error (`contextfold.errors`): the command line's one map.
# A missing session or node and a damaged (read-only) one are the user's to fix: another
# id, or a fork of a healthy node.
EXIT_CODES: dict[Kind, int] = {
    "bad_input": EXIT_BAD_INPUT, "not_found": EXIT_BAD_INPUT, "read_only": EXIT_BAD_INPUT,
    "busy": EXIT_BUSY, "conflict": EXIT_FAILED, "too_large": EXIT_FAILED,
    "provider": EXIT_FAILED, "unavailable": EXIT_FAILED, "internal": EXIT_FAILED,
}


class BadInput(ContextfoldError):
    """Raised by commands for input the user must fix (exit code 2)."""

    kind = "bad_input"


def exit_code(error: BaseException) -> int:
    """The exit code for an error: by its kind, after the few exceptions of Python and
    pydantic that, reaching a command, can only mean the user's input is wrong (a file
    that is missing or a folder, a value that fails validation)."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError | FileNotFoundError | IsADirectoryError):
        return EXIT_BAD_INPUT
    return EXIT_CODES[kind_of(error)]


@dataclass
class Output:
    as_json: bool

    def emit(self, payload: dict[str, Any], human: Callable[[], None]) -> None:
        if self.as_json:
            sys.stdout.write(json.dumps(payload, ensure_ascii=False, default=str) + "\n")
        else:
            human()

    def fail(self, error: BaseException, code: int) -> NoReturn:
        message = cli_message(error)
        if self.as_json:
            sys.stdout.write(json.dumps({"error": message, "type": type(error).__name__,
                                         "kind": kind_of(error)}, ensure_ascii=False) + "\n")
        else:
            line = Text("error:", style="bold red")
            line.append(" " + message)  # may quote user input: never parsed as markup
            err_console.print(line, soft_wrap=True, highlight=False)
        raise typer.Exit(code)


def cli_message(error: BaseException) -> str:
    """The error's message in the command line's terms (commands, not Python functions)."""
    from ..summarize.extractive_fit import SummaryBudgetTooSmall

    if kind_of(error) == "too_large":
        return too_large_message(error)  # type: ignore[arg-type]
    if isinstance(error, SummaryBudgetTooSmall):
        return f"{error}; for this history give a larger --context-window (or --max-output)"
    return str(error) or type(error).__name__


def too_large_message(error: RequestTooLargeError) -> str:
    """A request that cannot fit even after compaction (SPEC P3), worded from its numbers."""
    draft = error.code == "draft_too_large"
    model = error.model or "the model"
    window = getattr(error, "context_window", None)
    # The safe limit is not the window: it leaves room for the reply and a margin.
    of_window = f" (of its {window:,}-token window)" if window else ""
    return (f"{'the message' if draft else 'the next request'} does not fit {model}: the "
            f"request needs about {error.estimated_tokens:,} tokens and the safe input limit "
            f"is {error.safe_input_limit:,}{of_window}, even after compaction; shorten "
            f"{'it' if draft else 'the input'} by at least {error.overflow_tokens:,} tokens or "
            f"choose a model with a larger window (--model, or /model in chat). Nothing was "
            f"{'sent or saved' if draft else 'sent'}.")


def run(out: Output, work: Callable[[], Awaitable[T]] | Callable[[], T]) -> T:
    """Run a command body, mapping exceptions to the exit-code contract.

    An async body runs under `asyncio.run`; a synchronous one (the reading commands, whose
    snapshot of an embedded database needs no event loop) runs as it is, so those commands
    never import asyncio.
    """
    try:
        result = work()
        if isinstance(result, Coroutine):
            import asyncio

            return asyncio.run(result)  # type: ignore[no-any-return]
        return result  # type: ignore[return-value]
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        out.fail(KeyboardInterrupt("interrupted"), 1)
    except MemoryError:  # an input too large for this machine is the user's to fix
        out.fail(BadInput("out of memory: the input is too large for this machine (imports "
                          "are limited by --max-bytes)"), 2)
    except UnicodeError as exc:  # text that is not Unicode reached an encoder
        out.fail(BadInput(f"the input holds text that cannot be encoded: {exc.reason}"), 2)
    except Exception as exc:
        out.fail(exc, exit_code(exc))
