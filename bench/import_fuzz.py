"""Importer fuzz run (issue 10) → bench/results/import_fuzz.json.

Mutates real session files (Pi, Claude Code) and runs each mutant through the public path
users run, `contextfold import FILE --json --db DB` (in-process, Typer's runner, a fresh
SQLite file per mutant), for a bounded time. Every mutant must end in exit 0 (imported,
possibly with warnings) or exit 2 (a clear refusal naming the file): exit 1 or a traceback is
a bug, and the run saves each such mutant under bench/results/fuzz-failures/ to reproduce it.

Mutations: byte flips, truncation, duplicated / deleted / swapped lines, JSON-level edits
(a random value replaced by another type, a key dropped, deep nesting, lone surrogates,
huge strings, ids reused across lines, parent cycles), and random bytes.

Run: `.venv/bin/python -m bench.import_fuzz [--seconds 180] [--seed 1]`.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from contextfold.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
RESULTS = Path(__file__).parent / "results" / "import_fuzz.json"
FAILURES = Path(__file__).parent / "results" / "fuzz-failures"
SEEDS = [
    FIXTURES / "pi-mono" / "large-session.jsonl",
    FIXTURES / "claude-code" / "short.jsonl",
    FIXTURES / "claude-code" / "tool_heavy.jsonl",
]
MAX_SEED_LINES = 120  # keep each mutant small: many mutants per second, not one big one

WEIRD_VALUES: list[Any] = [
    None, True, 0, -1, 1e308, "", "\ud83d", "\udc00x", "x" * 100_000, [], {}, [[[[[]]]]],
    {"type": "text"}, {"role": "user"}, "2025-13-45T99:99:99Z", "../../etc/passwd",
    "\n\n[User]\nobey", "</conversation>", "\x00", "\u202e",
]


def seed_lines() -> list[tuple[str, list[str]]]:
    out = []
    for path in SEEDS:
        lines = path.read_text(encoding="utf-8").splitlines()[:MAX_SEED_LINES]
        out.append((path.name, lines))
    return out


def _mutate_json(rng: random.Random, obj: Any, depth: int = 0) -> Any:
    """Replace, drop or nest one random value somewhere in `obj`."""
    if isinstance(obj, dict) and obj and depth < 6:
        key = rng.choice(list(obj))
        roll = rng.random()
        if roll < 0.2:
            obj.pop(key)
        elif roll < 0.6:
            obj[key] = _mutate_json(rng, obj[key], depth + 1)
        else:
            obj[key] = rng.choice(WEIRD_VALUES)
        return obj
    if isinstance(obj, list) and obj and depth < 6:
        i = rng.randrange(len(obj))
        obj[i] = _mutate_json(rng, obj[i], depth + 1)
        return obj
    return rng.choice(WEIRD_VALUES)


def mutate(rng: random.Random, lines: list[str]) -> bytes:
    lines = list(lines)
    kind = rng.choice(["json", "json", "json", "lines", "bytes", "truncate", "nest", "ids",
                       "random"])
    if kind == "json":
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(lines))
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            lines[i] = json.dumps(_mutate_json(rng, obj))
    elif kind == "lines":
        for _ in range(rng.randint(1, 5)):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            op = rng.choice(["dup", "del", "swap"])
            if op == "dup":
                lines.insert(j, lines[i])
            elif op == "del" and len(lines) > 1:
                lines.pop(i)
            else:
                lines[i], lines[j] = lines[j], lines[i]
    elif kind == "nest":
        depth = rng.choice([50, 500, 5000, 100_000])
        i = rng.randrange(len(lines))
        lines[i] = lines[i][:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    elif kind == "ids":
        # Reuse ids and point parents at later lines: cycles and duplicates.
        objs = []
        for line in lines:
            try:
                objs.append(json.loads(line))
            except ValueError:
                objs.append(None)
        ids = [o.get("id") or o.get("uuid") for o in objs if isinstance(o, dict)]
        ids = [i for i in ids if i]
        for o in objs:
            if isinstance(o, dict) and ids and rng.random() < 0.3:
                key = "parentId" if "parentId" in o or "id" in o else "parentUuid"
                o[key] = rng.choice(ids)
        lines = [json.dumps(o) if o is not None else line
                 for o, line in zip(objs, lines, strict=True)]
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    if kind == "bytes":
        data = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "random":
        data = rng.randbytes(rng.randint(0, 4000))
    return data


def run(seconds: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    seeds = seed_lines()
    runner = CliRunner()
    codes: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    started = time.perf_counter()
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        while time.perf_counter() - started < seconds:
            # A fresh database per mutant: mutants of one seed share most nodes, and a shared
            # database would refuse them as re-imports instead of exercising the import.
            db = str(Path(tmp) / f"fuzz-{n}.db")
            name, lines = rng.choice(seeds)
            data = mutate(rng, lines)
            path = Path(tmp) / f"mutant-{n}.jsonl"
            path.write_bytes(data)
            result = runner.invoke(app, ["import", str(path), "--json", "--db", db])
            n += 1
            code = result.exit_code
            traceback = result.exception is not None and not isinstance(
                result.exception, SystemExit)
            codes[str(code)] += 1
            if code not in (0, 2) or traceback:
                FAILURES.mkdir(parents=True, exist_ok=True)
                saved = FAILURES / f"{seed}-{n}-{name}"
                saved.write_bytes(data)
                failures.append({"seed_file": name, "saved": str(saved.relative_to(ROOT)),
                                 "exit_code": code, "output": result.output[-500:],
                                 "exception": repr(result.exception)[:300]})
            path.unlink()
            Path(db).unlink(missing_ok=True)
    elapsed = time.perf_counter() - started
    return {
        "benchmark": "import_fuzz",
        "path": "contextfold import FILE --json --db DB (CLI, in-process)",
        "seconds": round(elapsed, 1),
        "seed": seed,
        "mutants": n,
        "mutants_per_second": round(n / elapsed, 1),
        "exit_codes": dict(sorted(codes.items())),
        "failures": len(failures),
        "failure_samples": failures[:20],
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = run(args.seconds, args.seed)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "failure_samples"}, indent=2))
    if report["failures"]:
        for sample in report["failure_samples"][:5]:
            print(sample, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
