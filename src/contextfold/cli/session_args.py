"""What the commands on stored sessions share: the model and window options, the model
resolver's answer in the CLI's words, and reading a stored session (the read-only snapshot, a
session named by id, prefix or `latest`, a healthy branch and what a face recorded of it).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from .app import (
    BadInput,
    err_console,
)

if TYPE_CHECKING:
    from ..core.sizing.resolver import ModelResolver, ResolvedModel
    from ..core.values.tree import Branch
    from ..store.protocol import SessionReader


T = TypeVar("T")


MODEL_OPTION = typer.Option(
    None, "--model", help="Model whose window to fit (default: the session's recorded model, "
    "else $CONTEXTFOLD_MODEL, else offline/echo)."
)


WINDOW_OPTION = typer.Option(
    None, "--context-window", help="Context window in tokens, for a model the catalog lacks."
)


SESSION_HELP = ("Session id, or any unique prefix of it, or `latest` (`contextfold sessions` "
                "lists them).")


UNKNOWN_MODEL_FIX = "--context-window N (or an entry in the $CONTEXTFOLD_MODELS overrides file)"


def recorded_model(branch: Any) -> str | None:
    """`core.sizing.resolver.recorded_model`, imported when a command runs rather than at
    start-up."""
    from ..core.sizing.resolver import recorded_model as recorded

    return recorded(branch)


def resolve_model(
    explicit: str | None, recorded: str | None = None, context_window: int | None = None,
    *, compacts: bool = True, guaranteed: bool = True, resolver: ModelResolver | None = None,
    max_output: int | None = None, learned: int | None = None,
) -> ResolvedModel:
    """The model resolver's answer for a command's options, its errors in the CLI's words
    (bad input, exit 2): the explicit model, else the recorded one, else the default.

    For a command that compacts (`compacts`), a window too small to compact in is bad input
    naming the smallest that works: `guaranteed` for a command that compacts a whole
    recorded history at once, not for the chat (a few turns at a time); `project` only shows
    a request, whatever the window, and skips that check (and the summariser it loads).
    """
    from ..core.models.catalog import CatalogConfigError
    from ..core.sizing.resolver import InvalidWindowError, ModelResolver, UnknownModelError
    from ..core.sizing.resolver import WindowTooSmallError as TooSmall

    resolver = resolver or ModelResolver()
    try:
        resolved = resolver.resolve(explicit, recorded=recorded, context_window=context_window,
                                    max_output=max_output, learned=learned)
        if compacts and guaranteed:
            from ..summarize.extractive import smallest_summary_tokens

            resolver.check_window(resolved, smallest_summary_tokens(guaranteed=True))
        elif compacts:
            from ..runtime.sizing import check_live_window

            check_live_window(resolver, resolved)
    except InvalidWindowError as exc:
        option = "--max-output" if "output" in exc.what else "--context-window"
        raise BadInput(exc.explain(option)) from None
    except UnknownModelError as exc:
        raise BadInput(exc.explain(UNKNOWN_MODEL_FIX)) from None
    except CatalogConfigError as exc:  # the $CONTEXTFOLD_MODELS file is the user's to fix
        raise BadInput(f"$CONTEXTFOLD_MODELS: {exc}") from None
    except TooSmall as exc:
        raise BadInput(exc.explain("--context-window", "--max-output")) from None
    return resolved


def stderr_progress() -> Callable[[str], None]:
    """Progress lines of a long operation on stderr (stdout stays the command's result)."""
    start = time.monotonic()

    def say(line: str) -> None:
        err_console.print(f"[dim]{time.monotonic() - start:6.1f}s  {line}[/]", highlight=False)

    return say


def read_only(db: str | None, reads: Callable[[SessionReader], Awaitable[T]]) -> T:
    """Run a read-only command's `reads(store)`: the one place that picks the quick
    `sqlite3` snapshot of an embedded database (no SQLAlchemy or asyncio to import) or,
    whenever it cannot serve them exactly, the full store (docs/store.md). Synchronous:
    call it from a command's synchronous body."""
    from ..store.snapshot import read_only_store

    return read_only_store(db, reads)


async def session_id_of(store: SessionReader, ref: str) -> str:
    """The whole id of the session `ref` names: the id, a unique prefix of it or `latest`
    (`store.refs`, the one resolver of every face)."""
    from ..store.refs import resolve_session_id

    return await resolve_session_id(store, ref)


async def _healthy_and_metadata(store: SessionReader, ref: str
                                ) -> tuple[Branch, dict[str, Any]]:
    """`_load_healthy`'s branch and the session's metadata (what a face recorded of it)."""
    session_id = await session_id_of(store, ref)
    branch = await _load_healthy(store, session_id)
    return branch, dict((await store.get_session(session_id)).metadata)


def _sized_model(metadata: dict[str, Any]) -> str | None:
    from ..core.sizing.resolver import sized_for

    sized = sized_for(metadata)
    return sized[0] if sized else None


async def stored_model(store: SessionReader, session_id: str) -> str | None:
    """The model a stored session was written with: the branch's recorded model, else the
    one a face sized it for (what `project` and `compact` fit to without --model)."""
    branch = await store.load_branch(session_id)
    metadata = dict((await store.get_session(session_id)).metadata)
    return recorded_model(branch) or _sized_model(metadata)


def resolve_stored(explicit: str | None, context_window: int | None, branch: Any,
                   metadata: dict[str, Any], *, compacts: bool = True) -> ResolvedModel:
    """`resolve_model` for a stored session: the explicit model, else the one its branch
    records, else the one a face sized it for, with the window that face recorded (a proxied
    session is sized for the proxy's --model-window)."""
    return resolve_model(explicit, recorded_model(branch) or _sized_model(metadata),
                         context_window, compacts=compacts, resolver=recorded_resolver(metadata))


def recorded_resolver(metadata: dict[str, Any]) -> Any:
    """The model resolver for a stored session: the window a face recorded for it counts."""
    from ..core.sizing.resolver import recorded_resolver as resolver_for

    return resolver_for(metadata)


async def _load_healthy(store: SessionReader, session_id: str) -> Branch:
    from ..core.values.tree import DamagedBranch

    branch = await store.load_branch(session_id)
    if isinstance(branch, DamagedBranch):
        problems = "; ".join(str(p) for p in branch.problems)
        raise BadInput(f"session {session_id} is damaged and read-only: {problems}")
    if (await store.get_session(session_id)).read_only:  # damage in summarised history
        full = await store.load_full_branch(session_id)
        problems = "; ".join(str(p) for p in getattr(full, "problems", ())) or "marked read-only"
        raise BadInput(f"session {session_id} is damaged and read-only: {problems}")
    return branch
