"""The benchmarks' results files (bench/results/*.json) and the two small formats every
report of them shares, in one place for docs_report and the section modules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict[str, Any] | None:
    """bench/results/`name`.json, or None when that benchmark has not been run."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def kilo(tokens: int) -> str:
    """A token count in thousands, one decimal (`2.0k`)."""
    return f"{tokens / 1000:.1f}k"
