"""Lazy re-exports (PEP 562) for packages whose members pull in heavy dependencies.

`contextfold --help` must not pay for SQLAlchemy or the provider SDKs, and the base install
(no extras) has no provider SDKs at all; so a package's `__init__` names its public members
here and each is imported the first time it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, resolving `exports` (name -> module) on use.

    A module path starting with "." is relative to `package`. The value is cached in the
    package namespace, so only the first lookup goes through here.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
