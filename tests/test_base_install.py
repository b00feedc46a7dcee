"""A plain `pip install contextfold` (no extras) runs the offline main job.

Builds a fresh virtual environment, installs the project from this checkout without extras
(the provider SDKs and matplotlib stay out), and runs what a new user runs first. pip reuses
its cache, so this takes about a minute; it is part of the default run on purpose: it is the
only test that sees the package the way `pip install` delivers it.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHORT = ROOT / "tests/fixtures/claude-code/short.jsonl"
LONG = ROOT / "tests/fixtures/claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl"


@pytest.fixture(scope="module")
def base_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("base-install")
    venv.EnvBuilder(with_pip=True).create(home / "venv")
    bindir = home / "venv" / ("Scripts" if os.name == "nt" else "bin")
    pip = subprocess.run([str(bindir / "python"), "-m", "pip", "install", "--quiet",
                          "--disable-pip-version-check", str(ROOT)],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CONTEXTFOLD_DB=str(home / "cf.db"), COLUMNS="120",
               PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}")
    return bindir, env, home


def run(base_env, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    bindir, env, home = base_env
    proc = subprocess.run([str(bindir / "contextfold"), *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=home)
    assert proc.returncode == expect, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_the_extras_are_not_installed(base_env):
    bindir, env, home = base_env
    code = ("import importlib.util as u; print([m for m in ('openai', 'anthropic', "
            "'matplotlib') if u.find_spec(m)])")
    proc = subprocess.run([str(bindir / "python"), "-c", code], capture_output=True,
                          text=True, env=env, cwd=home, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_base_install_runs_the_offline_commands(base_env):
    assert "Usage" in run(base_env, "--help").stdout
    bindir, env, home = base_env
    imported = subprocess.run([str(bindir / "python"), "-c",
                               "import contextfold; print(contextfold.Conversation.__name__, "
                               "contextfold.project.__name__)"],
                              capture_output=True, text=True, env=env, cwd=home, timeout=60)
    assert imported.stdout.split() == ["Conversation", "project"], imported.stderr
    sid = json.loads(run(base_env, "import", str(LONG), "--json").stdout)["session_id"]
    assert json.loads(run(base_env, "compact", sid, "--json").stdout)["status"] == "compacted"
    assert json.loads(run(base_env, "project", sid, "--json").stdout)["messages"]
    assert run(base_env, "show", sid).stdout
    replay = json.loads(run(base_env, "replay", str(SHORT), "--json").stdout)
    assert replay["invalid_tool_sequences"] == 0
    demo = json.loads(run(base_env, "demo", "--turns", "8", "--json").stdout)
    assert demo["requests"] > 0 and demo["dropped_messages"] == 0


def test_chat_and_plot_name_the_extra_to_install(base_env):
    chat = run(base_env, "chat", "--model", "ollama/qwen3:8b", expect=1)
    assert "pip install 'contextfold[providers]'" in chat.stderr
    assert "Traceback" not in chat.stderr
    plot = run(base_env, "replay", str(SHORT), "--plot", "r.png", expect=1)
    assert "pip install 'contextfold[plot]'" in plot.stderr

