"""The public API: every re-exported name resolves, and the core stays pure."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import contextfold

CORE = Path(contextfold.__file__).parent / "core"
FORBIDDEN = ("contextfold.store", "contextfold.providers", "contextfold.runtime", "asyncio",
             "sqlalchemy", "openai", "anthropic")


def test_every_public_name_resolves():
    for name in contextfold.__all__:
        assert getattr(contextfold, name) is not None, name


def test_core_imports_no_io_layer():  # DESIGN: pure core, I/O at the edges
    for path in CORE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            else:
                continue
            for name in names:
                resolved = name.replace("...", "contextfold.").replace("..", "contextfold.")
                assert not resolved.startswith(FORBIDDEN), f"{path.name} imports {name}"


def test_importing_the_core_loads_no_driver_or_sdk():
    code = ("import sys, contextfold.core.planner, contextfold.core.export; "
            "print(sorted(m for m in ('sqlalchemy', 'openai', 'anthropic', 'asyncio') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
