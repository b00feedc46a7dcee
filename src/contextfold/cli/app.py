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
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

T = TypeVar("T")

app = typer.Typer(
    name="contextfold",
    help="Long agent sessions that never overflow: durable history + a projection that fits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True)

DB_ENV = "CONTEXTFOLD_DB"
DB_OPTION = typer.Option(
    None, "--db", envvar=DB_ENV,
    help="Database URL (default: the embedded SQLite file in your data directory).",
)
JSON_OPTION = typer.Option(False, "--json", help="Machine-readable output on stdout.")


@app.callback()
def main(db: str | None = typer.Option(
    None, "--db", help="Database URL or SQLite file for the command that follows (the same "
    "as its own --db; default: $CONTEXTFOLD_DB, else the embedded SQLite file).")) -> None:
    """Long agent sessions that never overflow: durable history + a projection that fits."""
    # `--db` before the command, like `git -C`: handed on through the variable every
    # command's own --db reads (a --db after the command still wins).
    if db is not None:
        os.environ[DB_ENV] = db


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUSY = 0, 1, 2, 3


class BadInput(Exception):
    """Raised by commands for input the user must fix (exit code 2)."""


def _bad_input_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean "your input is wrong", collected from every layer."""
    from pydantic import ValidationError

    from ..core.catalog import UnknownModelError
    from ..formats import ImportFormatError
    from ..store import (
        ConfigurationError,
        InvalidOperationError,
        NodeNotFoundError,
        ReadOnlySessionError,
        SessionNotFoundError,
    )
    from ..summarize.extractive_fit import SummaryBudgetTooSmall

    return (BadInput, ValidationError, FileNotFoundError, IsADirectoryError, UnknownModelError,
            ImportFormatError, SessionNotFoundError, InvalidOperationError, ReadOnlySessionError,
            NodeNotFoundError, ConfigurationError, SummaryBudgetTooSmall)


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
            sys.stdout.write(json.dumps({"error": message, "type": type(error).__name__},
                                        ensure_ascii=False) + "\n")
        else:
            line = Text("error:", style="bold red")
            line.append(" " + message)  # may quote user input: never parsed as markup
            err_console.print(line, soft_wrap=True, highlight=False)
        raise typer.Exit(code)


def cli_message(error: BaseException) -> str:
    """The error's message in the command line's terms (commands, not Python functions)."""
    from ..summarize.extractive_fit import SummaryBudgetTooSmall

    if isinstance(error, SummaryBudgetTooSmall):
        return f"{error}; for this history give a larger --context-window (or --max-output)"
    return str(error) or type(error).__name__


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
        out.fail(exc, 2 if isinstance(exc, _bad_input_types()) else 1)
