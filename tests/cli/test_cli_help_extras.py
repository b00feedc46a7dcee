"""What `--help` and a missing extra show a newcomer (issue 25, items 1 and 9).

Run as a user runs them, in a subprocess; a missing extra is simulated by making its module
unimportable (`sys.modules[name] = None`) before the command runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["import", "sessions", "compact", "project", "show", "verify", "chat", "proxy",
            "recall", "replay", "demo", "serve", "token create", "token list", "token revoke"]


def cf(*args: str, columns: int = 80, blocked: tuple[str, ...] = (),
       env: dict | None = None) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            f"for name in {blocked!r}:\n    sys.modules[name] = None\n"
            "from contextfold.cli import app\n"
            f"sys.argv = ['contextfold', *{list(args)!r}]\napp()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": str(columns),
                                            **(env or {})})


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_names_values_not_python_types(command):  # issue 25 item 9
    proc = cf(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    assert not re.search(r"<(bool|str|int|path|list\[str\]|int range)>", proc.stdout), \
        proc.stdout
    assert "Traceback" not in proc.stderr
    short = cf(*command.split(), "-h")
    assert short.returncode == 0 and short.stdout == proc.stdout


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    proc = cf("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"contextfold {version('contextfold')}"


def test_proxy_help_does_not_break_a_sentence():
    text = " ".join(cf("proxy", "--help", columns=200).stdout.split())
    assert "window and forwards the rest as sent." in text
    assert "pip install 'contextfold[proxy]'" in text


def test_proxy_start_line_is_a_sentence():
    from contextfold.cli.proxy_cmd import start_line

    line = start_line("127.0.0.1", 8788, "http://up:8000", {"local-model": 32768, "*": 16000},
                      None, False)
    assert "{" not in line and "'" not in line
    assert "local-model 32,768 tokens" in line and "every model 16,000 tokens" in line
    assert line.endswith(".") and "http://127.0.0.1:8788/" in line


@pytest.mark.parametrize(("argv", "extra", "blocked"), [
    (["serve"], "server", ("fastapi",)),
    (["serve", "--host", "127.0.0.1"], "server", ("uvicorn",)),
    (["proxy", "--upstream", "http://127.0.0.1:9"], "proxy", ("uvicorn",)),
    (["proxy", "--upstream", "http://127.0.0.1:9"], "proxy", ("httpx2", "starlette")),
    (["mcp"], "mcp", ("mcp",)),
])
def test_a_missing_extra_is_one_line_naming_it(argv, extra, blocked, tmp_path):  # item 1
    proc = cf(*argv, blocked=blocked, env={"CONTEXTFOLD_DB": str(tmp_path / "cf.db")})
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1  # kind `unavailable`, like chat's and --plot's extras
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"pip install 'contextfold[{extra}]'" in lines[0]
    assert blocked[0] in lines[0]


def test_the_extra_table_matches_pyproject():
    """Each extra the CLI checks installs the packages whose modules it looks for."""
    from contextfold.cli.extras import EXTRA_MODULES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra, modules in EXTRA_MODULES.items():
        packages = {re.split(r"[<>=~\[ ;]", req)[0].replace("-", "_").lower()
                    for req in extras[extra]}
        assert set(modules) <= packages, (extra, modules, packages)


def test_the_readme_names_every_extra_and_its_install_line():
    readme = (ROOT / "README.md").read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in extras:
        if extra != "dev":
            assert f"pip install 'contextfold[{extra}]'" in readme, extra
