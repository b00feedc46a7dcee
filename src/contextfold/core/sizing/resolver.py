"""The one model resolver (SPEC B1-B4): which model a face sizes for, and what it can hold.

The CLI, the service, the proxy, the framework integrations and replay all ask
`ModelResolver.resolve`; none picks a model or a window its own way. The model is, in order:

1. the explicit name (a `--model`, a session's stored model, the request's model);
2. else the model recorded on the branch (`recorded_model`), when the catalog knows it;
3. else the face's configured default (`serve --model`), else `$CONTEXTFOLD_MODEL`, else
   `BUILTIN_DEFAULT_MODEL` (`offline/echo`: the one model every face serves with no key).

Its window is the first of: the explicit window of the call, the face's window for that name
(the proxy's `--model-window NAME=N`), the face's window for every model (`*=N`, the
service's `--context-window`), the framework model's own profile (LangChain's
`max_input_tokens`), the catalog with the `$CONTEXTFOLD_MODELS` overrides, `OFFLINE_WINDOW`
for an `offline/*` model, and for a model the catalog lacks, the face's cap. Then the limits
apply: the cap (the chat's `--context-window`, unless the call gave its own window) and a
limit the provider named in an error (learned). A model the catalog lacks gets the derived
max output (`derived_max_output`), the same on every face.

`smallest_window` / `check_window` answer whether a window can hold a checkpoint. The summary
size they need comes from the summariser (`summarize.extractive.smallest_summary_tokens`),
passed in: the core does not import the summarisers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from ...errors import ContextfoldError
from ...user_config import configured_model, overrides_file
from ..models.budget import Budget, CompactionSettings, ModelCapacity, derive_budget
from ..models.catalog import ModelCatalog, UnknownModelError, default_catalog, derived_max_output
from ..money.prices import PriceBook
from ..values.messages import Checkpoint, Message, Node
from ..values.tree import Branch, DamagedBranch
from .fit import leaves_room

BUILTIN_DEFAULT_MODEL = "offline/echo"
OFFLINE_PREFIX = "offline/"
OFFLINE_WINDOW = 8192
EVERY_MODEL = "*"  # the key of a window map that applies to every model not named

Source = Literal["explicit", "recorded", "configured", "environment", "default"]

__all__ = [
    "BUILTIN_DEFAULT_MODEL",
    "OFFLINE_WINDOW",
    "SIZED_FOR_KEY",
    "InvalidWindowError",
    "ModelProfile",
    "ModelResolver",
    "ResolvedModel",
    "UnknownModelError",
    "WindowTooSmallError",
    "check_window",
    "given_capacity",
    "recorded_model",
    "recorded_resolver",
    "sized_for",
    "smallest_window",
    "user_catalog",
]


class InvalidWindowError(ContextfoldError, ValueError):
    """A context window (or max output) that is not a positive number of tokens."""

    kind = "bad_input"

    def __init__(self, what: str, value: int) -> None:
        self.what = what
        self.value = value
        super().__init__(self.explain(what))

    def explain(self, option: str) -> str:
        return f"{option} must be a positive number of tokens, not {self.value}"


class WindowTooSmallError(ContextfoldError, ValueError):
    """The window leaves no room for a checkpoint summary (compaction would fail).

    `smallest` is the smallest window that works for this model (None when no window can:
    its max output is too small); `explain(...)` words it with the face's option names.
    """

    kind = "bad_input"

    def __init__(self, capacity: ModelCapacity, smallest: int | None, summary_tokens: int,
                 room: int) -> None:
        self.model = capacity.model
        self.context_window = capacity.context_window
        self.max_output = capacity.max_output
        self.smallest = smallest
        self.summary_tokens = summary_tokens
        self.room = room
        super().__init__(self.explain())

    def explain(self, window_option: str = "context window",
                output_option: str = "max output") -> str:
        if self.smallest is None:
            return (f"{self.model}: a max output of {self.max_output:,} tokens leaves no room "
                    f"for a checkpoint summary; give a larger {output_option}")
        return (f"a context window of {self.context_window:,} tokens is too small for "
                f"{self.model}: it leaves {self.room:,} tokens for a checkpoint summary, which "
                f"needs at least {self.summary_tokens:,}; the smallest window that works is "
                f"{self.smallest:,} tokens (a history whose turns are very long may need "
                f"more; {window_option} sets it)")

    def facts(self) -> dict[str, Any]:
        return {"smallest_window": self.smallest}

    def public_message(self) -> str:
        return self.explain("context_window")


@dataclass(frozen=True)
class ModelProfile:
    """What a framework's model object says of itself (LangChain's `profile`)."""

    max_input_tokens: int | None = None
    max_output_tokens: int | None = None

    @classmethod
    def of(cls, model: object) -> ModelProfile | None:
        """The profile of a framework model (a `profile` mapping), or None."""
        raw = getattr(model, "profile", None)
        if not isinstance(raw, Mapping):
            return None
        window, output = raw.get("max_input_tokens"), raw.get("max_output_tokens")
        if not (isinstance(window, int) and window > 0):
            return None
        return cls(window, output if isinstance(output, int) and output > 0 else None)


@dataclass(frozen=True)
class ResolvedModel:
    """The model a face sizes for: its name, capacity and budgets, and why this one.

    name      the model to ask for (as given: `anthropic/claude-sonnet-4-5`, `offline/echo`)
    provider  the catalog's provider of its row (or the name's prefix), when known
    source    explicit | recorded | configured | environment | default
    limits    what lowered the window below the catalog's: "cap", "learned"
    derived_output  the max output was derived from the window (so a smaller window has a
              smaller one too: `smallest_window` follows it)
    """

    name: str
    capacity: ModelCapacity
    budget: Budget
    source: Source
    provider: str | None = None
    limits: tuple[str, ...] = ()
    derived_output: bool = False

    @property
    def context_window(self) -> int:
        return self.capacity.context_window

    def at_window(self, window: int) -> ModelCapacity:
        """This model's capacity at another window (what `smallest_window` tries)."""
        update: dict[str, object] = {"context_window": window, "max_input": None}
        if self.derived_output:
            update["max_output"] = derived_max_output(window)
        return self.capacity.model_copy(update=update)


@lru_cache(maxsize=8)
def _overrides_catalog(path: str, stamp: tuple[int, int]) -> ModelCatalog:
    del stamp  # part of the cache key only: an edited file is read again
    return default_catalog().with_overrides(path)


def user_catalog(environ: Mapping[str, str] | None = None) -> ModelCatalog:
    """The packaged catalog plus the overrides file named by `$CONTEXTFOLD_MODELS`, if any
    (read once per version of the file, `user_config`). `CatalogConfigError` names a bad
    file."""
    named = overrides_file(environ)
    if named is None:
        return default_catalog()
    return _overrides_catalog(*named)  # a missing file: the catalog's own read names it


@lru_cache(maxsize=8)
def _overrides_prices(path: str, stamp: tuple[int, int]) -> PriceBook:
    del stamp  # part of the cache key only: an edited file is read again
    return PriceBook.packaged().with_overrides(path)


def user_prices(environ: Mapping[str, str] | None = None) -> PriceBook:
    """The packaged prices plus the `prices` table of the `$CONTEXTFOLD_MODELS` file, if any
    (SPEC Q1: prices are overridden where capacities are)."""
    named = overrides_file(environ)
    if named is None:
        return PriceBook.packaged()
    return _overrides_prices(*named)


@dataclass(frozen=True)
class ModelResolver:
    """One face's way to resolve models: its default model and windows, one rule for all.

    default_model  the face's configured default (`serve --model`); None: `$CONTEXTFOLD_MODEL`,
                   else `BUILTIN_DEFAULT_MODEL`
    windows        window by model name, `"*"` for every model not named (the proxy's
                   `--model-window`, the service's `--context-window`); it replaces the
                   catalog's
    cap            the most any model may use (the chat's `--context-window`); for a model the
                   catalog lacks it is the window
    catalog        None: the packaged catalog plus `$CONTEXTFOLD_MODELS`
    settings       the budgets' knobs (`derive_budget`)
    """

    default_model: str | None = None
    windows: Mapping[str, int] = field(default_factory=dict)
    cap: int | None = None
    catalog: ModelCatalog | None = None
    settings: CompactionSettings | None = None
    environ: Mapping[str, str] | None = None  # tests; None: os.environ

    def __post_init__(self) -> None:
        for name, window in self.windows.items():
            _positive(f"the window of {name}", window)
        if self.cap is not None:
            _positive("the window cap", self.cap)

    # ------------------------------------------------------------------ the rule

    def default(self) -> tuple[str, Source]:
        """The model used when none is given or recorded, and where it comes from."""
        if self.default_model:
            return self.default_model, "configured"
        env = configured_model(self.environ)  # `user_config` reads it
        if env:
            return env, "environment"
        return BUILTIN_DEFAULT_MODEL, "default"

    def resolve(self, explicit: str | None = None, *, recorded: str | None = None,
                context_window: int | None = None, max_output: int | None = None,
                learned: int | None = None, profile: ModelProfile | None = None
                ) -> ResolvedModel:
        """The model to size for and its capacity (see the module's docstring for the order).

        `context_window` / `max_output`: given for this call (they win over everything but a
        learned limit). `recorded`: the branch's model (`recorded_model`); one the catalog
        does not know is passed over for the default, since nobody asked for it. An explicit
        (or default) model nobody can size raises `UnknownModelError`.
        """
        if context_window is not None:
            _positive("the context window", context_window)
        if max_output is not None:
            _positive("the max output", max_output)
        catalog = self.catalog or user_catalog(self.environ)
        if explicit and explicit.strip():
            return self._resolve(explicit.strip(), "explicit", catalog, context_window,
                                 max_output, learned, profile)
        if recorded:
            try:
                return self._resolve(recorded, "recorded", catalog, context_window, max_output,
                                     learned, profile)
            except UnknownModelError:
                pass
        name, source = self.default()
        return self._resolve(name, source, catalog, context_window, max_output, learned,
                             profile)

    def _resolve(self, name: str, source: Source, catalog: ModelCatalog,
                 window: int | None, max_output: int | None, learned: int | None,
                 profile: ModelProfile | None) -> ResolvedModel:
        given = window
        if window is None:
            window = self.windows.get(name, self.windows.get(EVERY_MODEL))
        if window is None and profile is not None:
            window = profile.max_input_tokens
            max_output = max_output or profile.max_output_tokens
        offline = name.startswith(OFFLINE_PREFIX)
        entry = None if offline else catalog.resolve(name)
        if window is None and not _known(catalog, name, offline):
            window = OFFLINE_WINDOW if offline else self.cap
        capacity = catalog.lookup(name, context_window=window, max_output=max_output,
                                  rows=not offline)
        derived = max_output is None and (entry is None or not entry.output) and \
            capacity.max_output == derived_max_output(capacity.context_window)
        limits: list[str] = []
        for why, limit in (("cap", None if given is not None else self.cap),
                           ("learned", learned)):
            if limit and limit < capacity.context_window:
                capacity = capacity.model_copy(update={"context_window": limit})
                limits.append(why)
        if limits and derived:
            capacity = capacity.model_copy(
                update={"max_output": derived_max_output(capacity.context_window)})
        provider = entry.provider if entry is not None else _prefix(name)
        return ResolvedModel(name=name, capacity=capacity,
                             budget=derive_budget(capacity, self.settings), source=source,
                             provider=provider, limits=tuple(limits), derived_output=derived)

    # ------------------------------------------------------------------ windows

    def smallest_window(self, resolved: ResolvedModel, summary_tokens: int, *,
                        fixed: int = 0, checkpoint: int = 0) -> int | None:
        """`smallest_window` with this face's budget settings."""
        return smallest_window(resolved, summary_tokens, self.settings, fixed=fixed,
                               checkpoint=checkpoint)

    def check_window(self, resolved: ResolvedModel, summary_tokens: int, *,
                     fixed: int = 0, checkpoint: int = 0) -> None:
        """`check_window` with this face's budget settings."""
        check_window(resolved, summary_tokens, self.settings, fixed=fixed,
                     checkpoint=checkpoint)


def given_capacity(name: object, capacities: Mapping[str, ModelCapacity],
                   capacity: ModelCapacity) -> ModelCapacity:
    """The capacity an application gave for the model `name` (an integration's
    `capacities=` by model name), else the one it gave for the session (`capacity=`): a
    capacity given explicitly wins over the catalog, as an explicit window does everywhere."""
    return capacities.get(name, capacity) if isinstance(name, str) else capacity


# The room a window must leave for one ordinary message (a few paragraphs) beside everything
# a request carries after the deepest compaction (`smallest_window`'s `checkpoint`).
MESSAGE_ROOM = 256


def smallest_window(resolved: ResolvedModel, summary_tokens: int,
                    settings: CompactionSettings | None = None, *, fixed: int = 0,
                    checkpoint: int = 0) -> int | None:
    """The smallest context window (for the same model) whose summary budget holds a summary
    of `summary_tokens` beside the identifier ledger, with a recent tail, and whose safe limit
    leaves the history room beside `fixed` tokens every request carries (`fit.leaves_room`:
    a replayed agent's system prompt and tools); None if no window can (the model's max
    output is too small).

    `summary_tokens` is the summariser's floor: `smallest_summary_tokens(guaranteed=True)` for
    a command that compacts a whole recorded history at once, `guaranteed=False` for a live
    session that compacts a few turns at a time.

    `checkpoint`: the smallest checkpoint message the face's sizing holds a request to
    (`Sizer.smallest_checkpoint`: the summary it can always be fitted to, with the largest
    frame). Given, the window must also leave `MESSAGE_ROOM` beside it and `fixed`: a window
    where only an empty request fits after a compaction refuses every ordinary message.
    """

    def fits(window: int) -> bool:
        budget = derive_budget(resolved.at_window(window), settings)
        return budget.summary_budget - budget.ledger_budget >= summary_tokens and \
            budget.tail_budget > 0 and (fixed <= 0 or leaves_room(budget, fixed)) and \
            (checkpoint <= 0
             or budget.safe_input_limit - fixed - checkpoint >= MESSAGE_ROOM)

    high = 1 << 24
    if not fits(high):
        return None
    low = 1  # invariant: fits(high), not fits(low) unless low == 1
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid
    return high


def check_window(resolved: ResolvedModel, summary_tokens: int,
                 settings: CompactionSettings | None = None, *, fixed: int = 0,
                 checkpoint: int = 0) -> None:
    """`WindowTooSmallError` when `resolved`'s window is below `smallest_window`."""
    smallest = smallest_window(resolved, summary_tokens, settings, fixed=fixed,
                               checkpoint=checkpoint)
    if smallest is None or resolved.capacity.context_window < smallest:
        have = derive_budget(resolved.capacity, settings)
        raise WindowTooSmallError(resolved.capacity, smallest, summary_tokens,
                                  max(0, have.summary_budget - have.ledger_budget))


# Session metadata a face writes when it sized the session for a window of its own (the
# proxy's `--model-window`): {"model": name, "context_window": tokens}. Read back by
# `sized_for`, so every face sizes that session as the face that ran it did.
SIZED_FOR_KEY = "sized_for"


def sized_for(metadata: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """The (model, window) a session's metadata says it was sized for, or None."""
    entry = (metadata or {}).get(SIZED_FOR_KEY)
    if not isinstance(entry, Mapping):
        return None
    name, window = entry.get("model"), entry.get("context_window")
    if isinstance(name, str) and name and isinstance(window, int) and window > 0:
        return name, window
    return None


def recorded_resolver(metadata: Mapping[str, Any] | None,
                      base: ModelResolver | None = None) -> ModelResolver:
    """`base` (default: a plain `ModelResolver()`) that also knows the window a session was
    sized for (`sized_for`), unless `base` names a window of its own for that model."""
    from dataclasses import replace

    base = base or ModelResolver()
    sized = sized_for(metadata)
    if sized is None or sized[0] in base.windows:
        return base
    return replace(base, windows={**base.windows, sized[0]: sized[1]})


def recorded_model(history: Branch | DamagedBranch | Sequence[Node | Message]) -> str | None:
    """The model of the latest assistant reply, or of the latest checkpoint (the model it was
    fitted to), whichever is newer: after a compaction the branch may hold no reply yet, and
    the session's model has not changed. A damaged branch answers from its readable part."""
    if isinstance(history, Branch):
        entries: Sequence[Node | Message] = history.nodes
    elif isinstance(history, DamagedBranch):
        entries = history.readable
    else:
        entries = history
    for entry in reversed(entries):
        message = entry.message if isinstance(entry, Node) else entry
        checkpoint: Checkpoint | None = entry.checkpoint if isinstance(entry, Node) else None
        if message is not None and message.role == "assistant":
            name = message.model or (message.usage.model if message.usage else None)
            if name:
                return name
        if checkpoint is not None and checkpoint.model:
            return checkpoint.model
    return None


def _known(catalog: ModelCatalog, name: str, offline: bool) -> bool:
    """Whether the catalog sizes `name` by itself (a row, or an override of its own)."""
    if not offline:
        return name in catalog
    try:
        catalog.lookup(name, rows=False)
    except UnknownModelError:
        return False
    return True


def _prefix(name: str) -> str | None:
    head, _, rest = name.partition("/")
    return head.lower() if rest else None


def _positive(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidWindowError(what, value)
