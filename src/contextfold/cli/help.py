"""How `--help` reads: placeholders a person understands, `-h`, `--version`.

Typer labels every option with its Python type (`--json <bool>`, `--model <str>`). Flags
need no placeholder and a value reads better as what it is (`--model MODEL`,
`--context-window N`), so every command and group built here names its parameters' values
from their option names, unless a declaration gives a `metavar` of its own.
"""

from __future__ import annotations

import types
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

# `-h` as well as `--help`; click hands it on to every subcommand's context.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

# Values whose option name says less than a conventional placeholder does.
_BY_SUFFIX = {"url": "URL", "db": "URL", "upstream": "URL", "host": "HOST", "port": "PORT",
              "plot": "FILE.png"}


def placeholder(param: Any) -> str:
    """The placeholder shown for a parameter's value (empty for a flag)."""
    if getattr(param, "is_flag", False):
        return ""
    if isinstance(param, TyperArgument):
        return (param.name or "value").upper()
    # Typer describes the declared type (`type_descriptor`); older Typers hand it to click.
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if desc is not None else \
        getattr(getattr(param, "type", None), "choices", None)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    annotation = getattr(desc, "annotation", None)
    if annotation in (int, float) or getattr(getattr(param, "type", None), "name", "") in (
            "integer", "float", "integer range", "float range"):
        return "N"
    long = max(param.opts, key=len).lstrip("-")
    last = long.rsplit("-", 1)[-1]
    return _BY_SUFFIX.get(last, last.upper())


def tidy(params: list[Any]) -> list[Any]:
    """Give each parameter without a metavar its placeholder (in place; returns the list)."""
    for param in params:
        if param.metavar is None:
            param.metavar = placeholder(param)
            if isinstance(param, TyperArgument):
                # Its name column already shows the placeholder: no type label beside it.
                param.display_type_rich = types.MethodType(lambda self, ctx: None, param)
    return params


class Command(TyperCommand):
    """A command whose help names values, not Python types."""

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))


class Group(TyperGroup):
    """A group whose help names values, not Python types."""

    def get_params(self, ctx: Any) -> list[Any]:
        return tidy(super().get_params(ctx))


class Typer(typer.Typer):
    """`typer.Typer` whose groups and commands use the classes above."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        kwargs.setdefault("context_settings", CONTEXT)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("contextfold")
        except PackageNotFoundError:  # a source checkout that was never installed
            shown = "unknown (not installed)"
        typer.echo(f"contextfold {shown}")
        raise typer.Exit()


def version_option() -> Any:
    """`--version`: print the installed version and exit (before any command runs)."""
    return typer.Option(False, "--version", callback=_print_version, is_eager=True,
                        help="Show the version and exit.")
