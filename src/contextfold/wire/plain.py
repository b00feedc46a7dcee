"""One reading of what a provider sent, whoever decoded it: the JSON itself or an SDK model.

The proxy reads JSON it decoded itself; the SDK adapters get the official SDKs' pydantic models,
whose fields a server added beyond the SDK's types (vLLM's `reasoning_content`, say) live in
`model_extra`. `plain` turns a model back into the JSON the server wrote, so one reader serves
both: a dict costs nothing, a model one `model_dump` (a few microseconds).
"""

from __future__ import annotations

from typing import Any


def plain(value: Any) -> Any:
    """`value` as JSON-shaped Python: dicts, lists, strings, numbers, booleans and None.

    An SDK model is dumped under its wire names (`by_alias`) with only the fields the server
    sent (`exclude_unset`), so a reader sees what a client of the raw API would; an object
    with attributes (e.g. a `SimpleNamespace`) becomes a dict of them. A dict is taken as it
    is: its values are already JSON.
    """
    if value is None or isinstance(value, dict | str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items()}
    return value
