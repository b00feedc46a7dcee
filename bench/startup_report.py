"""The CLI start-up section of docs/benchmarks.md, from bench/results/startup.json (and the
baseline run of the previous checkout, startup_baseline.json, when present)."""

from __future__ import annotations

from typing import Any

COMMANDS = (("help", "`contextfold --help`"),
            ("sessions", "`sessions` (one small session stored)"),
            ("show", "`show SESSION` (4 messages)"),
            ("project", "`project SESSION` (4 messages)"),
            ("import", "`import` of an 8-message chat"),
            ("compact", "`compact` of that chat"))
FLOORS = (("bare_command", "bare Typer CLI running a command with `project`'s options"),
          ("bare_sqlalchemy", "… that also opens the SQLite file through SQLAlchemy + "
                              "aiosqlite and reads one row (the store's stack)"),
          ("bare_sqlite3", "… reading that row through the standard library's `sqlite3`"),
          ("bare_pydantic", "bare Typer CLI running that command and validating one value "
                            "with a one-field pydantic model"))


def _met(ok: bool) -> str:
    return "yes" if ok else "**missed**"


def _range(v: dict[str, float]) -> str:
    return f"{v['q1']:.2f} – {v['q3']:.2f}"


def startup_section(data: dict[str, Any] | None,
                    baseline: dict[str, Any] | None = None) -> list[str]:
    head = ["## CLI start-up (`bench/startup_bench.py` → `bench/results/startup.json`)", ""]
    if data is None:
        return [*head, "Not run yet: `make bench`.", ""]
    if "ratio_to_sqlalchemy_floor" not in data:  # a results file of the older bench
        return [*head, "Results are from an older version of the bench: rerun "
                "`python -m bench.startup_bench`.", ""]
    goal, ratio, sec = data["goal_ratio"], data["ratio_to_bare_typer"], data["seconds"]
    before = (baseline or {}).get("ratio_to_bare_typer", {})
    lines = [*head,
             "Each command as a fresh process, as a ratio to a bare Typer CLI that imports "
             "pydantic, typer and rich and prints its help (the floor any Typer CLI pays; "
             f"{sec['bare_typer_help']['median']:.2f} s here). {data['rounds']} rounds, all "
             "commands in shuffled order, ratios taken within a round: the machine is shared, "
             "so seconds are inflated and only the ratios compare. Every process runs with "
             "its bytecode cached, as an installed package has it. Median ratio, with the "
             "interquartile range."
             + (f" *Before*: the same bench on {baseline['label']}." if baseline else ""),
             "",
             "| command | before | now | IQR now | goal | met |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    for key, label in COMMANDS:
        was = f"{before[key]['median']:.2f}×" if key in before else "—"
        lines.append(f"| {label} | {was} | {ratio[key]['median']:.2f}× | "
                     f"{_range(ratio[key])} | ≤ {goal}× | {_met(data['met'][key])} |")
    lines += ["", "The floors, measured the same way (what no command using these libraries "
              "can go below):", "",
              "| floor | ratio to bare `--help` | IQR |", "| --- | ---: | --- |"]
    for key, label in FLOORS:
        if key not in ratio:  # a results file from before that floor was measured
            continue
        lines.append(f"| {label} | {ratio[key]['median']:.2f}× | {_range(ratio[key])} |")
    lines += ["", *_database_floors(data), ""]
    helps = data.get("command_help")
    if helps:
        like = helps.get("ratio_to_bare_command_help")
        lines += [f"`contextfold COMMAND --help` for every registered command "
                  f"({helps['rounds']} rounds), as a ratio to the bare CLI's `--help`"
                  + (" and to its `hello --help` (a command's help costs any Typer CLI more "
                     "than the top-level list: Typer builds the parameters' validators and "
                     "loads Rich's Markdown renderer)" if like else "") + ":", "",
                  "| command | / bare `--help` |" + (" / bare `hello --help` |" if like else "")
                  + " goal (like for like) | met |",
                  "| --- | ---: |" + (" ---: |" if like else "") + " --- | --- |"]
        for name, v in helps["ratio_to_bare_typer"].items():
            sub = f" {like[name]['median']:.2f}× |" if like else ""
            # A command's help is held to the bare CLI's help of a command, like for like.
            met = like[name]["median"] <= goal if like else helps["met"][name]
            lines.append(f"| `{name} --help` | {v['median']:.2f}× |{sub} ≤ {goal}× | "
                         f"{_met(met)} |")
        lines.append("")
    lines += [*_why(data), ""]
    return lines


def _ratios(over: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"`{k}` {v['median']:.2f}×" for k, v in over.items())


def _database_floors(data: dict[str, Any]) -> list[str]:
    """Each database command over the floor of the stack it uses."""
    if "ratio_to_sqlite3_floor" not in data:  # before the snapshot: all on SQLAlchemy
        return ["Every command that opens the database, as a ratio to that SQLAlchemy floor "
                "(what contextfold adds on top of its own database stack): "
                + _ratios(data["ratio_to_sqlalchemy_floor"]) + "."]
    return ["What contextfold adds on top of its own database stack: the reading commands "
            "over the `sqlite3` floor, "
            + _ratios(data["ratio_to_sqlite3_floor"]) + "; the writing ones over the "
            "SQLAlchemy floor, " + _ratios(data["ratio_to_sqlalchemy_floor"]) + "."]


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _why(data: dict[str, Any]) -> list[str]:
    """What the figures come from, and why a command misses the goal when one does."""
    ratio, met, goal = data["ratio_to_bare_typer"], data["met"], data["goal_ratio"]
    writers = [k for k in ("import", "compact") if k in met]
    missed = [f"`{k}` ({ratio[k]['median']:.2f}×)" for k in writers if not met[k]]
    readers_missed = [f"`{k}` ({ratio[k]['median']:.2f}×)"
                      for k in ("sessions", "show", "project") if not met.get(k, True)]
    return [
        "Where the time goes. `sessions`, `show` and `project` read an embedded SQLite "
        "database through the store's read-only snapshot on the standard library's "
        "`sqlite3` (docs/store.md: it serves only a file exactly at the shipped schema and "
        "gives way to the full store on anything else): they import no SQLAlchemy, "
        "aiosqlite or Alembic (a test asserts it through `sys.modules`), so their floor is "
        "the `bare_sqlite3` row; on top of it they load the core's pydantic models (every "
        "stored node is validated into them) and, for `project`, the model catalog and the "
        "token estimator."
        + (" The `bare_pydantic` row shows that pydantic itself is no obstacle: Typer "
           "already loads pydantic's machinery to convert a command's parameters, so one "
           "more model costs a command little; what the reading commands add over it is "
           "contextfold's own start (building the core's message models, reading the "
           "catalog, printing with Rich): " + _ratios(data["ratio_to_pydantic_floor"]) + "."
           if "ratio_to_pydantic_floor" in data else "")
        + (f" That keeps {_and(readers_missed)} above the {goal}× goal." if readers_missed
           else "")
        + " "
        "`import` and `compact` write, so they use the full store: SQLAlchemy's async "
        "engine pulls in its ORM (`sqlalchemy.ext.asyncio` imports its session classes), "
        f"and with aiosqlite and the first connection that floor alone is "
        f"{ratio['bare_sqlalchemy']['median']:.2f}× (the `bare_sqlalchemy` row), before the "
        "importers and the summariser they load."
        + (f" So {_and(missed)} stay above the {goal}× goal while they write "
           "through SQLAlchemy." if missed else ""),
        "",
        "What was cut: `--help` loads no provider SDK, SQLAlchemy, Alembic or matplotlib; an "
        "up-to-date database never imports Alembic; `project`, `show` and `sessions` load no "
        "file importer, summariser, search-text indexer or database driver beyond `sqlite3`; "
        "the packaged catalog finds an exact model id in the rows that name it and parses "
        "and indexes all 4,061 rows only for a name that needs them (a loose or "
        "provider-qualified one); the reading commands on an embedded database run without "
        "an event loop, so they never import asyncio; and the bench times processes with "
        "their bytecode cached, as an installed package has it."]
