"""`store/sql/folded.py` writes an append's rows in raw SQL for two dialects (issue 26). Its
column lists must stay the schema's (`store/sql/schema.py`, which the migrations create): a
column added, renamed or dropped in one place and not the other fails here, before any
database sees the statement."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from sqlalchemy.sql.elements import TextClause

from contextfold.store.sql import folded, schema

# Tables whose whole row an append writes: every column is named, none twice.
WHOLE_ROWS = ("nodes", "recall_nodes", "mirror_index", "leaf_moves")
INSERT = re.compile(r"INSERT INTO (\w+) \(([^)]*)\)")
UPDATE = re.compile(r"UPDATE (\w+) SET (.*?) WHERE", re.S)


def statements() -> Iterator[tuple[str, str]]:
    """(name, SQL text) of every statement `folded` defines, both dialects."""
    for name, value in vars(folded).items():
        if isinstance(value, TextClause):
            yield name, value.text
        elif isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
            for i, text in enumerate(value):
                yield f"{name}[{i}]", text


def inserts(text: str) -> list[tuple[str, list[str]]]:
    return [(table, [c.strip() for c in cols.split(",")]) for table, cols in INSERT.findall(text)]


# SQLite's full-text index is a virtual table only a migration creates (0003_recall.py,
# `fts5(document, ...)`): its one column and the rowid it shares with `recall_nodes`.
VIRTUAL = {"recall_fts": ["rowid", "document"]}


def columns(table: str) -> list[str]:
    if table in VIRTUAL:
        return VIRTUAL[table]
    return [c.name for c in schema.metadata.tables[table].columns]


def test_the_virtual_tables_columns_are_the_migrations() -> None:
    from pathlib import Path

    migration = Path(folded.__file__).parents[1] / "migrations" / "versions" / "0003_recall.py"
    assert "CREATE VIRTUAL TABLE recall_fts USING fts5(document, content=''" in \
        migration.read_text(encoding="utf-8")


def test_the_reader_can_fail() -> None:
    assert inserts("INSERT INTO nodes (id, tree_id) VALUES (1, 2)") == [
        ("nodes", ["id", "tree_id"])]
    assert set(columns("nodes")) != {"id", "tree_id"}


def test_every_table_is_written_by_both_dialects() -> None:
    by_dialect: dict[str, set[str]] = {"sqlite": set(), "postgresql": set()}
    for name, text in statements():
        dialect = "postgresql" if name.startswith("_PG") else "sqlite"
        by_dialect[dialect].update(t for t, _ in inserts(text) if t in schema.metadata.tables)
    assert by_dialect["sqlite"] == by_dialect["postgresql"] == set(WHOLE_ROWS)


@pytest.mark.parametrize("name,text", list(statements()))
def test_the_raw_sql_names_the_schemas_columns(name: str, text: str) -> None:
    for table, cols in inserts(text):
        if table not in schema.metadata.tables and table not in VIRTUAL:
            assert table.startswith("cf_"), f"{name}: unknown table {table}"  # folded's views
            continue
        assert len(cols) == len(set(cols)), f"{name}: a column twice in {table}"
        assert sorted(cols) == sorted(columns(table)), f"{name}: {table}"
    for table, assignments in UPDATE.findall(text):
        assigned = {a.split("=")[0].strip() for a in assignments.split(",")}
        assert assigned <= set(columns(table)), f"{name}: {table} has no {assigned}"


def test_the_views_carry_every_column_their_triggers_read() -> None:
    # The SQLite views are the parameter lists of the triggers: each `NEW.x` must be a view
    # column, or SQLite fails only when the trigger first fires.
    views = {m.group(1): {c.split(" AS ")[1] for c in m.group(2).split(", ")}
             for text in folded.SQLITE_SETUP
             if (m := re.match(r"CREATE TEMP VIEW IF NOT EXISTS (\w+) AS SELECT (.*) WHERE 0",
                               text))}
    assert set(views) == {"cf_node_write", "cf_move", "cf_append"}
    for text in folded.SQLITE_SETUP:
        trigger = re.match(r"CREATE TEMP TRIGGER IF NOT EXISTS \w+ INSTEAD OF INSERT ON (\w+)",
                           text)
        if trigger:
            read = set(re.findall(r"NEW\.(\w+)", text))
            assert read <= views[trigger.group(1)], read - views[trigger.group(1)]
