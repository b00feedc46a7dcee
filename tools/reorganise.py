#!/usr/bin/env python3
"""Reorganise `core/`, `store/` and `tests/` into folders named after their subjects (issue 39).

Run from the repository root, on any recent commit of main:

    python3 tools/reorganise.py            # move, rewrite, print a summary
    python3 tools/reorganise.py --dry-run  # print what would change, touch nothing

It is a script rather than a commit because other branches edit these modules at the same
time: re-run on the merged main, it moves whatever is still flat and rewrites every reference
to an old place, and a second run changes nothing (idempotent). Standard library only; it
calls `git mv`, and `ruff check --select I --fix` (when found) to re-sort the imports whose
paths it changed.

What it does, in order:

1. plans the moves from the tables below (a module not in a table stays where it is and is
   reported, so a module added since is placed by adding one word to a table);
2. rewrites every file under src/, tests/, bench/, examples/, docs/ plus README.md, Makefile
   and pyproject.toml:
   * relative imports of any depth, recomputed from the importer's new place to the target's
     new place (`from .budget import X` in core/planner.py becomes `from ..models.budget
     import X`), also inside functions and `from . import module` forms (split when the
     modules now live in different folders);
   * absolute dotted names anywhere in the text (`import contextfold.core.budget`,
     `importlib.import_module("contextfold.core.x")`, `mock.patch("contextfold.core.x.f")`,
     `_EXPORTS` values, logger names, `tests.test_x` helpers, docs);
   * relative strings naming a module (`_EXPORTS = {"X": ".engine"}`, `import_module(".x",
     __package__)`): resolved from the file's old package, rewritten from its new one;
   * file paths (`core/budget.py`, `src/contextfold/store/sql.py`, `tests/test_x.py`,
     `"core" / "masking.py"`), and the short dotted names docs use (`core.fit`, and
     `store.x` inside backticks);
   * `Path(__file__).parent…` in a moved file, one more level up per level it moved down;
3. creates each new folder's `__init__.py` (its docstring names the subject) and `git mv`s
   the files.

The module style is kept: a relative import stays relative, an absolute one absolute.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import textwrap
import tokenize
from collections import Counter
from pathlib import Path

# ---------------------------------------------------------------------------------- the tables

# src/contextfold/core/<group>/: group -> (docstring, modules). Ordered lowest first: a group
# imports only the groups above it in this table (no import circle between folders).
CORE: dict[str, tuple[str, list[str]]] = {
    "values": ("The immutable values everything works on: messages and nodes, branches, "
               "resources, tool calls, content chains, and the bounded memos a process holds.",
               ["surrogates", "messages", "tree", "resources", "tool_calls", "held", "runs",
                "content_chain"]),
    "text": ("Reading text: its conservative token count, the identifiers a resumed agent "
             "must quote verbatim, and the sentences that state a rule.",
             ["text_estimate", "constraints", "prose_identifiers", "identifiers"]),
    "view": ("The model's view of a branch: the projection (checkpoint, kept tail, what "
             "followed), masked tool output and the active pins.",
             ["projection", "masking", "pins"]),
    "models": ("What a model can hold: the capacity catalog and the budgets derived from a "
               "capacity.", ["budget", "catalog"]),
    "money": ("What requests and sessions cost: prices and cache rules, session costs, and "
              "where a request stops reusing the cached prefix.",
              ["prices", "costs", "prefix_breaks"]),
    "sizing": ("Does the next request fit: the token estimator, the one sizing policy and the "
               "one model resolver that says which model is sized for.",
               ["estimator", "fit", "resolver"]),
    "render": ("A branch rendered for a reader: provider request shapes (and independent "
               "checks of them), and the plain text the summariser reads.",
               ["export", "validity", "serialize"]),
    "planning": ("The prepare step of a compaction: when to compact, where raw retention "
                 "resumes, masking or summary, the split turn and the identifier ledger.",
                 ["boundary", "plan", "planner", "mask_planner", "split_turn", "ledger",
                  "cost_trigger"]),
    "report": ("What the faces show about a session: where the next request's tokens go, and "
               "why a compaction ran and what it paid.", ["breakdown", "explain"]),
    "recall": ("Recall (SPEC L): the index and query text, the recall tools' definitions and "
               "the recall that comes by itself.",
               ["recall_text", "recall_tools", "auto_recall"]),
}

# src/contextfold/store/<group>/: group -> (docstring, modules); "old:new" renames a module
# whose old name is now the folder's. Kept at store/: the vocabulary every kind of store
# shares (errors, values, protocol, inputs, refs), the in-memory store (memory) and the SQL
# store composed of `sql/`'s and `recall/`'s parts (sql_store, written after the move: the
# old `base` and `session_store` are its parts now, issue 39).
STORE: dict[str, tuple[str, list[str]]] = {
    "sql": ("`SqlSessionStore` on SQLite or PostgreSQL (SQLAlchemy Core): where the database "
            "is, its tables and migrations, rows, reads, writes, leases and tenants.",
            ["location", "engine", "schema", "head", "migrate", "rows", "memo", "loading",
             "queries", "folded", "base", "branching", "importing", "lease", "liveness",
             "mirroring", "pinning", "tenancy", "sql:session_store"]),
    "sqlite": ("SQLite without SQLAlchemy's layers: the one-hop fast path of the async "
               "driver.",
               ["sqlite_hops"]),
    "recall": ("Recall over a stored session (SPEC L1-L4): the full-text index kept with the "
               "nodes, its queries, their arguments, the re-derived hits, and the in-memory "
               "search.",
               ["recall_args", "recall_trust", "recall_index", "recall", "memory_search"]),
    "audit": ("Audits of a store: the tables derived from the nodes checked against them, the "
              "whole-store invariants and `verify_tree`.",
              ["derived", "invariants", "verify"]),
}

STORE_KEPT = ("errors", "values", "protocol", "inputs", "refs", "memory", "sql_store",
              "snapshot")

# tests/<folder>/: the tests of a module where its path says. Not listed: the tests of the
# whole package (layering, public API, errors, docs, README, cross-face, fleet), and the
# helpers other tests import (builders, store_fixtures, server_fixtures, fakes).
TESTS: dict[str, list[str]] = {
    "core/values": ["test_core_tree", "test_core_runs", "test_surrogates", "test_held_memo"],
    "core/text": ["test_prose_identifiers"],
    "core/view": ["test_core_projection", "test_masking", "test_pins",
                  "test_pins_masking_properties"],
    "core/models": ["test_catalog"],
    "core/money": ["test_prices", "test_session_cost"],
    "core/sizing": ["test_estimator", "test_estimator_cache", "test_resolver", "test_fit_policy",
                    "test_fit_margin"],
    "core/render": ["test_serialize", "test_hostile_text"],
    "core/planning": ["test_core_boundary", "test_core_planner", "test_core_branch_grown",
                      "test_core_provider_compaction", "test_split_turn", "test_cost_trigger",
                      "test_ledger", "test_ledger_adaptive"],
    "core/report": ["test_core_breakdown", "test_compaction_explained"],
    "core/recall": ["test_auto_recall", "test_recall_text_fast"],
    "store": ["test_store_append_cost", "test_store_basic", "test_store_branching",
              "test_store_commit", "test_store_concurrency", "test_store_crash",
              "test_store_damage", "test_store_derived", "test_store_folded_schema",
              "test_store_memo_properties", "test_store_protocol", "test_store_response_ids",
              "test_store_snapshot", "test_store_sqlite_fallback", "test_store_sqlite_writers",
              "test_store_tamper", "test_store_tenancy", "test_recall_store",
              "test_recall_memory", "test_id_refs"],
    "runtime": ["test_runtime_conversation", "test_runtime_held", "test_runtime_mirror",
                "test_runtime_preflight", "test_runtime_recall", "test_runtime_research_agent",
                "test_runtime_stale", "test_runtime_summarizer", "test_runtime_support",
                "test_split_turn_runtime", "test_cost_trigger_runtime", "test_compaction_preview",
                "test_q5_append_only", "test_perf_paths", "test_prompt_cache_marks",
                "test_runtime_driver"],
    "cli": ["test_cli", "test_cli_compact_preview", "test_cli_first_hour",
            "test_cli_help_extras", "test_cli_hostile", "test_cli_models", "test_cli_newcomer",
            "test_cli_startup", "test_cli_text_safety", "test_chat_cli", "test_chat_windows",
            "test_recall_cli"],
    "server": ["test_server_api", "test_server_compact_preview", "test_server_compaction",
               "test_server_cost", "test_server_damage", "test_server_guard", "test_server_hub",
               "test_server_idempotency", "test_server_models", "test_server_page_api",
               "test_server_process", "test_server_summarizer", "test_server_tenancy",
               "test_server_turn_cost", "test_server_workers_lease", "test_server_memory"],
    "integrations": ["test_integration_inspect", "test_integration_langchain",
                     "test_integration_langchain_api", "test_integration_langchain_bugs",
                     "test_integration_langchain_newcomer", "test_integration_openai_agents",
                     "test_integration_pydantic_ai", "test_integrations_neutral"],
    "formats": ["test_formats_chat", "test_formats_claude_code", "test_formats_pi",
                "test_formats_robustness", "test_formats_stream"],
    "summarize": ["test_extractive", "test_extractive_fit_oracle", "test_llm_summarizer",
                  "test_prompts", "test_summary_carry", "test_summary_prefix",
                  "test_language_goal", "test_user_words", "test_continuity_checks",
                  "test_offline_compaction_linear"],
    "providers": ["test_providers_anthropic", "test_providers_errors", "test_providers_factory",
                  "test_providers_fakeserver", "test_providers_openai_compat",
                  "test_providers_protocols", "test_offline_reply_text"],
    "wire": ["test_wire", "test_wire_responses_items"],
    # Not tests/bench/: ruff (src = [..., "tests", "bench"]) would read it as the top-level
    # `bench` package and re-sort `from bench import ...` lines.
    "benchmarks": ["test_bench_frameworks", "test_bench_peers", "test_bench_peers_probes",
              "test_bench_proxy"],
    "evaluate": ["test_eval", "test_eval_llama", "test_continuity_acceptance"],
    "replay": ["test_replay", "test_compaction_explained_replay", "test_evidence_counters"],
    "mcp": ["test_mcp_parts", "test_mcp_server"],
    "guard": ["test_guard_depth"],
}

SRC = Path("src")
PACKAGE = SRC / "contextfold"
# Folders whose text is rewritten, and single files; never a virtual environment.
TEXT_ROOTS = ("src", "tests", "bench", "examples", "docs")
TEXT_FILES = ("README.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".mako", ".sh", ".yml", ".yaml",
                 ".js", ".html", ".css"}
PROSE_SUFFIXES = {".md", ".txt"}  # where a bare `core.x` is a module name, not code
SKIP_PARTS = {".venv", ".venv-peers", "node_modules", "__pycache__", ".git", "results",
              "fixtures", "site-packages"}


def skipped(path: Path) -> bool:
    """A file no rewrite may touch: in a virtual environment (any `.venv*`, such as the
    benches' own), installed packages, caches, VCS data, recorded results or fixtures."""
    folders = path.parts[:-1]
    return bool(SKIP_PARTS.intersection(folders)) or any(p.startswith(".venv") for p in folders)
PY_ROOTS = ("src", "tests", "bench", "examples")


# --------------------------------------------------------------------------------- the plan

def module_of(path: Path) -> str:
    """The dotted module a .py file under the repository root is (src/ is a source root)."""
    parts = list(path.with_suffix("").parts)
    if parts[0] == "src":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def file_of(module: str, package: bool = False) -> Path:
    parts = module.split(".")
    base = SRC if parts[0] == "contextfold" else Path()
    return base.joinpath(*parts, "__init__.py") if package else base.joinpath(*parts[:-1],
                                                                            parts[-1] + ".py")


def planned_moves() -> tuple[list[tuple[Path, Path]], dict[Path, str], list[str]]:
    """(old path, new path) for every table entry, whether or not the file is still there;
    the `__init__.py` each new folder needs with its docstring; tables naming a file twice."""
    moves: list[tuple[Path, Path]] = []
    inits: dict[Path, str] = {}
    for top, table in (("core", CORE), ("store", STORE)):
        for group, (doc, names) in table.items():
            inits[PACKAGE / top / group / "__init__.py"] = doc
            for entry in names:
                old, _, new = entry.partition(":")
                moves.append((PACKAGE / top / f"{old}.py",
                              PACKAGE / top / group / f"{new or old}.py"))
    for folder, names in TESTS.items():
        parts = folder.split("/")
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            subject = "bench/" if sub == "benchmarks" else f"contextfold/{sub}/"
            inits.setdefault(Path("tests", sub, "__init__.py"),
                             f"Tests of `{subject}`" + (
                                 " (the tests of a module live where its path says)."
                                 if depth == len(parts) else "."))
        for name in names:
            moves.append((Path("tests", f"{name}.py"), Path("tests", folder, f"{name}.py")))
    seen = Counter(old for old, _ in moves)
    twice = [str(p) for p, n in seen.items() if n > 1]
    return moves, inits, twice


def python_files() -> list[Path]:
    found: list[Path] = []
    for root in PY_ROOTS:
        for path in sorted(Path(root).rglob("*.py")):
            if not skipped(path):
                found.append(path)
    return found


def text_files() -> list[Path]:
    found: list[Path] = [Path(f) for f in TEXT_FILES if Path(f).is_file()]
    # The benchmark results name modules (profiles: `src/contextfold/core/x.py:40(f)`), and
    # docs/benchmarks.md is generated from them (tests/test_docs_generated.py): both move.
    found += sorted(Path("bench", "results").glob("*.json"))
    for root in TEXT_ROOTS:
        for path in sorted(Path(root).rglob("*")):
            if (path.is_file() and path.suffix in TEXT_SUFFIXES
                    and not skipped(path)):
                found.append(path)
    return found


class Renames:
    """Old dotted module names -> new ones, and old file paths -> new ones."""

    def __init__(self, moves: list[tuple[Path, Path]], inits: dict[Path, str]) -> None:
        existing = {module_of(p) for p in python_files()}
        pending = [(o, n) for o, n in moves if o.exists()]
        after = (existing - {module_of(o) for o, _ in pending}) | {module_of(n) for _, n in pending}
        after |= {module_of(p) for p in inits}
        # An old name stays a rename while its file is still there (this run moves it) or
        # while nothing else now bears it; `store.sql` and `store.recall` are folders after
        # the first run, so later runs leave those names alone (idempotent).
        self.modules: dict[str, str] = {
            module_of(o): module_of(n) for o, n in moves
            if o.exists() or module_of(o) not in after}
        self.live = after
        self.existing = existing
        # Old names that are folders now (`contextfold.store.sql`, `.recall`), after the first
        # run: a name in one that is not one of its modules meant the old module.
        self.folders: dict[str, str] = {
            module_of(o): module_of(n) for o, n in moves
            if not o.exists() and module_of(o) not in self.modules}
        self.paths: dict[str, str] = {}
        for o, n in moves:
            # `store/sql.py` names the old file whatever the run; `store/sql` may be the folder.
            if module_of(o) in self.modules or module_of(o) in self.folders:
                self.paths[o.as_posix()] = n.as_posix()

    def is_module(self, dotted: str) -> bool:
        """Was or is `dotted` a module (the import's names may be old modules)?"""
        return dotted in self.existing or dotted in self.modules

    def rename(self, dotted: str) -> str:
        """`dotted` (a module or a name in one) under its new module path."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in self.modules:
                return ".".join([self.modules[prefix], *parts[cut:]])
            if prefix in self.live:
                rest = parts[cut:]
                if (prefix in self.folders and rest
                        and f"{prefix}.{rest[0]}" not in self.live):
                    return ".".join([self.folders[prefix], *rest])
                return dotted
        return dotted


# ------------------------------------------------------------------------ python rewriting

def relative(from_package: str, target: str) -> str:
    """The relative module text naming `target` from inside `from_package`."""
    here, there = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def resolve(package: str, level: int, module: str | None) -> str:
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def char_offset(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def rewrite_imports(text: str, old_mod: str, new_mod: str, is_init: bool, renames: Renames,
                    counts: Counter[str]) -> str:
    """Relative imports (any depth), `from package import module` forms and relative module
    strings, recomputed for the file's new place and its targets' new places."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    old_pkg = old_mod if is_init else old_mod.rpartition(".")[0]
    new_pkg = new_mod if is_init else new_mod.rpartition(".")[0]
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        return starts[lineno - 1] + char_offset(lines[lineno - 1], col)

    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            edit = import_from_edit(node, old_pkg, new_pkg, renames, text, pos)
            if edit:
                edits.append(edit)
                counts["import statements"] += 1
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and re.fullmatch(r"\.+\w[\w.]*", node.value)):
            target = resolve(old_pkg, len(node.value) - len(node.value.lstrip(".")),
                             node.value.lstrip("."))
            if not renames.is_module(target):
                continue
            new = relative(new_pkg, renames.rename(target))
            start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno or node.lineno,
                                                                node.end_col_offset or 0)
            literal = text[start:end]
            if new != node.value and literal[1:-1] == node.value:
                edits.append((start, end, literal[0] + new + literal[-1]))
                counts["relative module strings"] += 1
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


# Imports this run could not decide (a name that is both an old module and a new folder).
AMBIGUOUS: list[str] = []


def import_from_edit(node: ast.ImportFrom, old_pkg: str, new_pkg: str, renames: Renames,
                     text: str, pos) -> tuple[int, int, str] | None:
    """The edit one `from X import ...` needs, or None."""
    absolute = resolve(old_pkg, node.level, node.module) if node.level else (node.module or "")
    if not absolute.startswith(("contextfold", "tests", "bench", "examples")):
        return None

    def spelt(target: str) -> str:
        return relative(new_pkg, target) if node.level else target

    # Names that are modules themselves (`from . import queries`) follow their module.
    groups: dict[str, list[str]] = {}
    for alias in node.names:
        full = f"{absolute}.{alias.name}"
        if renames.is_module(full) and renames.rename(full) != full:
            parent, _, name = renames.rename(full).rpartition(".")
            local = alias.asname or (alias.name if name != alias.name else None)
            groups.setdefault(spelt(parent), []).append(
                name + (f" as {local}" if local else ""))
        else:
            if full in renames.folders:
                # `from ..store import sql` after the move: the folder, or the old module?
                AMBIGUOUS.append(f"line {node.lineno}: `{full}` is a folder now (the old "
                                 f"module is `{renames.folders[full]}`)")
            target = renames.rename(absolute)
            if absolute in renames.folders and full not in renames.live:
                target = renames.folders[absolute]  # a name of the old module
            groups.setdefault(spelt(target), []).append(
                alias.name + (f" as {alias.asname}" if alias.asname else ""))
    old_spelling = "." * node.level + (node.module or "")
    start = pos(node.lineno, node.col_offset)
    end = pos(node.end_lineno or node.lineno, node.end_col_offset or 0)
    if len(groups) == 1:
        (module,) = groups
        if module == old_spelling:
            return None
        # Only the module part changes: keep the names, their layout and comments.
        match = re.compile(r"from\s+(\.*\s*[\w.]*)\s+import").match(text, start)
        if not match:
            return None
        return match.start(1), match.end(1), module
    indent = " " * (len(text[:start]) - len(text[:start].rstrip(" ")))
    statements = [f"from {module} import {', '.join(names)}" for module, names in groups.items()]
    return start, end, ("\n" + indent).join(statements)


def moved_module_names(original: str, old_pkg: str, renames: Renames) -> dict[str, int]:
    """Names a file binds to a module that moves deeper -> by how many folders, so that
    `Path(name.__file__).parent` can keep pointing where it did."""
    try:
        tree = ast.parse(original)
    except SyntaxError:
        return {}
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = resolve(old_pkg, node.level, node.module) if node.level else node.module
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if renames.is_module(full):
                    bound[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and renames.is_module(alias.name):
                    bound[alias.asname] = alias.name
    deeper = {name: renames.rename(old).count(".") - old.count(".")
              for name, old in bound.items()}
    return {name: levels for name, levels in deeper.items() if levels > 0}


def deepen_file_paths(text: str, levels: int, counts: Counter[str],
                      owner: str = "__file__") -> str:
    """`Path(__file__).parent…` in a file moved `levels` folders deeper (or
    `Path(module.__file__)…` for a module moved so), pointing where it did."""
    if levels <= 0:
        return text

    def fix(match: re.Match[str]) -> str:
        counts["Path(__file__) anchors"] += 1
        if match.group("index") is not None:
            up = int(match.group("index"))
        else:
            up = match.group("chain").count(".parent") - 1
        return f"{match.group('head')}.parents[{up + levels}]"

    return re.sub(rf"(?P<head>Path\({re.escape(owner)}\)(?:\.resolve\(\))?)"
                  r"(?:\.parents\[(?P<index>\d+)\]|(?P<chain>(?:\.parent(?![\w\[]))+))",
                  fix, text)


# --------------------------------------------------------------------------- text rewriting

def rewrite_text(text: str, kind: str, renames: Renames, counts: Counter[str]) -> str:
    """Absolute dotted names, file paths and docs' short names, in any text file (`kind`:
    "python", "prose" (Markdown, Makefile) or "other")."""

    def dotted(match: re.Match[str]) -> str:
        new = renames.rename(match.group(0))
        if new != match.group(0):
            counts["dotted names"] += 1
        return new

    text = re.sub(r"(?<![\w.])(?:contextfold|tests|bench)(?:\.\w+)+", dotted, text)

    # File paths: src/contextfold/core/x.py, contextfold/core/x.py, core/x.py, core/x (docs),
    # tests/test_x.py; and the path-join spelling `"core" / "x.py"`.
    by_path: dict[str, str] = {}
    for old, new in renames.paths.items():
        if old.startswith("src/contextfold/"):
            short_old, short_new = old[len("src/contextfold/"):], new[len("src/contextfold/"):]
            by_path[short_old] = short_new
            by_path[short_old[:-3]] = short_new[:-3]
        else:
            by_path[old] = new
    if by_path:
        alternatives = "|".join(re.escape(p) for p in sorted(by_path, key=len, reverse=True))
        pattern = re.compile(
            rf"(?<![\w/.-])(?P<lead>(?:src/)?(?:contextfold/)?)(?P<path>{alternatives})(?![\w/-])"
            r"(?!\.py)")

        def path(match: re.Match[str]) -> str:
            lead = match.group("lead")
            old = match.group("path")
            if old.startswith("tests/") and lead:
                return match.group(0)
            counts["file paths"] += 1
            return lead + by_path[old]

        text = pattern.sub(path, text)

        def joined(match: re.Match[str]) -> str:
            key = f"{match.group('top')}/{match.group('name')}"
            if key not in by_path:
                return match.group(0)
            counts["file paths"] += 1
            parts = by_path[key].split("/")
            sep = match.group("sep")
            return sep.join(f'"{p}"' for p in parts)

        text = re.sub(r'"(?P<top>core|store)"(?P<sep>\s*/\s*)"(?P<name>\w+\.py)"', joined, text)

    # Short dotted names docs use relative to the package: `core.fit` anywhere in prose
    # (inside backticks only, in Python, where `core.x` could be code); `store.x` only inside
    # backticks (`store.append` is also a method).
    core_moves = {old.split(".")[2]: new.split(".", 2)[2]
                  for old, new in renames.modules.items()
                  if old.startswith("contextfold.core.") and old.count(".") == 2}
    store_moves = {old.split(".")[2]: new.split(".", 2)[2]
                   for old, new in renames.modules.items()
                   if old.startswith("contextfold.store.") and old.count(".") == 2}

    def short(table: dict[str, str], top: str):
        def fix(match: re.Match[str]) -> str:
            name = match.group("name")
            if name not in table:
                return match.group(0)
            counts["short dotted names"] += 1
            return f"{top}.{table[name]}"
        return re.compile(rf"(?<![\w.]){top}\.(?P<name>\w+)(?![\w])"), fix

    core_re, core_fix = short(core_moves, "core")
    store_re, store_fix = short(store_moves, "store")

    def in_backticks(match: re.Match[str]) -> str:
        span = core_re.sub(core_fix, match.group(0))
        return store_re.sub(store_fix, span)

    if kind in ("python", "prose"):  # not JavaScript: its backticks quote code
        text = re.sub(r"`[^`\n]+`", in_backticks, text)
    if kind == "prose":
        text = core_re.sub(core_fix, text)
    return text


# ------------------------------------------------------------------------------ long lines

LIMIT = 100  # pyproject's [tool.ruff] line-length


def docstring(doc: str) -> str:
    """A module docstring for `doc`, wrapped to the line limit."""
    lines = textwrap.wrap(doc, LIMIT - 3)
    first = textwrap.wrap(doc, LIMIT - 6)
    if len(first) == 1:
        return f'"""{doc}"""\n'
    return '"""' + "\n".join(lines) + '\n"""\n'


def docstring_lines(text: str) -> set[int]:
    """Line numbers (1-based) inside a docstring-like string statement: prose, safe to wrap."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    return {n for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}


def comment_lines(text: str) -> set[int]:
    """Line numbers whose whole content is a comment."""
    found: set[int] = set()
    try:
        for token in tokenize.generate_tokens(iter(text.splitlines(keepends=True)).__next__):
            if token.type == tokenize.COMMENT and not token.line[: token.start[1]].strip():
                found.add(token.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def split_at_space(line: str, limit: int) -> tuple[str, str] | None:
    cut = line.rfind(" ", len(line) - len(line.lstrip()) + 1, limit + 1)
    return (line[:cut].rstrip(), line[cut + 1:]) if cut > 0 else None


def outside_strings(line: str) -> list[bool]:
    """For each character of one physical line: is it outside a string literal?"""
    flags, quote, i = [], "", 0
    while i < len(line):
        c = line[i]
        if quote:
            flags.append(False)
            if c == "\\":
                flags.append(False)
                i += 2
                continue
            if c == quote:
                quote = ""
        else:
            if c == "#":
                flags.extend([False] * (len(line) - i))
                break
            if c in "\"'":
                quote = c
                flags.append(False)
            else:
                flags.append(True)
        i += 1
    return flags


def wrap_code(line: str) -> list[str] | None:
    """One long line of code as two or more, meaning the same, or None when no rule fits."""
    indent = line[: len(line) - len(line.lstrip())]
    body = line.strip()
    free = outside_strings(line)
    # A trailing comment goes above its line.
    hashes = [i for i, c in enumerate(line) if c == "#" and (i == 0 or free[i - 1])
              and line[:i].strip() and not free[i]]
    if hashes:
        cut = hashes[0]
        return [indent + line[cut:].strip(), line[:cut].rstrip()]
    # `from x import a, b` (no parentheses) -> parenthesised, names filled to the limit.
    match = re.fullmatch(r"from (\S+) import ([^()]+)", body)
    if match:
        names = [n.strip() for n in match.group(2).split(",")]
        filled = textwrap.wrap(", ".join(names) + ",", LIMIT - len(indent) - 4,
                               break_long_words=False, break_on_hyphens=False)
        return [f"{indent}from {match.group(1)} import (",
                *(f"{indent}    {chunk}" for chunk in filled), f"{indent})"]
    # `assert a and b` -> two asserts.
    if body.startswith("assert ") and "," not in body:
        ands = [m.start() for m in re.finditer(" and ", line) if free[m.start()]]
        if ands:
            return [line[: ands[0]], f"{indent}assert {line[ands[0] + 5:]}"]
    # A string literal alone on a line (inside brackets: implicit concatenation).
    match = re.fullmatch(r'(?P<q>["\'])(?P<s>[^"\'\\]*)(?P=q)(?P<tail>[,)\]}\s]*)', body)
    if match:
        parts = split_at_space(indent + body, LIMIT - 2)
        if parts:
            q, cut = match.group("q"), len(parts[0]) - len(indent) - 1
            text = match.group("s")
            return [f"{indent}{q}{text[:cut]} {q}",
                    f"{indent}{q}{text[cut + 1:]}{q}{match.group('tail')}"]
    # `"key": value,` in a dict literal -> the value under the key.
    match = re.fullmatch(r'("[^"]*"):\s+(.+)', body)
    if match:
        return [f"{indent}{match.group(1)}:", f"{indent}    {match.group(2)}"]
    # Break after the last comma outside strings that leaves the first part short enough;
    # the rest lines up after the bracket it is in (or keeps the indent, inside an earlier
    # line's bracket).
    opened: list[int] = []
    best: tuple[int, int] | None = None
    for i, c in enumerate(line):
        if not free[i]:
            continue
        if c in "([{":
            opened.append(i)
        elif c in ")]}" and opened:
            opened.pop()
        elif c == "," and i + 1 < LIMIT and line[i + 1: i + 2] == " " and line[i + 2:].strip():
            best = (i, opened[-1] + 1 if opened else len(indent))
    if best:
        cut, column = best
        return [line[: cut + 1], " " * column + line[cut + 2:]]
    return None


def continues(line: str, indent: str) -> bool:
    """Does `line` continue a paragraph at `indent` (not a bullet, a blank or a quote)?"""
    rest = line[len(indent):]
    return (line.startswith(indent) and bool(rest.strip()) and not rest[0].isspace()
            and not re.match(r'([-*+]|\d+[.)]|"""|\'\'\'|[A-Z][\w ]*:$)', rest))


def wrap_long_lines(text: str, original: str, counts: Counter[str]) -> tuple[str, list[int]]:
    """Lines the rewrite made longer than the limit, wrapped: prose (comments, docstrings) at
    a space, the overflow joined to the next line of its paragraph; code by the rules of
    `wrap_code`. Lines that were long before are left as they were. Returns the text and the
    lines left long."""
    ends_newline = text.endswith("\n")
    unwrappable: set[str] = set(original.splitlines())
    for _ in range(200):  # each wrap shifts the lines after it: re-read after each
        lines = text.splitlines()
        long_at = [n for n, line in enumerate(lines, 1) if len(line) > LIMIT
                   and "noqa" not in line and line not in unwrappable]
        if not long_at:
            break
        prose, comments = docstring_lines(text), comment_lines(text)
        n = long_at[0]
        line = lines[n - 1]
        indent = line[: len(line) - len(line.lstrip())]
        new: list[str] | None = None
        following = lines[n] if n < len(lines) else ""
        span = 1
        if n in comments:
            parts = split_at_space(line, LIMIT)
            if parts:
                new = [parts[0], f"{indent}# {parts[1]}"]
                if n + 1 in comments and continues(following, indent + "# "):
                    new[1] += " " + following[len(indent) + 2:]
                    span = 2
        elif n in prose:
            parts = split_at_space(line, LIMIT)
            if parts:
                new = [parts[0], indent + parts[1]]
                if (n + 1 in prose and continues(following, indent)
                        and not re.search(r'("""|\'\'\')\s*$', line)):
                    new[1] += " " + following[len(indent):]
                    span = 2
        else:
            new = wrap_code(line)
            # A split string literal's second half joins the literal after it (implicit
            # concatenation: a literal with no comma after it can only be continued so).
            tail = re.fullmatch(r"(\s*)([\"'])([^\"'\\\\]*)\2", new[1]) if new else None
            after = re.fullmatch(r"(\s*)([\"'])(.*)", following)
            if (new and len(new) == 2 and tail and after and after.group(1) == tail.group(1)
                    and after.group(2) == tail.group(2) and not after.group(3).startswith(
                        tail.group(2) * 2)):
                new[1] = tail.group(1) + tail.group(2) + tail.group(3) + after.group(3)
                span = 2
        if not new or any(len(x) >= len(line) for x in new[:1]):
            unwrappable.add(line)
            continue
        counts["long lines wrapped"] += 1
        lines[n - 1: n - 1 + span] = new
        text = "\n".join(lines) + ("\n" if ends_newline else "")
    before = set(original.splitlines())
    left = [n for n, line in enumerate(text.splitlines(), 1)
            if len(line) > LIMIT and "noqa" not in line and line not in before]
    return text, left


# ---------------------------------------------------------------------------------- running

def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print, change nothing")
    options = parser.parse_args()
    if not (PACKAGE / "__init__.py").is_file() or not Path(".git").exists():
        print("run from the repository root (src/contextfold and .git here)", file=sys.stderr)
        return 2

    moves, inits, twice = planned_moves()
    if twice:
        print(f"a table names a file twice: {twice}", file=sys.stderr)
        return 2
    renames = Renames(moves, inits)
    pending = [(o, n) for o, n in moves if o.exists()]
    clash = [str(n) for o, n in pending if n.exists()]
    if clash:
        print(f"refusing: targets already exist: {clash}", file=sys.stderr)
        return 2
    moved_to = {o: n for o, n in pending}
    in_place = sum(1 for o, n in moves if not o.exists() and n.exists())
    missing = [str(o) for o, n in moves if not o.exists() and not n.exists()]
    placed = {o for o, _ in moves} | {PACKAGE / "store" / f"{n}.py" for n in STORE_KEPT}
    unplaced = sorted(str(p) for top in ("core", "store") for p in (PACKAGE / top).glob("*.py")
                      if p.name != "__init__.py" and p not in placed)

    counts: Counter[str] = Counter()
    changed: list[Path] = []
    too_long: list[str] = []
    for path in text_files():
        original = path.read_text(encoding="utf-8")
        seen = len(AMBIGUOUS)
        # Dotted names and paths first: the import pass then writes new folder names
        # (`contextfold.store.sql`) that the dotted pass would read as the old module.
        kind = ("python" if path.suffix == ".py" else "prose"
                if path.suffix in PROSE_SUFFIXES or path.name == "Makefile" else "other")
        text = rewrite_text(original, kind, renames, counts)
        if path.suffix == ".py" and path.parts[0] in PY_ROOTS:
            new_path = moved_to.get(path, path)
            is_init = path.name == "__init__.py"
            text = rewrite_imports(text, module_of(path), module_of(new_path), is_init,
                                   renames, counts)
            depth = len(new_path.parts) - len(path.parts)
            text = deepen_file_paths(text, depth, counts)
            old_pkg = module_of(path) if is_init else module_of(path).rpartition(".")[0]
            for name, levels in moved_module_names(original, old_pkg, renames).items():
                text = deepen_file_paths(text, levels, counts, f"{name}.__file__")
        if text != original and path.suffix == ".py":
            text, left = wrap_long_lines(text, original, counts)
            too_long.extend(f"{moved_to.get(path, path)}:{n}" for n in left)
        AMBIGUOUS[seen:] = [f"{path}: {note}" for note in AMBIGUOUS[seen:]]
        if text != original:
            changed.append(path)
            if not options.dry_run:
                path.write_text(text, encoding="utf-8")

    created: list[Path] = []
    for init, doc in inits.items():
        if not init.exists() and (any(n.is_relative_to(init.parent) for _, n in pending)
                                  or init.parent.is_dir()):
            created.append(init)
            if not options.dry_run:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text(docstring(doc), encoding="utf-8")
    if not options.dry_run:
        for old, new in pending:
            new.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(old), str(new))
        if created:
            git("add", *map(str, created))

    sorted_imports = "skipped (dry run)" if options.dry_run else sort_imports(
        [moved_to.get(p, p) for p in changed if p.suffix == ".py"] + created)

    errors_tree = "skipped (dry run)" if options.dry_run else redraw_errors()
    print("reorganise: summary")
    print(f"  moved:              {len(pending)} files"
          f" ({sum(1 for o, _ in pending if o.parts[0] == 'src')} modules,"
          f" {sum(1 for o, _ in pending if o.parts[0] == 'tests')} test files)")
    print(f"  already in place:   {in_place}")
    print(f"  new __init__.py:    {len(created)}")
    print(f"  files rewritten:    {len(changed)}")
    for kind, n in sorted(counts.items()):
        print(f"    {kind}: {n}")
    print(f"  imports re-sorted:  {sorted_imports}")
    print(f"  errors.py's tree:   {errors_tree}")
    for label, items in (("in a table but absent (skipped)", missing),
                         ("flat modules no table places (left where they are)", unplaced),
                         (f"lines over {LIMIT} characters left to wrap by hand", too_long),
                         ("imports to check by hand", AMBIGUOUS)):
        if items:
            print(f"  {label}: {', '.join(items)}")
    if options.dry_run:
        for path in changed:
            print(f"  would rewrite {path}")
        for old, new in pending:
            print(f"  would move {old} -> {new}")
    return 0


# errors.py's docstring draws every error class with its module, sorted by module, and
# tests/test_errors.py holds the drawing equal to the classes: redrawn with that test's own
# `draw_tree` once the modules are in place (it needs the project's environment).
REDRAW_ERRORS = """
import pathlib, contextfold.errors as errors, tests.test_errors as t
t.every_module_imported()
path = pathlib.Path(errors.__file__)
lines = path.read_text("utf-8").splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith("    ContextfoldError "))
end = start
while end < len(lines) and lines[end].startswith("    ") and lines[end].strip():
    end += 1
new = ["    " + l for l in t.draw_tree()]
if lines[start:end] != new:
    lines[start:end] = new
    path.write_text("\\n".join(lines) + "\\n", encoding="utf-8")
    print("redrawn")
else:
    print("unchanged")
"""


def redraw_errors() -> str:
    python = Path(".venv/bin/python")
    if not python.exists():
        return "no .venv: run tests/test_errors.py and redraw errors.py's tree by hand"
    result = subprocess.run([str(python), "-c", REDRAW_ERRORS], capture_output=True, text=True)
    if result.returncode:
        return "failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
    return result.stdout.strip()


def sort_imports(paths: list[Path]) -> str:
    """Re-sort the import blocks whose paths changed (ruff's isort rule), when ruff is here."""
    ruff = next((c for c in (".venv/bin/ruff", shutil.which("ruff")) if c and Path(c).exists()),
                None)
    if not paths:
        return "nothing to sort"
    if ruff is None:
        return "ruff not found: run `ruff check --select I --fix src tests bench examples`"
    result = subprocess.run([ruff, "check", "--select", "I", "--fix", "--quiet",
                             *map(str, paths)], capture_output=True, text=True)
    return f"{len(paths)} files through ruff (exit {result.returncode})"


if __name__ == "__main__":
    sys.exit(main())
