"""The public API: every re-exported name resolves, and importing the core loads no driver
or SDK (what the core's source may import: tests/test_layering.py)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import contextfold

ROOT = Path(contextfold.__file__).parent.parent.parent


def test_every_public_name_resolves():
    for name in contextfold.__all__:
        assert getattr(contextfold, name) is not None, name


def test_importing_the_core_loads_no_driver_or_sdk():
    code = ("import sys, contextfold.core.planning.planner, contextfold.core.render.export; "
            "print(sorted(m for m in ('sqlalchemy', 'openai', 'anthropic', 'asyncio') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# --------------------------------------------------------------------------- type checkers

LAZY_PACKAGES = ("contextfold", "contextfold.store", "contextfold.providers",
                 "contextfold.formats")


def type_checking_imports(package: str) -> dict[str, str]:
    """Name -> absolute module of the `if TYPE_CHECKING:` block of `package`'s `__init__`,
    each name imported as itself (`X as X`, a re-export to a type checker)."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    blocks = [node for node in tree.body if isinstance(node, ast.If)
              and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"]
    assert len(blocks) == 1, f"{package} has {len(blocks)} TYPE_CHECKING blocks"
    found: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        source = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
        for alias in node.names:
            assert alias.asname == alias.name, f"{package}: {alias.name} is not `X as X`"
            assert alias.name not in found, f"{package}: {alias.name} imported twice"
            found[alias.name] = source
    return found


def test_the_block_reader_can_fail() -> None:
    # A package without the block is reported, not read as an empty block.
    with pytest.raises(AssertionError, match="0 TYPE_CHECKING blocks"):
        type_checking_imports("contextfold.core")


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_type_checkers_see_every_lazy_export(package: str) -> None:
    """What `__getattr__` resolves at run time and what a type checker reads are one list:
    a name added to `_EXPORTS` without the import (or the other way round) fails here."""
    exports = importlib.import_module(package)._EXPORTS
    wanted = {name: importlib.util.resolve_name(module, package)
              for name, module in exports.items()}
    assert type_checking_imports(package) == wanted


def test_the_package_is_marked_typed_in_the_wheel(tmp_path: Path) -> None:
    """PEP 561: `py.typed` ships with the package, so checkers read its annotations."""
    assert (Path(contextfold.__file__).parent / "py.typed").is_file()
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d",
                    str(tmp_path)], cwd=ROOT, check=True, capture_output=True)
    (wheel,) = tmp_path.glob("contextfold-*.whl")
    assert "contextfold/py.typed" in zipfile.ZipFile(wheel).namelist()


def _pyright(*args: str, cwd: Path) -> dict[str, Any]:
    exe = Path(sys.executable).parent / "pyright"
    if not exe.exists():
        pytest.skip("pyright is not installed (the dev extra installs it)")
    done = subprocess.run([str(exe), "--outputjson", "--pythonpath", sys.executable, *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    try:
        return json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"pyright did not run: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def test_the_public_api_is_clean_and_typed_for_pyright(tmp_path: Path) -> None:
    """pyright (basic mode) reports nothing in the modules that define `contextfold`'s names
    and the packages that re-export them, and sees a real type (not `Any`) for every one."""
    package = Path(contextfold.__file__).parent
    files = sorted({importlib.util.find_spec(m).origin
                    for m in [*LAZY_PACKAGES, *contextfold._EXPORTS.values()]})
    sample = tmp_path / "uses_the_api.py"
    sample.write_text("import contextfold\n" + "".join(
        f"reveal_type(contextfold.{name})\n" for name in contextfold.__all__))
    report = _pyright(*files, str(sample), cwd=package.parent.parent)
    problems = [f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}"
                for d in report["generalDiagnostics"] if d["severity"] != "information"]
    assert problems == []
    revealed = {d["message"] for d in report["generalDiagnostics"]
                if d["file"] == str(sample) and d["severity"] == "information"}
    assert len(revealed) == len(contextfold.__all__)
    untyped = sorted(m for m in revealed if m.endswith(('is "Any"', 'is "Unknown"')))
    assert untyped == []
