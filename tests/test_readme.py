"""The README's code blocks run, unchanged, as a reader would run them.

Python blocks run in a fresh interpreter (the library example talks to the local fake
provider through the SDK's own `ANTHROPIC_BASE_URL`); the TOML block is loaded as a model
catalog override; every `contextfold …` line of a bash block names a real command and real
options.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakeserver import Reply, server_fixture

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)

fake = server_fixture()


def blocks(language: str) -> list[str]:
    out = []
    for m in BLOCK.finditer(README):
        if m.group(2) == language:
            indent = len(m.group(1))
            out.append("\n".join(line[indent:] for line in m.group(3).splitlines()))
    return out


def test_the_readme_has_the_blocks_this_file_checks():
    assert len(blocks("python")) >= 2 and blocks("toml") and blocks("bash")


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_block_runs(index, fake, tmp_path):
    fake.enqueue(Reply(text="Two papers discuss it."))
    env = {**os.environ, "ANTHROPIC_BASE_URL": fake.anthropic_url,
           "ANTHROPIC_API_KEY": "test-key", "CONTEXTFOLD_DB": str(tmp_path / "readme.db"),
           # the framework examples use the OpenAI SDK's own variables
           "OPENAI_BASE_URL": fake.openai_url, "OPENAI_API_KEY": "test-key"}
    script = tmp_path / f"block{index}.py"
    script.write_text(blocks("python")[index], encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()  # every block prints what it did


def test_pure_core_block_compacts_and_projects_again(tmp_path):
    block = next(b for b in blocks("python") if "plan_compaction" in b)
    proc = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    stored, sent = map(int, re.findall(r"\d+", proc.stdout)[:2])
    assert stored == 81 and sent < 20  # 80 messages + 1 checkpoint; summary + recent turns


def test_toml_block_is_a_valid_catalog_override(tmp_path):
    from contextfold.core.models.catalog import default_catalog

    path = tmp_path / "models.toml"
    path.write_text(blocks("toml")[0], encoding="utf-8")
    capacity = default_catalog().with_overrides(path).lookup("my-local-model")
    assert capacity.context_window == 8192 and capacity.max_output == 2048


def test_bash_block_commands_exist():
    lines = [line.split("#")[0].split() for b in blocks("bash") for line in b.splitlines()]
    commands = [words for words in lines if words and words[0] == "contextfold"]
    assert commands
    for words in commands:
        proc = subprocess.run([sys.executable, "-m", "contextfold", words[1], "--help"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "200"})
        assert proc.returncode == 0, words
        for option in (w for w in words if w.startswith("--")):
            assert option in proc.stdout, (words, option)


def _command_table() -> list[str]:
    """The first cell of each row of the README's command table (`| \\`contextfold …\\` |`)."""
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    return [re.split(r"(?<!\\)\|", line)[1] for line in section.splitlines()
            if line.startswith("| `contextfold ")]


def test_the_command_table_lists_every_command():  # issue 25 item 4
    from typer.main import get_command

    from contextfold.cli import app

    group = get_command(app)
    commands = sorted(group.commands)  # type: ignore[attr-defined]
    table = " ".join(_command_table())
    for name in commands:
        assert re.search(rf"`(contextfold )?{name}[ `]", table), name
    # an option the command requires is not shown as optional
    for cell in _command_table():
        words = cell.strip().strip("`").split()
        name = words[1]
        command = group.commands[name]  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            continue
        required = [o for p in command.params if getattr(p, "required", False)
                    and p.param_type_name == "option" for o in p.opts if o.startswith("--")]
        for option in required:
            assert f"[{option}" not in cell and option in cell, (name, option)


def _packages_of(requirement_names: set[str]) -> set[str]:
    return {n.replace("_", "-").lower() for n in requirement_names}


def test_each_framework_example_imports_only_what_its_pip_line_installs():  # item 3
    """The LangChain example imported `langchain_anthropic`, which `[langchain]` does not
    install: every import of a framework block comes from the extra or a package its
    section's `pip install` line names."""
    import importlib.metadata as md
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    providers = md.packages_distributions()
    section_re = re.compile(r"^### (.*?)$(.*?)(?=^##)", re.MULTILINE | re.DOTALL)
    checked = 0
    for m in section_re.finditer(README):
        body = m.group(2)
        install = re.search(r"pip install '(?:contextfold)\[([\w-]+)\]'((?: [\w.-]+)*)",
                            m.group(1) + body)
        code = BLOCK.search(body)
        if install is None or code is None or code.group(2) != "python":
            continue
        named = {re.split(r"[<>=~\[ ;]", r)[0].lower() for r in extras[install.group(1)]}
        named |= {w.lower() for w in install.group(2).split()}
        named = _packages_of(named)
        for module in re.findall(r"^(?:from|import) (\w+)", code.group(3), re.MULTILINE):
            if module in sys.stdlib_module_names or module == "contextfold":
                continue
            dists = _packages_of(set(providers.get(module, [module])))
            # a package the extra's packages depend on counts as installed by it
            reach = set(named)
            for dist in list(named):
                with contextlib.suppress(md.PackageNotFoundError):
                    reach |= _packages_of({re.split(r"[<>=~\[ ;(]", r)[0]
                                           for r in (md.requires(dist) or [])
                                           if "extra ==" not in r})
            assert dists & reach, (m.group(1), module, install.group(0))
        checked += 1
    assert checked >= 3  # LangChain, the OpenAI Agents SDK, pydantic-ai
