"""Token counts as a provider reports them -> `core.Usage`, one rule for every reader.

A usage object is read field by field: a missing (or null) field is not reported; a present
one must be a non-negative whole number, else the whole object is unusable and no usage is
recorded, because a baseline built from half a damaged report would under-count what the
request occupied (SPEC E1). An object that reports nothing is no usage at all (None).

Two shapes, one reader each: `usage_from` for counts that map one to one onto ours
(Anthropic, Pi), `usage_cache_inside` for an input count that includes the cached tokens
(OpenAI's two protocols, LangChain's `usage_metadata`, pydantic-ai's and the Agents SDK's
usage objects), which are taken out of it once. Every reader of usage in contextfold goes
through one of them (tests/test_one_reader_per_idea.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.values.messages import Usage


def token_count(value: Any) -> int | None:
    """A token count from a provider payload: a non-negative int, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, float) and value >= 0 and value.is_integer():
        return int(value)
    return None


class Unusable(ValueError):
    """A usage field that is present but not a token count."""


def read_counts(raw: Any, names: Mapping[str, str]) -> dict[str, int]:
    """The counts `raw` reports, under our names (`names`: ours -> theirs); missing fields
    are left out. Raises `Unusable` for a field that is present but not a count."""
    if not isinstance(raw, dict):
        return {}
    counts: dict[str, int] = {}
    for ours, theirs in names.items():
        value: Any = raw
        for key in theirs.split("."):  # "a.b": field b of the object in field a
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue
        n = token_count(value)
        if n is None:
            raise Unusable(f"usage field {theirs!r} is not a token count: {value!r}")
        counts[ours] = n
    return counts


def usage_from(raw: Any, names: Mapping[str, str], model: str | None) -> Usage | None:
    """`Usage` from a usage object whose fields map one to one onto ours (`names`: ours ->
    theirs); None when it reports nothing or a field is unusable."""
    try:
        counts = read_counts(raw, names)
    except Unusable:
        return None
    return Usage(model=model, **counts) if counts else None


def usage_cache_inside(raw: Any, names: Mapping[str, str], model: str | None) -> Usage | None:
    """`Usage` from a usage object whose input count includes the cached tokens (`names`:
    ours -> theirs for "prompt", "output", "cache_read", "cache_write"; "a.b" names a field
    inside a field). The cache reads and writes are taken out of the input once (E1, each
    token once), never below zero; None when it reports nothing or a field is unusable."""
    try:
        counts = read_counts(raw, names)
    except Unusable:
        return None
    if "prompt" not in counts and "output" not in counts:
        return None  # cache details alone say nothing of the request
    prompt = counts.get("prompt", 0)
    read = min(counts.get("cache_read", 0), prompt)  # a server's nonsense never goes negative
    write = min(counts.get("cache_write", 0), prompt - read)
    return Usage(input=prompt - read - write, output=counts.get("output", 0), cache_read=read,
                 cache_write=write, model=model)
