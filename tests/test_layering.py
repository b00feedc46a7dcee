"""The arrows between the layers, read from the source (every import, also inside functions):
the core's imports form no cycle and reach no I/O layer, nothing but the command line
imports the command line, every module imports only its own floor and the floors below
(`LAYERS`), and no two modules anywhere import each other (DESIGN: pure core, faces
translate; issue 39)."""

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
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # An import under `if TYPE_CHECKING:` is read by type checkers only, never run: it
    # makes no cycle (a module may name in an annotation the class of one that imports it).
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test).endswith("TYPE_CHECKING")
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
    masking = imported_names(PACKAGE / "core" / "view" / "masking.py")
    assert "contextfold.core.text.identifiers" in masking
    assert "contextfold.core.values.messages" in masking
    store = import_graph("contextfold.store")
    assert "contextfold.store.sql.queries" in store["contextfold.store.sql.sessions"]
    # `from . import queries`
    assert "contextfold.store" not in store["contextfold.store.sql.sessions"]


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


# --------------------------------------------------------------------------- layers and cycles

# The floors of contextfold, lowest first (docs/architecture.md draws them). A module may
# import its own floor and the floors below it, never one above: the pure core knows no
# wire protocol, the store no runtime, the runtime no face.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "ids", "_lazy", "_sync", "_net", "user_config", "titles"}),  # shared
    frozenset({"core"}),  # pure values and rules
    frozenset({"wire"}),  # one reader/writer per wire protocol
    frozenset({"store", "providers", "formats", "data"}),  # I/O edges
    frozenset({"summarize"}),  # summarisers (over providers)
    frozenset({"runtime"}),  # the engine every face drives
    frozenset({"billing", "replay", "replay_session", "demo_session", "guard", "_workers",
               "stored_request"}),  # services
    frozenset({"replay_plot", "evaluate", "integrations", "mcp", "server", "proxy"}),  # faces
    frozenset({"cli", "__main__", "__init__"}),  # the command line; the package's facade
)


def top_part(module: str) -> str:
    """The top-level package or module of contextfold a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor_of(module: str) -> int:
    part = top_part(module)
    for floor, members in enumerate(LAYERS):
        if part in members:
            return floor
    raise AssertionError(f"{part} has no floor in LAYERS: place it")


def test_every_part_of_the_package_has_a_floor() -> None:
    parts = {top_part(name) for name in ALL_MODULES}
    placed = set().union(*LAYERS)
    assert parts - placed == set(), "a new package needs its floor in LAYERS"
    assert placed - parts == set(), "LAYERS names a package that no longer exists"


def test_no_module_imports_a_floor_above_its_own() -> None:
    upward = sorted(f"{name} (floor {floor_of(name)}) imports {m} (floor {floor_of(m)})"
                    for name, path in ALL_MODULES.items()
                    for m in imported_names(path)
                    if m in ALL_MODULES and floor_of(m) > floor_of(name))
    assert upward == []


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that import one another, directly or not
    (Tarjan's algorithm; a module importing itself is a group too)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


# Cycles being removed elsewhere; each entry names who removes it. Nothing may be added.
ALLOWED_CYCLES: tuple[set[str], ...] = ()


def test_the_cycle_finder_can_fail() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        {"a", "b", "c"}]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
    assert strongly_connected({"a": {"a"}}) == [{"a"}]


def test_no_two_modules_import_each_other_anywhere() -> None:
    """No import cycle in the whole package, imports inside functions included (they only
    hide a cycle from the interpreter, not from a reader)."""
    groups = strongly_connected(import_graph("contextfold"))
    assert [g for g in groups if g not in ALLOWED_CYCLES] == []


def test_no_two_parts_of_the_package_import_each_other() -> None:
    parts: dict[str, set[str]] = {}
    for name, path in ALL_MODULES.items():
        parts.setdefault(top_part(name), set()).update(
            top_part(m) for m in imported_names(path)
            if m in ALL_MODULES and top_part(m) != top_part(name))
    assert strongly_connected(parts) == []


# Inside the core, its folders in order (docs/architecture.md, "Folders"): a folder imports
# only the folders before it, so no two folders of the core import each other.
CORE_FOLDERS = ("values", "text", "view", "models", "money", "sizing", "render", "planning",
                "report", "recall")


def core_folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "core" else None


def test_every_core_module_is_in_a_folder_with_a_place() -> None:
    flat = sorted(name for name, path in ALL_MODULES.items()
                  if name.startswith("contextfold.core.") and path.parent.name == "core"
                  and path.name != "__init__.py")
    assert flat == [], "a core module belongs in one of CORE_FOLDERS"
    folders = {core_folder(name) for name in ALL_MODULES} - {None}
    assert folders == set(CORE_FOLDERS), "a new core folder needs its place in CORE_FOLDERS"


def test_no_core_folder_imports_a_later_one() -> None:
    later = sorted(f"{name} imports {m}"
                   for name, path in ALL_MODULES.items() if core_folder(name)
                   for m in imported_names(path) if core_folder(m)
                   and CORE_FOLDERS.index(core_folder(m)) > CORE_FOLDERS.index(core_folder(name)))
    assert later == []


# --------------------------------------------------------------------------- store folders

# The store's folders (docs/architecture.md, "Folders"). Pairs that still import each other,
# each naming who removes it; nothing may be added.
STORE_FOLDER_CYCLES: tuple[set[str], ...] = ()


def folder_imports(package: str) -> dict[str, set[str]]:
    """Folder of `package` -> the other folders of it its modules import (any depth of a
    file, function-level imports too; modules at the package's top belong to no folder)."""
    depth = package.count(".") + 1
    out: dict[str, set[str]] = {}
    for name, path in modules_of(package).items():
        parts = name.split(".")
        if len(parts) <= depth or (len(parts) == depth + 1 and path.name != "__init__.py"):
            continue  # the package itself, or a module at its top
        folder = parts[depth]
        found = out.setdefault(folder, set())
        for m in imported_names(path):
            other = m.split(".")
            if m.startswith(package + ".") and len(other) > depth + 1 and other[depth] != folder:
                found.add(other[depth])
    return out


def test_recall_reads_the_sql_store_and_never_the_reverse() -> None:
    # One way (docs/architecture.md): `store/recall/` reads `store/sql/`'s tables and
    # helpers; `store/sql/` keeps the recall index through the `NodeIndex` the composed
    # store hands it (`store/sql_store.py`), never by importing `store/recall/`.
    folders = folder_imports("contextfold.store")
    assert "sql" in folders["recall"]
    assert "recall" not in folders["sql"]


def test_no_two_folders_of_the_store_import_each_other() -> None:
    folders = folder_imports("contextfold.store")
    assert "sql" in folders["audit"]  # the reader sees one folder read another
    groups = strongly_connected(folders)
    assert [g for g in groups if g not in STORE_FOLDER_CYCLES] == []
