"""Model capacity catalog (SPEC B4): packaged models.dev data plus user overrides.

`capacity_for("claude-sonnet-4-5")` answers what one model can hold: its context window, max
output, input cap, what an image or file costs, whether reasoning is replayed, and which
tokenizer family the estimator should assume. The data is a condensed copy of the models.dev
catalog (4,061 models, MIT, `contextfold/data/models.json` + `LICENSE-models-dev`).

Name resolution, in order:

1. a user override registered under exactly that name (any name, even one the data lacks);
2. `provider/model` (e.g. `anthropic/claude-sonnet-4-5`, `openrouter/anthropic/claude-sonnet-4.5`);
3. the name as a model id, across every provider, also matching vendor-prefixed ids
   (`google/gemini-2.5-pro` answers `gemini-2.5-pro`) and, failing that, ignoring case, `.`
   versus `-` and a trailing date (`claude-sonnet-4.5`, `gpt-4o-2024-08-06`).

When several providers list a bare id, the first-party provider wins (anthropic for claude*,
openai for gpt*/o1/o3/o4, google for gemini*/gemma*, ...: `FIRST_PARTY`). Without one, the
capacity most providers agree on wins (ties: the smaller window, then the provider name), so
a reseller's odd cap does not decide. The choice is deterministic for a given data file.

A row without a max output gets `derived_max_output(window)`: Pi's 16,384-token reserve,
never more than a quarter of the window.

Size: `ModelCatalog` alone is some 215 lines (name resolution in the three steps above,
first-party choice, overrides layered on); the overrides file reading (`load_overrides`,
`read_overrides_file`) moves to the one edge module with the core's regrouping (issue 39), which
only the script moving `core/` may do.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import ContextfoldError
from ...user_config import OverridesFileError, read_tables
from .budget import ModelCapacity

FAMILIES = ("claude", "gpt", "gemini", "other")


@dataclass(frozen=True)
class FamilyTraits:
    """What a tokenizer family implies for estimates. Every value is overridable per model."""

    image_tokens: int
    file_tokens: int
    replays_reasoning: bool


# Images: Anthropic resizes to about 1.15 megapixels, ~1,600 tokens (w*h/750). OpenAI's
# worst documented case is the patch-based mini models (gpt-4.1-mini, o4-mini: up to ~2,650
# tokens); gpt-4o-mini's price-inflated counts are far higher and need an override. Gemini
# 3 spends 1,120 at high media resolution; 1,600 keeps headroom for tiled Gemini 2.x images.
# Reasoning: Anthropic thinking blocks go back to the model in tool loops; OpenAI, Gemini
# and OpenAI-compatible servers do not take reasoning back as text.
FAMILY_TRAITS: dict[str, FamilyTraits] = {
    "claude": FamilyTraits(image_tokens=1600, file_tokens=1600, replays_reasoning=True),
    "gpt": FamilyTraits(image_tokens=2700, file_tokens=1600, replays_reasoning=False),
    "gemini": FamilyTraits(image_tokens=1600, file_tokens=1600, replays_reasoning=False),
    "other": FamilyTraits(image_tokens=1600, file_tokens=1600, replays_reasoning=False),
}

# Model-id prefix -> providers that make the model, most authoritative first.
FIRST_PARTY: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("claude",), ("anthropic",)),
    (("gpt-", "chatgpt", "o1", "o3", "o4", "codex", "text-embedding"), ("openai",)),
    (("gemini", "gemma"), ("google", "google-vertex")),
    (("grok",), ("xai",)),
    (("mistral", "codestral", "devstral", "magistral", "ministral", "pixtral", "open-mi"),
     ("mistral",)),
    (("deepseek",), ("deepseek",)),
    (("glm",), ("zai", "zhipuai")),
    (("kimi", "moonshot"), ("moonshotai",)),
    (("qwen", "qwq", "qvq"), ("alibaba",)),
    (("minimax",), ("minimax",)),
    (("command", "c4ai"), ("cohere",)),
    (("llama",), ("llama",)),
    (("sonar",), ("perplexity",)),
)

DEFAULT_MAX_OUTPUT_CAP = 16_384

_OVERRIDE_INT_FIELDS = {"context_window": 1, "max_output": 1, "max_input": 1,
                        "image_tokens": 0, "file_tokens": 0}
OVERRIDE_FIELDS = (*_OVERRIDE_INT_FIELDS, "replays_reasoning", "family")

_DATE_SUFFIX = re.compile(r"-(?:20\d{2}-?\d{2}-?\d{2}|\d{4})$")
_OPENAI_NAME = re.compile(r"^(?:gpt|chatgpt|codex|text-embedding|o[1-9](?:$|-))")


class UnknownModelError(ContextfoldError, LookupError):
    """The catalog does not know the model and no context window was given.

    One error kind for every face: `model` and `close_names` say what was asked and what
    the catalog has near it; `explain(give)` words it with the face's own way of giving a
    window (`--context-window`, `context_window`, `ContextfoldMiddleware(capacity=...)`).
    """

    kind = "bad_input"
    code = "unknown_model"

    def __init__(self, model: str, *, close_names: tuple[str, ...] = (), known: int = 0,
                 give: str | None = None) -> None:
        self.model = model
        self.close_names = close_names
        self.known = known
        super().__init__(self.explain(give or (
            f"capacity_for({model!r}, context_window=32768), "
            f"catalog.override({model!r}, context_window=32768, max_output=4096), or an "
            f"overrides file with [models.\"{model}\"] context_window = 32768 "
            "(CLI: --context-window)")))

    def public_message(self) -> str:
        """For the service's client, who gives a session's window as `context_window`."""
        return self.explain("context_window")

    def explain(self, give: str) -> str:
        """The message, ending with `give`: how the face's user gives the window."""
        hint = f" Close names in the catalog: {', '.join(self.close_names)}." \
            if self.close_names else ""
        return (f"unknown model {self.model!r}: it is not in the model catalog ({self.known} "
                f"models from models.dev) and has no override.{hint} Give its window: "
                f"{give}.")


class CatalogConfigError(ContextfoldError, ValueError):
    """An overrides file or an override call has content the catalog cannot use."""

    kind = "bad_input"


def derived_max_output(context_window: int) -> int:
    """Max output for a model whose data gives none: Pi's reserve, at most a quarter window."""
    return max(1, min(DEFAULT_MAX_OUTPUT_CAP, context_window // 4))


def tokenizer_family(name: str, hint: str | None = None) -> str:
    """The estimator's tokenizer family for a model name: claude, gpt, gemini or other.

    `hint` is the models.dev family ("claude-sonnet", "gpt-codex", ...) when known.
    """
    base = name.lower().rsplit("/", 1)[-1]
    if "claude" in base:
        return "claude"
    if "gemini" in base or "gemma" in base:
        return "gemini"
    # Bedrock/vendor prefixes: "openai.gpt-oss-120b", "us.anthropic.claude-..." (above).
    if _OPENAI_NAME.match(base) or "gpt-" in base or ".gpt" in base:
        return "gpt"
    if hint:
        h = hint.lower()
        if h.startswith("claude"):
            return "claude"
        if h.startswith(("gemini", "gemma")):
            return "gemini"
        if h.startswith("gpt") or h in ("o", "o-mini", "o-pro"):
            return "gpt"
    return "other"


_PACKAGED_FIELDS = ("provider", "id", "family", "context", "input", "output",
                    "reasoning", "modalities_in")


class CatalogEntry(NamedTuple):
    """One row of the packaged data (a named tuple: 4,000 of them are built at every start,
    and a frozen dataclass costs several times more to construct)."""

    provider: str
    id: str
    family: str | None
    context: int
    input: int | None
    output: int | None
    reasoning: bool | None
    modalities: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.provider}/{self.id}"

    def capacity(self) -> ModelCapacity:
        tokenizer = tokenizer_family(self.id, self.family)
        traits = FAMILY_TRAITS[tokenizer]
        max_output = self.output if self.output else derived_max_output(self.context)
        max_input = self.input if self.input and self.input < self.context else None
        return ModelCapacity(
            model=self.id,
            context_window=self.context,
            max_output=max_output,
            max_input=max_input,
            image_tokens=traits.image_tokens,
            file_tokens=traits.file_tokens,
            replays_reasoning=traits.replays_reasoning and self.reasoning is not False,
            family=tokenizer,
        )


def _packaged_entry(row: list[Any]) -> CatalogEntry | None:
    """One row of models.json (`_PACKAGED_FIELDS`); None for a row without a window."""
    provider, model_id, family, context, limit_in, output, reasoning, modalities = row
    if not (context and context > 0):
        return None
    return CatalogEntry(provider, model_id, family, context, limit_in, output or None,
                        reasoning, tuple(modalities or ()))


# Exact names `ModelCatalog._exact` scans the packaged text for before it builds the index.
SCANNED_NAMES = 8
# Candidate lines one scan parses at most (an id is on a few dozen rows at the most).
SCAN_LINES = 64
_PACKAGED_HEADER = '"fields":' + json.dumps(list(_PACKAGED_FIELDS), separators=(",", ":"))
_PLAIN_ID = re.compile(r"[a-z0-9][a-z0-9._:@+-]*")  # written verbatim in JSON, no escapes


def _scan_packaged(text: str, low: str, lowered: str | None = None
                   ) -> list[CatalogEntry] | None:
    """The rows whose lower-cased id, or its part after the last '/', is `low`, in file
    order, found without parsing the whole file; None when the shortcut cannot answer
    exactly (then the full index does).

    Why: parsing and indexing all 4,061 rows is a twentieth of a bare CLI's start, and a
    short command looks up one exact id. The file holds one row per line and names each
    id as a JSON string, so a row with id `low` or `…/low` has a line containing `"low"`
    or `/low"` (case-folded); each such line is parsed and checked like the index would.
    Anything unexpected (an id that JSON would escape, a line that is not one row, another
    header, a non-ASCII file whose lower-cased copy may not line up with it) gives way to
    the full parse.
    """
    if not (_PLAIN_ID.fullmatch(low) and text.isascii()
            and _PACKAGED_HEADER in text[:text.find("\n")]):
        return None
    lowered = text.lower() if lowered is None else lowered
    rows: dict[int, CatalogEntry] = {}  # by line start: a line can match more than once
    parsed = 0
    for needle in (f'"{low}"', f'/{low}"'):
        at = lowered.find(needle)
        while at != -1:
            parsed += 1
            if parsed > SCAN_LINES:
                return None  # a word on many rows ("text", a provider): the index is quicker
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            try:
                row = json.loads(text[start:end].rstrip(","))
            except ValueError:
                return None  # the header line or the last one: not a row alone
            if not (isinstance(row, list) and len(row) == len(_PACKAGED_FIELDS)):
                return None
            entry = _packaged_entry(row)
            model_id = str(row[1]).lower()
            if entry is not None and low in (model_id, model_id.rsplit("/", 1)[-1]):
                rows[start] = entry
            at = lowered.find(needle, end)
    return [rows[start] for start in sorted(rows)]


def _normal(model_id: str) -> str:
    """Loose key: case, `.` vs `-`, `_` vs `-` and a trailing date do not matter."""
    key = model_id.lower().rsplit("/", 1)[-1].replace(".", "-").replace("_", "-")
    # Only a name ending in a digit can carry a date (most do not: skip the regex).
    return _DATE_SUFFIX.sub("", key) if key[-1:].isdigit() else key


def _first_party(model_id: str) -> tuple[str, ...]:
    base = model_id.lower().rsplit("/", 1)[-1]
    for prefixes, providers in FIRST_PARTY:
        if base.startswith(prefixes):
            return providers
    return ()


def _choose(candidates: list[CatalogEntry]) -> CatalogEntry:
    """Without a first-party row: the window most providers list (ties: the smaller one)."""
    windows = Counter(e.context for e in candidates)
    window = min(windows, key=lambda w: (-windows[w], w))
    agreeing = [e for e in candidates if e.context == window]
    outputs = Counter(e.output or 0 for e in agreeing)
    return min(agreeing, key=lambda e: (-outputs[e.output or 0], e.output or 0, e.provider,
                                        e.id))


class ModelCatalog:
    """Packaged capacities plus overrides. `lookup` never returns a guess for an unknown name."""

    def __init__(self, entries: Iterable[CatalogEntry],
                 overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._given: tuple[CatalogEntry, ...] = tuple(entries)
        self._text: str | None = None  # the packaged file, while its rows are unparsed
        self._scanned: dict[str, list[CatalogEntry]] = {}  # `_exact` answers from `_text`
        self._overrides: dict[str, dict[str, Any]] = {}
        for name, fields in (overrides or {}).items():
            self.override(name, **fields)

    # ------------------------------------------------------------------ construction

    @classmethod
    def packaged(cls) -> ModelCatalog:
        """The catalog built from the packaged models.dev data, without overrides.

        Its 4,061 rows are parsed and indexed on first need: a lookup by an exact model id
        (what a short command makes) reads only the rows that name it (`_scan_packaged`).
        """
        catalog = cls(())
        catalog._text = resources.files("contextfold.data").joinpath(
            "models.json").read_text("utf-8")
        return catalog

    @cached_property
    def _entries(self) -> tuple[CatalogEntry, ...]:
        if self._text is None:
            return self._given
        data = json.loads(self._text)
        if data["fields"] != list(_PACKAGED_FIELDS):
            raise ValueError(f"models.json fields changed: {data['fields']}")
        return tuple(entry for row in data["models"] if (entry := _packaged_entry(row)))

    @cached_property
    def _by_id(self) -> dict[str, list[CatalogEntry]]:
        # Keyed by the lower-cased id and, for a vendor-prefixed id, by its last part too.
        index: dict[str, list[CatalogEntry]] = {}
        for e in self._entries:
            low = e.id.lower()
            index.setdefault(low, []).append(e)
            tail = low.rsplit("/", 1)[-1]
            if tail != low:
                index.setdefault(tail, []).append(e)
        return index

    @cached_property
    def _by_provider(self) -> dict[tuple[str, str], CatalogEntry]:
        index: dict[tuple[str, str], CatalogEntry] = {}
        for e in self._entries:
            index.setdefault((e.provider.lower(), e.id.lower()), e)
        return index

    @cached_property
    def _providers(self) -> set[str]:
        return {p for p, _ in self._by_provider}

    @cached_property
    def _lowered(self) -> str:
        return (self._text or "").lower()

    def _exact(self, low: str) -> list[CatalogEntry]:
        """`_by_id[low]`, read from the packaged text while the index is not built.

        A name is scanned for once (the answer is kept); a process that looks up more than
        `SCANNED_NAMES` names builds the index instead, which then answers in O(1).
        """
        if self._text is None or "_by_id" in self.__dict__:
            return self._by_id.get(low, [])
        known = self._scanned.get(low)
        if known is not None:
            return known
        if len(self._scanned) < SCANNED_NAMES:
            found = _scan_packaged(self._text, low, self._lowered)
            if found is not None:
                self._scanned[low] = found
                return found
        return self._by_id.get(low, [])

    def _copy(self) -> ModelCatalog:
        new = object.__new__(ModelCatalog)
        new.__dict__.update(self.__dict__)
        new._overrides = {k: dict(v) for k, v in self._overrides.items()}
        new._scanned = dict(self._scanned)
        return new

    def override(self, name: str, **fields: Any) -> ModelCatalog:
        """Register capacities for `name` on this catalog (and return it, for chaining).

        `name` may be a model the data lacks (then `context_window` is required) or one it
        has (the given fields replace the packaged ones). Fields: see `OVERRIDE_FIELDS`.
        """
        checked = _check_fields(fields, f"override of {name!r}")
        key = name.strip().lower()
        merged = {**self._overrides.get(key, {}), **checked}
        if self._resolve(name) is None and "context_window" not in merged:
            raise CatalogConfigError(
                f"override of {name!r}: the catalog does not know this model, so "
                "context_window is required (e.g. context_window=8192, max_output=2048)")
        self._overrides[key] = merged
        return self

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]] | str | os.PathLike[str]
                       ) -> ModelCatalog:
        """A copy of this catalog with more overrides (a mapping or a TOML/JSON file path)."""
        if isinstance(overrides, (str, os.PathLike)):
            overrides = load_overrides(overrides)
        new = self._copy()
        for name, fields in overrides.items():
            new.override(name, **fields)
        return new

    # ------------------------------------------------------------------ lookup

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name.strip().lower() in self._overrides or self._resolve(name) is not None)

    def resolve(self, name: str) -> CatalogEntry | None:
        """The packaged row `name` resolves to, or None (overrides are not rows)."""
        return self._resolve(name)

    def lookup(self, name: str, *, context_window: int | None = None,
               max_output: int | None = None, rows: bool = True) -> ModelCapacity:
        """Capacity of `name`; explicit `context_window` / `max_output` win over everything.

        Raises `UnknownModelError` for a name neither the data nor an override knows, unless
        `context_window` is given. `rows=False`: only an override under `name` counts, never
        a packaged row (a built-in model such as `offline/echo` is no provider's, and a loose
        match of its last part would find some reseller's "echo").
        """
        query = name.strip()
        entry = self._resolve(query) if rows else None
        extra = self._override_for(query, entry)
        if entry is not None:
            capacity = entry.capacity()
        elif "context_window" in extra or context_window is not None:
            window = context_window or extra["context_window"]
            family = extra.get("family") or tokenizer_family(query)
            traits = FAMILY_TRAITS[family]
            capacity = ModelCapacity(model=query, context_window=window,
                                     max_output=derived_max_output(window),
                                     image_tokens=traits.image_tokens,
                                     file_tokens=traits.file_tokens,
                                     replays_reasoning=traits.replays_reasoning, family=family)
        else:
            raise self.unknown(query)
        update = dict(extra)
        if context_window is not None:
            update["context_window"] = context_window
        if max_output is not None:
            update["max_output"] = max_output
        if update:
            if "context_window" in update and "max_output" not in update and (
                    entry is None or not entry.output):
                update["max_output"] = derived_max_output(update["context_window"])
            if "family" in update and not {"image_tokens", "replays_reasoning"} & set(extra):
                traits = FAMILY_TRAITS[update["family"]]
                update.setdefault("image_tokens", traits.image_tokens)
                update.setdefault("replays_reasoning", traits.replays_reasoning)
            capacity = ModelCapacity.model_validate({**capacity.model_dump(), **update})
        return capacity

    def _override_for(self, query: str, entry: CatalogEntry | None) -> dict[str, Any]:
        keys = [query.lower()]
        if entry is not None:
            keys += [entry.name.lower(), entry.id.lower()]
        merged: dict[str, Any] = {}
        for key in reversed(keys):  # the most specific name wins
            merged.update(self._overrides.get(key, {}))
        return merged

    @cached_property
    def _by_normal(self) -> dict[str, list[CatalogEntry]]:
        # Built on the first loose lookup only: an exact name (the common case, and every
        # short command) never pays for normalising 4,000 ids.
        index: dict[str, list[CatalogEntry]] = {}
        for e in self._entries:
            index.setdefault(_normal(e.id.lower()), []).append(e)
        return index

    def _loose(self, name: str) -> list[CatalogEntry]:
        return self._by_normal.get(_normal(name), [])

    def _resolve(self, name: str) -> CatalogEntry | None:
        query = name.strip()
        low = query.lower()
        if "/" in low:
            provider, rest = low.split("/", 1)
            if provider in self._providers:
                hit = self._by_provider.get((provider, rest))
                if hit is not None:
                    return hit
                loose = [e for e in self._loose(rest) if e.provider.lower() == provider]
                if loose:
                    return min(loose, key=lambda e: e.id)
        exact = self._exact(low)
        bare = query.rsplit("/", 1)[-1]
        for provider in _first_party(bare):
            own = [e for e in exact if e.provider == provider] or \
                [e for e in self._loose(low) if e.provider == provider]
            if own:
                # An exact id beats a vendor-prefixed or loosely matched one.
                return min(own, key=lambda e: (e.id.lower() != low, e.id))
        pool = exact or self._loose(low)
        return _choose(pool) if pool else None

    def unknown(self, name: str) -> UnknownModelError:
        """The error for `name`, which neither the data nor an override knows."""
        ids = sorted({e.id for e in self._entries})
        close = tuple(difflib.get_close_matches(name, ids, n=3, cutoff=0.75))
        return UnknownModelError(name, close_names=close, known=len(self._entries))


def _check_fields(fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate override fields; errors name `where` and the key."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _OVERRIDE_INT_FIELDS:
            low = _OVERRIDE_INT_FIELDS[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CatalogConfigError(
                    f"{where}: {key} must be an integer >= {low}, not {value!r}")
        elif key == "replays_reasoning":
            if not isinstance(value, bool):
                raise CatalogConfigError(f"{where}: {key} must be true or false, not {value!r}")
        elif key == "family":
            if value not in FAMILIES:
                raise CatalogConfigError(
                    f"{where}: family must be one of {', '.join(FAMILIES)}, not {value!r}")
        else:
            raise CatalogConfigError(
                f"{where}: unknown key {key!r} (allowed: {', '.join(OVERRIDE_FIELDS)})")
        out[key] = value
    return out


def load_overrides(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Read model overrides from a TOML or JSON file: a `models` table keyed by model name.

    ```toml
    [models."my-local-model"]
    context_window = 8192
    max_output = 2048

    [models."claude-sonnet-4-5"]    # e.g. the 1M-token beta window
    context_window = 1000000
    ```

    JSON: `{"models": {"my-local-model": {"context_window": 8192}}}`. Errors name the file
    and the key.
    """
    file = Path(path)
    data = read_overrides_file(file)
    models = data.get("models", {} if "prices" in data else None)
    if not isinstance(models, dict):
        raise CatalogConfigError(
            f"{file}: expected a 'models' table keyed by model name, e.g. "
            '[models."my-model"] context_window = 8192')
    out: dict[str, dict[str, Any]] = {}
    for name, fields in models.items():
        where = f"{file}: models.{json.dumps(name)}"
        if not isinstance(fields, dict):
            raise CatalogConfigError(f"{where}: expected a table of fields, not {fields!r}")
        out[name] = _check_fields(fields, where)
    return out


def read_overrides_file(file: Path) -> dict[str, Any]:
    """The tables of a TOML or JSON overrides file (`models`, and `prices` for
    `core.money.prices`), read by the one module that reads user files (`user_config`).
    `CatalogConfigError` names the file when it cannot be read or parsed."""
    try:
        return read_tables(file)
    except OverridesFileError as exc:
        raise CatalogConfigError(str(exc)) from exc.__cause__


@cache
def _packaged() -> ModelCatalog:
    return ModelCatalog.packaged()


@cache
def default_catalog() -> ModelCatalog:
    """The process-wide catalog. Overrides registered on it apply to every later lookup."""
    return _packaged()._copy()


def capacity_for(name: str, *, context_window: int | None = None, max_output: int | None = None,
                 catalog: ModelCatalog | None = None) -> ModelCapacity:
    """Capacity of `name` from `catalog` (default: `default_catalog()`)."""
    return (catalog or default_catalog()).lookup(name, context_window=context_window,
                                                 max_output=max_output)
