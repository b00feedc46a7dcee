"""Start-up time of the `contextfold` command → bench/results/startup.json.

Goal: `contextfold --help` and `contextfold project SESSION` (a small imported session) each
take at most 1.5× the time of a bare Typer CLI that imports pydantic, typer and rich and
prints its help: the floor any Typer command line pays.

Each round runs the three commands once, in a shuffled order, as fresh processes (the same
interpreter, the installed console entry point's module `python -m contextfold`), so the
noise of this shared machine hits all three alike; the ratios are computed within a round
and reported as the median with their spread (min, max, interquartile range).

Run: `.venv/bin/python -m bench.startup_bench [--rounds N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "startup.json"
SESSION_FILE = ROOT / "tests" / "fixtures" / "claude-code" / "short.jsonl"
GOAL = 1.5

BARE_CLI = '''
import pydantic  # noqa: F401
import rich  # noqa: F401
import typer

app = typer.Typer(help="A bare Typer command line.", add_completion=False)


@app.command()
def hello(name: str = typer.Argument("world")) -> None:
    """Say hello."""
    print(f"hello {name}")


@app.command()
def bye() -> None:
    """Say bye."""
    print("bye")


app()
'''


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.stderr[-2000:]}")
    return elapsed


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "q1": round(q[0], 3), "q3": round(q[2], 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_cli.py"
        bare.write_text(BARE_CLI)
        env = {**os.environ, "CONTEXTFOLD_DB": str(Path(tmp) / "cf.db"), "COLUMNS": "100"}
        imported = subprocess.run([sys.executable, "-m", "contextfold", "import",
                                   str(SESSION_FILE), "--json"], capture_output=True,
                                  text=True, env=env, check=True)
        session = json.loads(imported.stdout)["session_id"]
        commands = {
            "bare_typer_help": [sys.executable, str(bare), "--help"],
            "contextfold_help": [sys.executable, "-m", "contextfold", "--help"],
            "contextfold_project": [sys.executable, "-m", "contextfold", "project", session],
        }
        for cmd in commands.values():  # warm the file cache and the bytecode
            timed(cmd, env)
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[str, list[float]] = {"help": [], "project": []}
        for _ in range(args.rounds):
            order = list(commands)
            random.shuffle(order)
            took = {name: timed(commands[name], env) for name in order}
            for name, value in took.items():
                seconds[name].append(value)
            ratios["help"].append(took["contextfold_help"] / took["bare_typer_help"])
            ratios["project"].append(took["contextfold_project"] / took["bare_typer_help"])
    result: dict[str, Any] = {
        "goal_ratio": GOAL,
        "rounds": args.rounds,
        "seconds": {name: spread(values) for name, values in seconds.items()},
        "ratio_to_bare_typer": {name: spread(values) for name, values in ratios.items()},
        "met": {name: statistics.median(values) <= GOAL for name, values in ratios.items()},
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
