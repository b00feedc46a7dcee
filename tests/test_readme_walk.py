"""The README walked as a newcomer walks it, from a clean virtual environment (issue 25).

A fresh `python -m venv`, `pip install <checkout>` with no extras, and then what the README
tells a new user to run: the demo and the command its closing hint prints (from a shell
whose PATH does not hold the venv, as after `make demo`), every row of the command table
with the arguments it names (its `--json` output must hold every field the table lists),
`serve` and `proxy` without their extras (one line naming the extra, no traceback), then
`pip install '<checkout>[server,proxy]'` and each started for real and asked once. Any
"Traceback" in any output, or an exit the README does not show, fails it.

Its cost is the two installs (pip's cache makes them about a minute each here) plus some
30 commands; `--durations` shows it. A fresh venv is the only way to see the package the
way `pip install` delivers it (tests/test_base_install.py checks the offline job the same
way; this file walks the README's own words).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakeserver import Reply, fake_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CC_SHORT = ROOT / "tests/fixtures/claude-code/short.jsonl"
CC_LONG = ROOT / "tests/fixtures/claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl"


class Walker:
    """A clean venv and a shell without it on PATH, running the installed `contextfold`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        venv.EnvBuilder(with_pip=True).create(home / "venv")
        self.bindir = home / "venv" / ("Scripts" if os.name == "nt" else "bin")
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONTEXTFOLD_DB", "CONTEXTFOLD_MODEL",
                            "CONTEXTFOLD_MODELS")}
        bindir = str(self.bindir.resolve())
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if p and str(Path(p).resolve()) != bindir
                                      and not Path(p, "contextfold").exists())
        env.update(CONTEXTFOLD_DB=str(home / "walk.db"), COLUMNS="100")
        self.env = env
        self.timings: dict[str, float] = {}
        self.pip(str(ROOT))

    def pip(self, spec: str) -> None:
        started = time.monotonic()
        proc = subprocess.run([str(self.bindir / "python"), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", spec],
                              capture_output=True, text=True, timeout=900, cwd=self.home)
        self.timings[f"pip install {Path(spec).name or spec}"] = time.monotonic() - started
        assert proc.returncode == 0, proc.stderr[-3000:]

    def run(self, argv: list[str], *, expect: int = 0, stdin: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """Run a command line as the README shows it (`contextfold` is the venv's)."""
        if argv[0] == "contextfold":
            argv = [str(self.bindir / "contextfold"), *argv[1:]]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              cwd=self.home, timeout=timeout, input=stdin)
        shown = " ".join(argv[1:])
        assert "Traceback" not in proc.stdout + proc.stderr, (shown, proc.stderr[-3000:])
        assert proc.returncode == expect, (shown, proc.returncode, proc.stdout[-2000:],
                                           proc.stderr[-2000:])
        return proc


@pytest.fixture(scope="module")
def walker(tmp_path_factory) -> Walker:
    return Walker(tmp_path_factory.mktemp("readme-walk"))


# ------------------------------------------------------------------ the README's table


def table_rows() -> list[tuple[str, str]]:
    """(command cell, output cell) of each row of the Command line section's table."""
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `contextfold "):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows.append((cells[0], cells[1]))
    return rows


def first_object(cell: str) -> str:
    """The first top-level `{...}` of an output cell (what the JSON document holds)."""
    start = cell.find("{")
    if start < 0:
        return ""
    depth = 0
    for i, ch in enumerate(cell[start:], start):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return cell[start:i + 1]
    return cell[start:]


def promised(cell: str) -> list[set[str]]:
    """The top-level fields (or one of alternative values, `"a"\\|"b"`) a `--json` output
    cell promises. Nested ones are left out: a list the table describes may be empty."""
    text, top, depth = first_object(cell), [], 0
    for ch in text:
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(ch, 0)
        top.append(ch if depth == 1 or ch in "{}" else " ")
    flat = "".join(top)
    groups = [set(re.findall(r'"(\w+)"', m.group(0)))
              for m in re.finditer(r'"\w+"(?:\\\|"\w+")+', flat)]
    alternatives = {w for g in groups for w in g}
    return groups + [{w} for w in re.findall(r'"(\w+)"', flat) if w not in alternatives]


def invocation(template: str, values: dict[str, str]) -> list[str]:
    """A table cell's command with its placeholders filled and its optional parts left out
    (`[--model M]`); a required option keeps its value from `values` (`--model M`)."""
    words = template.strip("`").replace("\\|", "|")
    words = re.sub(r"\[[^\[\]]*\]", "", words)  # optional options, innermost first
    words = re.sub(r"\[[^\[\]]*\]", "", words)
    out = []
    tokens = words.split()
    for i, token in enumerate(tokens):
        if token.isupper() and (i == 0 or not tokens[i - 1].startswith("--")):
            out.append(values[token])  # a positional placeholder
        elif i and tokens[i - 1].startswith("--") and token.isupper():
            out.append(values[f"{tokens[i - 1]} {token}"])
        else:
            out.append(token)
    return out


def test_the_table_is_walkable():
    rows = table_rows()
    names = [cell.strip("`").split()[1] for cell, _ in rows]
    assert names[:2] == ["import", "compact"] and {"serve", "proxy", "token"} <= set(names)


def test_every_command_in_the_table_works_as_shown(walker):
    values = {"PATH": str(CC_LONG), "QUERY": "file", "TENANT": "acme",
              "--model M": "offline/echo"}
    ran = []
    for cell, output in table_rows():
        name = cell.strip("`").split()[1]
        if name in ("serve", "proxy"):
            continue  # long-running: started below, with and without their extras
        if name == "mcp":
            continue  # a long-running MCP server: tests/mcp/test_mcp_server.py drives it with a
            # real MCP client (stdio and HTTP)
        commands = cell.split("`, `")  # `token create …`, `token list …`, `token revoke ID`
        outputs = output.split("; ") if len(commands) > 1 else [output]
        for one, shown in zip(commands, outputs, strict=True):
            argv = invocation(one, values)
            if argv[0] != "contextfold":
                argv = ["contextfold", *argv]
            ran.append(" ".join(argv[1:3]) if name == "token" else name)
            if name == "chat":  # interactive: one message on stdin, then end of input
                proc = walker.run(argv, stdin="hello there\n")
                assert "(offline model) You said: hello there" in proc.stdout
                continue
            document = json.loads(walker.run([*argv, "--json"]).stdout)
            text = json.dumps(document)
            for group in promised(shown):
                assert any(f'"{word}"' in text for word in group), (argv, group, text[:500])
            if name == "import":
                values["SESSION"] = document["session_id"]
            if argv[1:3] == ["token", "create"]:
                values["ID"] = document["id"]
    assert {"import", "compact", "project", "show", "sessions", "replay", "demo", "verify",
            "recall", "chat", "token create", "token list", "token revoke"} <= set(ran), ran


def test_help_version_and_the_demos_hint(walker):
    assert "Usage" in walker.run(["contextfold", "--help"]).stdout
    assert "Usage" in walker.run(["contextfold", "-h"]).stdout
    assert walker.run(["contextfold", "--version"]).stdout.startswith("contextfold ")
    demo = walker.run(["venv/bin/contextfold", "demo", "--turns", "8"])
    hint = " ".join(demo.stdout.split()).split("try `", 1)[1].split("`", 1)[0]
    assert hint.startswith("venv/bin/contextfold show ")  # runnable from here, as printed
    walker.run(shlex.split(hint))
    # The README says how to reach the command after `make demo`
    assert ".venv/bin/contextfold show" in README and "source .venv/bin/activate" in README


@pytest.mark.parametrize(("argv", "extra"), [
    (["contextfold", "serve"], "server"),
    (["contextfold", "proxy", "--upstream", "http://127.0.0.1:9"], "proxy"),
])
def test_serve_and_proxy_without_their_extras_name_them(walker, argv, extra):
    assert f"contextfold[{extra}]" in " ".join(
        walker.run([*argv[:2], "--help"]).stdout.split())
    proc = walker.run(argv, expect=1)
    (line,) = proc.stderr.strip().splitlines()
    assert f"pip install 'contextfold[{extra}]'" in line
    assert f"pip install 'contextfold[{extra}]'" in README


# ------------------------------------------------------------------ with the extras


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def with_extras(walker) -> Walker:
    # After the tests above (file order): the same venv, now with the two extras.
    walker.pip(f"{ROOT}[server,proxy]")
    return walker


@contextlib.contextmanager
def started(walker: Walker, argv: list[str], url: str) -> Iterator[subprocess.Popen]:
    """A long-running command, once it answers `url`; stopped (and its output checked for a
    traceback) afterwards."""
    proc = subprocess.Popen([str(walker.bindir / "contextfold"), *argv[1:]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=walker.env, cwd=walker.home)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"{argv[1]} did not answer {url}"
                time.sleep(0.3)
        yield proc
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        assert "Traceback" not in out + err, err[-3000:]


def test_serve_with_its_extra_answers(with_extras):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with started(with_extras, ["contextfold", "serve", "--port", str(port)], base + "/"):
        r = httpx.post(base + "/v1/sessions", json={})
        assert r.status_code == 201, r.text
        sid = r.json()["session_id"]
        r = httpx.post(f"{base}/v1/sessions/{sid}/messages", json={"text": "hello"},
                       timeout=60)
        assert r.status_code == 200 and "hello" in r.json()["reply"]["text"], r.text
        assert httpx.get(base + "/").status_code == 200  # the page


def test_proxy_with_its_extra_forwards(with_extras):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with fake_server(context_window=32768, api_key="k") as upstream:
        argv = ["contextfold", "proxy", "--upstream", upstream.openai_url, "--model-window",
                "local-model=32768", "--port", str(port)]
        with started(with_extras, argv, base + "/v1/models"):
            upstream.enqueue(Reply(text="forwarded"), kind="chat")
            r = httpx.post(base + "/v1/chat/completions", timeout=60,
                           headers={"authorization": "Bearer k"},
                           json={"model": "local-model",
                                 "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "forwarded"
