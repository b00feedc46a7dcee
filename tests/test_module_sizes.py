"""Modules of a readable size (issue 39): every module of `src/contextfold` says its one idea
in a docstring and stays within ~450 lines, or says in that docstring, on a line beginning
`Size:`, why it is whole; none exceeds 800 lines whatever it says.

`size_problems` is the one check; `tests/runtime/test_runtime_driver.py` runs it on the mirror's
modules without the `Size:` escape.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import contextfold

PACKAGE = Path(contextfold.__file__).parent
SOFT = 450  # over this, a module says why it is whole (`Size:` in its docstring)
HARD = 800  # over this, no reason is enough


def size_problems(paths: Iterable[Path], *, soft: int = SOFT, hard: int = HARD,
                  reasons: bool = True) -> list[str]:
    """One line per module of `paths` that breaks the rule: code without a docstring, over
    `hard` lines, or over `soft` lines without a docstring line beginning `Size:` (with
    `reasons=False`, over `soft` lines at all)."""
    problems: list[str] = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        tree = ast.parse(text)
        doc = ast.get_docstring(tree) or ""
        name = path.as_posix()
        if not doc.strip() and tree.body:  # an empty package marker holds no idea to name
            problems.append(f"{name}: no docstring saying its one idea")
        if lines > hard:
            problems.append(f"{name}: {lines} lines, over {hard}: split it")
        elif lines > soft and not (reasons and any(
                line.startswith("Size:") for line in doc.splitlines())):
            problems.append(f"{name}: {lines} lines, over {soft}, and no `Size:` line in its "
                            "docstring saying why it is whole")
    return problems


def test_every_module_is_small_or_says_why_it_is_whole() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 200  # the scan sees the whole package
    assert size_problems(modules) == []


def _module(path: Path, lines: int, doc: str | None) -> Path:
    head = [] if doc is None else [*f'"""{doc}"""'.splitlines(), ""]
    body = [f"X{i} = {i}" for i in range(lines - len(head))]
    path.write_text("\n".join([*head, *body]) + "\n", encoding="utf-8")
    assert len(path.read_text(encoding="utf-8").splitlines()) == lines
    return path


def test_the_size_check_can_fail(tmp_path: Path) -> None:
    short = _module(tmp_path / "short.py", 450, "One idea.")
    long = _module(tmp_path / "long.py", 451, "One idea.")
    reasoned = _module(tmp_path / "reasoned.py", 600,
                       "One idea.\n\nSize: one class that cannot be cut.")
    mentioned = _module(tmp_path / "mentioned.py", 600,
                        "One idea; its Size: is said mid-line, which is no reason.")
    huge = _module(tmp_path / "huge.py", 801, "One idea.\n\nSize: even so.")
    bare = _module(tmp_path / "bare.py", 10, None)
    empty = tmp_path / "__init__.py"
    empty.write_text("", encoding="utf-8")

    assert size_problems([short, reasoned, empty]) == []
    assert [p.split(":")[0] for p in size_problems([long, mentioned, huge, bare])] == [
        long.as_posix(), mentioned.as_posix(), huge.as_posix(), bare.as_posix()]
    assert "over 800" in size_problems([huge])[0]
    assert "no docstring" in size_problems([bare])[0]
    # Without the escape (the mirror's modules), a reason does not help.
    assert size_problems([reasoned], reasons=False) != []
    assert size_problems([short], reasons=False) == []
