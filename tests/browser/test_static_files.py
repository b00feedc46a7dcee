"""The page's static files: shipped in the wheel, self-contained, and text never becomes HTML.

No browser here: these read the files (and build a wheel), so they run on any machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "contextfold" / "server" / "static"
IMPORT = re.compile(r"""(?:^|\n)\s*import\s+[^;]*?from\s+["']([^"']+)["']""")
REFERENCE = re.compile(r"""(?:src|href)="([^"#]+)\"""")


def page_files() -> set[str]:
    """index.html, what it references and every module reachable by `import`."""
    seen: set[str] = set()
    todo = ["index.html"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        text = (STATIC / name).read_text(encoding="utf-8")
        refs = REFERENCE.findall(text) if name.endswith(".html") else IMPORT.findall(text)
        for ref in refs:
            if ref.startswith("data:"):  # inline (the empty favicon): no file, no network
                continue
            assert not ref.startswith(("http:", "https:", "//")), f"{name} loads {ref} (network)"
            todo.append(ref.removeprefix("./").removeprefix("/"))
    return seen


def test_page_references_only_files_that_exist() -> None:
    files = page_files()
    assert {"index.html", "app.js", "style.css", "api.js", "composer.js"} <= files
    for name in files:
        assert (STATIC / name).is_file(), f"{name} is referenced but missing"
    assert {p.name for p in STATIC.iterdir() if p.suffix in {".js", ".css", ".html"}} == files, \
        "a static file nobody loads"


def test_no_text_is_ever_parsed_as_html() -> None:
    """User, model and tool text is rendered with textContent only: no HTML sinks at all."""
    sinks = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|"
                       r"createContextualFragment|DOMParser|\beval\(|new Function")
    for path in STATIC.glob("*.js"):
        hits = sinks.findall(path.read_text(encoding="utf-8"))
        assert not hits, f"{path.name} uses {hits}"


def test_the_built_wheel_contains_the_page(tmp_path: Path) -> None:
    """`pip install contextfold[server]` must serve the page: the wheel carries every file."""
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d",
                    str(tmp_path)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("contextfold-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in page_files():
        assert f"contextfold/server/static/{name}" in names, f"{name} missing from {wheel.name}"
