"""The benchmarks' results files (bench/results/*.json) and the two small formats every
report of them shares, in one place for docs_report and the section modules."""

from __future__ import annotations

import fcntl
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


def merge_run(path: Path, head: dict[str, Any], store: str, run: dict[str, Any]) -> None:
    """Put `run` as `runs[store]` of the results file `path` (its other stores' runs kept,
    `head` over its top-level fields), under a lock: the soaks of two stores run at once,
    each writing its own as it goes."""
    with (path.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        runs = {**old.get("runs", {}), store: run}
        path.write_text(json.dumps({**old, **head, "runs": runs}, indent=2) + "\n",
                        encoding="utf-8")
