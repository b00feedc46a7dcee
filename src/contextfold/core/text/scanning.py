"""The one shape of an identifier scanner: `(position in the text, ledger entry or None)`.

Every scanner of `core.text.identifiers` (DOIs, URLs, paths, commits) and of
`core.text.prose_identifiers` (what people type in prose) yields `Sighting`s: `entry` makes
the entry with the bounds every recorded value and note keeps (None for a value too long or
spanning lines), and `in_order` merges what several scanners saw in the order of the text.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..values.messages import LedgerEntry

Sighting = tuple[int, LedgerEntry | None]  # (position in the text, the entry or None)

MAX_VALUE_CHARS = 300
MAX_NOTE_CHARS = 120


def entry(kind: str, value: str, note: str = "") -> LedgerEntry | None:
    """The ledger entry for `value` of `kind` (stripped, its note on one line and cut to
    `MAX_NOTE_CHARS`), or None for an empty value, one over `MAX_VALUE_CHARS` or on more
    than one line: a ledger carries identifiers, not passages."""
    value = value.strip()
    if not value or len(value) > MAX_VALUE_CHARS or "\n" in value:
        return None
    note = " ".join(note.split())
    if len(note) > MAX_NOTE_CHARS:
        note = note[: MAX_NOTE_CHARS - 1] + "…"
    return LedgerEntry(kind=kind, value=value, note=note)


def in_order(*scans: Iterable[Sighting]) -> list[LedgerEntry]:
    """The entries the scanners saw, in text order (at one position, in scanner order);
    duplicates kept, None left out."""
    found = [(pos, e) for scan in scans for pos, e in scan if e is not None]
    found.sort(key=lambda pair: pair[0])
    return [e for _, e in found]
