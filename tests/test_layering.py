"""The arrows between the layers, read from the source (every import, also inside functions):
the core's imports form no cycle and reach no I/O layer, and nothing but the command line
imports the command line (DESIGN: pure core, faces translate)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import contextfold

PACKAGE = Path(contextfold.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package: str) -> dict[str, Path]:
    """Module name -> file, for every module of `package` (itself included)."""
    root = PACKAGE.parent / package.replace(".", "/")
    return {module_name(p): p for p in sorted(root.rglob("*.py"))}


ALL_MODULES = modules_of("contextfold")


def imported_names(path: Path) -> set[str]:
    """Every module `path` imports, absolute, at any depth of the file (function-level
    imports too). `from x import y` imports `x.y` when that is a module, else `x`."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in ALL_MODULES else module)
    return found


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    files = modules_of(package)
    return {name: {m for m in imported_names(path) if m in files and m != name}
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets, each as the path that closes it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def test_the_graph_reader_finds_function_level_imports_and_cycles() -> None:
    # The reader itself can fail: a cycle hidden by an import inside a function is found.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    masking = imported_names(PACKAGE / "core" / "masking.py")
    assert "contextfold.core.identifiers" in masking and "contextfold.core.messages" in masking
    store = import_graph("contextfold.store")
    assert "contextfold.store.queries" in store["contextfold.store.sql"]
    assert "contextfold.store" not in store["contextfold.store.sql"]  # `from . import queries`


def test_the_core_has_no_import_cycle() -> None:  # DESIGN: small modules, one idea each
    graph = import_graph("contextfold.core")
    assert len(graph) > 20 and cycles(graph) == []


CORE_MAY_NOT_IMPORT = ("contextfold.store", "contextfold.providers", "contextfold.runtime",
                       "contextfold.server", "contextfold.proxy", "contextfold.cli",
                       "contextfold.integrations", "asyncio", "sqlalchemy", "openai",
                       "anthropic")


def test_the_core_imports_no_io_layer_nor_a_face() -> None:  # DESIGN: pure core
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        bad = {m for m in imported_names(path)
               if any(m == p or m.startswith(p + ".") for p in CORE_MAY_NOT_IMPORT)}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def _layers() -> list[str]:
    """Every top-level package and module of contextfold but the command line itself."""
    names = {p.name if p.is_dir() else p.stem for p in PACKAGE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    return sorted(names - {"cli", "__main__", "__init__"})


@pytest.mark.parametrize("layer", _layers())
def test_nothing_but_the_command_line_imports_it(layer: str) -> None:  # DESIGN: faces
    root = PACKAGE / layer
    paths = sorted(root.rglob("*.py")) if root.is_dir() else [PACKAGE / f"{layer}.py"]
    for path in paths:
        bad = {m for m in imported_names(path)
               if m == "contextfold.cli" or m.startswith("contextfold.cli.")}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"
