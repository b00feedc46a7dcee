"""Conservative token estimates (SPEC E1-E5).

PLACEHOLDER: the estimator engineer replaces this module; the signature of `estimate_text`
is the contract other modules rely on.
"""

from __future__ import annotations


def estimate_text(text: str, family: str | None = None) -> int:
    """A conservative (never under-counting) token estimate of `text`."""
    cjk = sum(1 for ch in text if ord(ch) >= 0x2E80)
    return cjk * 2 + (len(text) - cjk) // 2 + 1
