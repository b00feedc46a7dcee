"""Lone UTF-16 surrogates: replaced with U+FFFD wherever text enters, so nothing crashes.

JavaScript agents cut strings by UTF-16 length and may write half of a surrogate pair
(`"\\ud83d"` in JSON). Python decodes such an escape to a lone surrogate code point, which is
not Unicode text: encoding it as UTF-8 (the content hash, the database, a provider request,
the terminal) raises `UnicodeEncodeError`. Policy (docs/store.md, "Hostile input"): every
lone surrogate becomes U+FFFD REPLACEMENT CHARACTER at the boundary where text enters
contextfold — file importers (which report it as a warning naming the line), provider
replies (a logged warning) and, as the last safety net, every core value's validation, so
no `Message` or `Checkpoint` can hold one. Well-formed pairs never reach Python as
surrogates (the JSON decoder joins them), so only broken halves are replaced.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_LONE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> bool:
    """True when `text` holds no surrogate, decided without the regex on the common case:
    ASCII (a flag CPython keeps, O(1)), else one C-speed UTF-8 encode, which fails exactly
    on a surrogate (the regex scan cost ~5 µs per KB on every string of every message)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def has_surrogates(text: str) -> bool:
    return not _clean(text)


def replace_surrogates(value: Any) -> tuple[Any, int]:
    """`value` (a str or JSON-like list / dict) with lone surrogates replaced, and how many."""
    if isinstance(value, str):
        if _clean(value):
            return value, 0
        return _LONE.subn(REPLACEMENT, value)
    if isinstance(value, list | tuple):
        total = 0
        items = []
        for item in value:
            clean, n = replace_surrogates(item)
            items.append(clean)
            total += n
        return (type(value)(items) if total else value), total
    if isinstance(value, dict):
        total = 0
        out: dict[Any, Any] = {}
        for key, item in value.items():
            clean_key, n_key = replace_surrogates(key)
            clean, n = replace_surrogates(item)
            out[clean_key] = clean
            total += n + n_key
        return (out if total else value), total
    return value, 0


def without_surrogates(value: Any) -> Any:
    """`replace_surrogates` without the count (validators, where nothing can be reported)."""
    if isinstance(value, str) and _clean(value):
        return value  # the common case, kept cheap
    return replace_surrogates(value)[0]


def surrogate_note(count: int) -> str:
    return (f"{count} lone UTF-16 surrogate{'s' if count != 1 else ''} (half of an emoji or "
            "other character, cut by a JavaScript agent) replaced with U+FFFD")
