"""Start-up time of every `contextfold` command → bench/results/startup.json.

Goal (issue 9): every command is quick. Each is measured as a ratio to a bare Typer CLI
that imports pydantic, typer and rich and prints its help (the floor any Typer command line
pays), with a goal of at most 1.5×. Measured: `--help`, `sessions`, `show`, `project` and
`compact` on a small imported session, and `import` of a small file.

A command that opens the database cannot beat the cost of the database stack itself, so two
more floors are measured the same way and reported beside the goal:
- `bare_command`: the bare Typer CLI running a command with `project`'s options (Typer builds
  a validator per option when a command runs, which `--help` skips);
- `bare_sqlalchemy`: that command also opening the same SQLite file through SQLAlchemy's
  async engine and aiosqlite (the store's stack) and reading the session's row;
- `bare_sqlite3`: the same read through the standard library's `sqlite3` (the stack of the
  read-only snapshot `sessions`, `show` and `project` use on an embedded database);
- `bare_pydantic`: the bare command validating one value with a one-field pydantic model (a
  command's floor when it checks its data with pydantic; Typer already loads pydantic's
  machinery to convert a command's parameters, so this is close to `bare_command`).

Each round runs every command once as a fresh process (`python -m contextfold`, the same
interpreter), in shuffled order (the `import` that creates the session `compact` then
compacts goes first), so the noise of this shared machine hits all alike; ratios are taken
within a round and reported as the median with their spread. A second, shorter phase times
`contextfold COMMAND --help` for every registered command (new ones included) the same way.

Run: `.venv/bin/python -m bench.startup_bench [--rounds N] [--help-rounds N]`.
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "startup.json"
SESSION_FILE = ROOT / "tests" / "fixtures" / "claude-code" / "short.jsonl"
GOAL = 1.5
# The reading commands use the store's read-only `sqlite3` snapshot on an embedded database
# (store/snapshot.py); the writing ones the full store (SQLAlchemy + aiosqlite): each is
# also reported over the floor of its own database stack.
READERS = ("sessions", "show", "project")
WRITERS = ("import", "compact")

BARE_CLI = '''
import sys

import pydantic  # noqa: F401
import rich  # noqa: F401
import typer

app = typer.Typer(help="A bare Typer command line.", add_completion=False)


@app.command()
def hello(name: str = typer.Argument("world")) -> None:
    """Say hello."""
    print(f"hello {name}")


@app.command()
def project(session: str = typer.Argument(...),
            model: str | None = typer.Option(None, "--model"),
            context_window: int | None = typer.Option(None, "--context-window"),
            format: str = typer.Option("openai", "--format"),
            db: str | None = typer.Option(None, "--db"),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the session id (the floor of running a command with these options)."""
    print(session)


@app.command()
def sqlalchemy(session: str = typer.Argument(...),
               db: str | None = typer.Option(None, "--db", envvar="CONTEXTFOLD_DB"),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """Read the session's row through SQLAlchemy's async engine and aiosqlite."""
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def read() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{db}")
        async with engine.connect() as conn:
            row = (await conn.execute(text("SELECT title FROM sessions WHERE id = :id"),
                                      {"id": session})).first()
        await engine.dispose()
        print(row[0])

    asyncio.run(read())


@app.command("pydantic-model")
def pydantic_model(session: str = typer.Argument(...),
                   db: str | None = typer.Option(None, "--db", envvar="CONTEXTFOLD_DB"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
    """Validate the session id with a one-field pydantic model, then print it."""
    from pydantic import BaseModel

    class Row(BaseModel):
        id: str

    print(Row.model_validate({"id": session}).id)


@app.command()
def sqlite3(session: str = typer.Argument(...),
            db: str | None = typer.Option(None, "--db", envvar="CONTEXTFOLD_DB"),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Read the session's row through the standard library's sqlite3."""
    import sqlite3 as driver

    with driver.connect(db) as conn:
        print(conn.execute("SELECT title FROM sessions WHERE id = ?", (session,)).fetchone()[0])


app()
'''

# A small chat to import each round (fresh ids every time, so it never collides).
CHAT = [{"role": "user", "content": f"Question {i}: what does step {i} of the build do?"}
        if i % 2 == 0 else
        {"role": "assistant", "content": f"Step {i} compiles module {i} and runs its tests."}
        for i in range(8)]


def command_env(database: Path) -> dict[str, str]:
    """The environment every timed process runs in. Bytecode caching is on whatever the
    calling shell says: an installed package has its modules compiled (pip compiles at
    install), so with `PYTHONDONTWRITEBYTECODE` set an editable checkout would be timed
    compiling its sources on every start, which no user pays."""
    env = {**os.environ, "CONTEXTFOLD_DB": str(database), "COLUMNS": "100"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def spread(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "q1": round(q[0], 3), "q3": round(q[2], 3)}


def registered_commands() -> list[str]:
    """Every command the CLI registers, as `contextfold --help` lists them."""
    import typer

    from contextfold.cli import app

    return sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--help-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="Results file (the baseline run of an older checkout, put first "
                        "on PYTHONPATH, writes startup_baseline.json).")
    parser.add_argument("--label", default="this checkout",
                        help="What was measured, e.g. the commit of a baseline run.")
    parser.add_argument("--help-only", action="store_true",
                        help="Rerun only the COMMAND --help phase into the existing --out file.")
    args = parser.parse_args()
    cf = [sys.executable, "-m", "contextfold"]
    if args.help_only:
        with tempfile.TemporaryDirectory() as tmp:
            bare = Path(tmp) / "bare_cli.py"
            bare.write_text(BARE_CLI)
            env = command_env(Path(tmp) / "cf.db")
            kept = json.loads(args.out.read_text())
            kept["command_help"] = help_phase(cf, bare, env, args.help_rounds)
        args.out.write_text(json.dumps(kept, indent=2) + "\n")
        print(json.dumps(kept["command_help"], indent=2))
        return
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_cli.py"
        bare.write_text(BARE_CLI)
        chat = Path(tmp) / "chat.json"
        chat.write_text(json.dumps(CHAT))
        database = Path(tmp) / "cf.db"
        env = command_env(database)
        _, out = timed([*cf, "import", str(SESSION_FILE), "--json"], env)
        session = json.loads(out)["session_id"]
        fixed = {
            "bare_typer_help": [sys.executable, str(bare), "--help"],
            "bare_command": [sys.executable, str(bare), "project", session],
            "bare_sqlalchemy": [sys.executable, str(bare), "sqlalchemy", session],
            "bare_sqlite3": [sys.executable, str(bare), "sqlite3", session],
            "bare_pydantic": [sys.executable, str(bare), "pydantic-model", session],
            "help": [*cf, "--help"],
            "sessions": [*cf, "sessions"],
            "show": [*cf, "show", session],
            "project": [*cf, "project", session],
        }
        for cmd in fixed.values():  # warm the file cache and write the bytecode
            timed(cmd, env)
        _, out = timed([*cf, "import", str(chat), "--json"], env)  # and the writers' bytecode
        timed([*cf, "compact", json.loads(out)["session_id"], "--json"], env)
        seconds: dict[str, list[float]] = {name: [] for name in [*fixed, "import", "compact"]}
        for _ in range(args.rounds):
            order = [*fixed, "import+compact"]
            random.shuffle(order)
            took: dict[str, float] = {}
            for name in order:
                if name == "import+compact":
                    took["import"], out = timed([*cf, "import", str(chat), "--json"], env)
                    fresh = json.loads(out)["session_id"]
                    took["compact"], _ = timed([*cf, "compact", fresh, "--json"], env)
                else:
                    took[name], _ = timed(fixed[name], env)
            for name, value in took.items():
                seconds[name].append(value)
        def over(floor: str, names: Iterable[str]) -> dict[str, list[float]]:
            """Each command's time over `floor`'s, per round."""
            return {name: [a / b for a, b in zip(seconds[name], seconds[floor], strict=True)]
                    for name in names}

        ratios = over("bare_typer_help", [n for n in seconds if n != "bare_typer_help"])
        over_db_floor = over("bare_sqlalchemy", WRITERS)
        over_sqlite3 = over("bare_sqlite3", READERS)
        over_pydantic = over("bare_pydantic", READERS)
        help_seconds = help_phase(cf, bare, env, args.help_rounds)
    result: dict[str, Any] = {
        "label": args.label,
        "goal_ratio": GOAL,
        "rounds": args.rounds,
        "seconds": {name: spread(values) for name, values in seconds.items()},
        "ratio_to_bare_typer": {name: spread(values) for name, values in ratios.items()},
        "ratio_to_sqlalchemy_floor": {name: spread(v) for name, v in over_db_floor.items()},
        "ratio_to_sqlite3_floor": {name: spread(v) for name, v in over_sqlite3.items()},
        "ratio_to_pydantic_floor": {name: spread(v) for name, v in over_pydantic.items()},
        "met": {name: statistics.median(values) <= GOAL for name, values in ratios.items()
                if not name.startswith("bare_")},
        "command_help": help_seconds,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def help_phase(cf: list[str], bare: Path, env: dict[str, str], rounds: int) -> dict[str, Any]:
    """`contextfold COMMAND --help` for every registered command, as ratios to the bare
    CLI's `--help` (the goal's reference) and to its `hello --help`: a command's help costs
    any Typer CLI more than the top-level list (Typer builds its parameters' validators and
    loads Rich's Markdown renderer), so that is the like-for-like floor."""
    commands = registered_commands()
    ratios: dict[str, list[float]] = {name: [] for name in commands}
    like: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        order = list(commands)
        random.shuffle(order)
        for name in order:
            floor, _ = timed([sys.executable, str(bare), "--help"], env)
            sub_floor, _ = timed([sys.executable, str(bare), "hello", "--help"], env)
            took, _ = timed([*cf, name, "--help"], env)
            ratios[name].append(took / floor)
            like[name].append(took / sub_floor)
    return {"rounds": rounds,
            "ratio_to_bare_typer": {name: spread(values) for name, values in ratios.items()},
            "ratio_to_bare_command_help": {name: spread(v) for name, v in like.items()},
            "met": {name: statistics.median(values) <= GOAL for name, values in ratios.items()}}


if __name__ == "__main__":
    main()
