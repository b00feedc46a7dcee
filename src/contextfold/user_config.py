"""The one place contextfold reads its user's environment and files for models and prices.

The core decides with values; this module fetches them: the default model
(`$CONTEXTFOLD_MODEL`), the overrides file (`$CONTEXTFOLD_MODELS`) and its stamp (so a
changed file is read again), and the tables of a TOML or JSON overrides file. It imports
nothing of contextfold, so the core's conveniences that take a file path or read the
environment when given none (`ModelResolver`, `user_catalog`, `user_prices`,
`ModelCatalog.with_overrides(path)`) call it, and a face may call it to pass values itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODEL_ENV = "CONTEXTFOLD_MODEL"  # the default model of every face that has none configured
OVERRIDES_ENV = "CONTEXTFOLD_MODELS"  # a TOML/JSON overrides file (core.catalog, core.prices)


class OverridesFileError(ValueError):
    """An overrides file that cannot be read or parsed; the message names the file (the
    core raises it again as its own `CatalogConfigError`)."""


def environment(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """`environ`, or the process's environment when None (tests pass their own)."""
    return os.environ if environ is None else environ


def configured_model(environ: Mapping[str, str] | None = None) -> str | None:
    """The model `$CONTEXTFOLD_MODEL` names, if any."""
    return environment(environ).get(MODEL_ENV, "").strip() or None


def overrides_file(environ: Mapping[str, str] | None = None
                   ) -> tuple[str, tuple[int, int]] | None:
    """The overrides file `$CONTEXTFOLD_MODELS` names and its version (modification time and
    size; (0, 0) when it cannot be read, for its reader to name), or None."""
    path = environment(environ).get(OVERRIDES_ENV)
    if not path:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return path, (0, 0)
    return path, (info.st_mtime_ns, info.st_size)


def read_tables(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tables of a TOML or JSON overrides file (`models`, `prices`); `OverridesFileError`
    names the file when it cannot be read or parsed."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise OverridesFileError(f"{file}: cannot read overrides file: {exc}") from exc
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(raw.decode("utf-8"))
        else:
            import tomllib  # here: a command that reads no overrides file skips its import

            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "JSON" if file.suffix.lower() == ".json" else "TOML"
        raise OverridesFileError(f"{file}: not valid {kind}: {exc}") from exc
    if not isinstance(data, dict):
        raise OverridesFileError(f"{file}: expected tables ('models', 'prices') at the top")
    return data
