"""A newcomer's first week, scripted (issue 41): one title, one model, one set of numbers for
one session on the CLI, the service and the page; words meant for users."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.values.messages import text_message
from contextfold.titles import UNTITLED
from tests.server_fixtures import service_factory  # noqa: F401  (fixture)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def cli(*args: str) -> dict:
    """`cli_json` off the event loop (a command may run its own, on PostgreSQL)."""
    return await asyncio.to_thread(cli_json, *args)


async def test_a_blank_title_is_one_word_everywhere(service_factory, db_url) -> None:  # noqa: F811
    """A session without a title reads "Untitled" on the CLI and the service (the page shows
    the service's); a rename on the page is the title on the CLI too."""
    async with service_factory() as svc:
        blank = await svc.store.create_session()
        await svc.store.append(blank.id, text_message("user", "hello"))
        named = await svc.store.create_session(title="  ")  # blank is blank
        async with svc.client() as c:
            listed = {s["session_id"]: s["title"] for s in
                      (await c.get("/v1/sessions")).json()["sessions"]}
            assert listed == {blank.id: UNTITLED, named.id: UNTITLED}
            assert (await c.get(f"/v1/sessions/{blank.id}")).json()["title"] == UNTITLED
            cli_rows = (await cli("sessions", "--db", db_url))["sessions"]
            titles = {s["session_id"]: s["title"] for s in cli_rows}
            assert titles == listed
            renamed = await c.patch(f"/v1/sessions/{blank.id}", json={"title": "Trip notes"})
            assert renamed.json()["title"] == "Trip notes"
            cli_rows = (await cli("sessions", "--db", db_url))["sessions"]
            titles = {s["session_id"]: s["title"] for s in cli_rows}
            assert titles[blank.id] == "Trip notes"
            back = await c.patch(f"/v1/sessions/{blank.id}", json={"title": ""})
            assert back.json()["title"] == UNTITLED


FIXTURES = Path(__file__).parent / "fixtures"
REAL_SESSIONS = [FIXTURES / "pi-mono/large-session.jsonl",
                 *sorted((FIXTURES / "claude-code").glob("*.jsonl"))]
COST_KEYS = ("model", "usd", "full_history_usd", "as_sent_usd", "saved_usd", "input_tokens",
             "cached_tokens", "output_tokens", "compactions")


async def test_one_number_everywhere_over_the_real_sessions(
        service_factory, db_url) -> None:  # noqa: F811
    """The real Pi and Claude Code sessions, imported, one of them compacted: for each, the
    CLI (`sessions`, `project`, `context`) and the service (the list, the session, its
    projection and breakdown — what the page shows) give the same model, title, estimate,
    breakdown, cost and saving (issue 41)."""
    ids = [(await cli("import", str(path), "--db", db_url))["session_id"]
           for path in REAL_SESSIONS]
    # After a compaction no usage baseline holds the tools: both faces must count them.
    compacted = await cli("compact", ids[0], "--db", db_url)
    assert compacted["status"] == "compacted"
    rows = {r["session_id"]: r for r in (await cli("sessions", "--db", db_url))["sessions"]}
    async with service_factory() as svc, svc.client() as c:
        listed = {s["session_id"]: s for s in (await c.get("/v1/sessions")).json()["sessions"]}
        for sid in ids:
            one = (await c.get(f"/v1/sessions/{sid}")).json()
            projection = (await c.get(f"/v1/sessions/{sid}/projection")).json()
            context = (await c.get(f"/v1/sessions/{sid}/context")).json()
            project = await cli("project", sid, "--db", db_url)
            shown = await cli("context", sid, "--db", db_url)
            row = rows[sid]
            where = f"session {sid}"
            # model and title
            assert row["model"] == listed[sid]["model"] == one["model"] == project["model"] \
                == shown["model"], where
            assert row["model"] and row["model"] != "offline/echo", where
            assert row["title"] == listed[sid]["title"] == one["title"], where
            # the next request's estimate, and its breakdown
            assert project["estimated_tokens"] == projection["estimate"]["tokens"] \
                == context["used"] == shown["used"], where
            assert shown["parts"] == context["parts"], where
            assert sum(context["parts"].values()) == context["used"], where
            assert project["tools"] == ["history_search", "history_expand"], where
            # cost and saving: one definition, one set of figures
            assert {k: row["cost"][k] for k in COST_KEYS} == \
                {k: one["cost"][k] for k in COST_KEYS}, where
            assert context["saved_tokens"] == shown["saved_tokens"] == \
                context["full_history_tokens"] - context["used"], where
    # The compacted session's tools are counted once, not inflated by a measured total.
    assert context["parts"]["tools"] == shown["parts"]["tools"]


# ---------------------------------------------------------------------- words for users

# A rule id ("SPEC M7:", "(S7)", "(L1, L4)", "A1:") or the store's word "leaf": ours, not the
# reader's. Docstrings and comments may name rules; what a user reads may not.
RULE_ID = re.compile(r"\bSPEC\b|\((?:[A-Z]\d{1,2}(?:[,–-] ?[A-Z]?\d{1,2})*)\)|"
                     r"(?<![\w-])[A-Z]\d{1,2}:|\bleaf\b|\bleaves\b(?= of)")
STATIC = Path(__file__).resolve().parents[1] / "src/contextfold/server/static"
PACKAGE = Path(__file__).resolve().parents[1] / "src/contextfold"
# The modules whose strings reach a user: the CLI, the service, the errors every face words,
# the store's refusals and the planner's and the cost trigger's reasons. (The proxy's own
# wording is checked by its own tests; the auditor's and `verify`'s forensic reports name
# the store's tables and columns on purpose.)
USER_FACING = [*sorted((PACKAGE / "cli").glob("*.py")), *sorted((PACKAGE / "server").glob("*.py")),
               *(PACKAGE / p for p in (
                   "errors.py", "titles.py", "billing.py", "stored_request.py",
                   "store/errors.py", "store/refs.py", "store/sql/sessions.py",
                   "store/sql/reading.py", "store/sql/appending.py", "store/sql/committing.py",
                   "store/sql/branching.py",
                   "store/sql/loading.py", "store/sql/importing.py", "store/inputs.py",
                   "runtime/errors.py", "runtime/fitting.py", "runtime/compaction.py",
                   "core/planning/planner.py", "core/planning/cost_trigger.py",
                   "core/report/breakdown.py", "_net.py"))]


def js_strings(source: str) -> list[str]:
    """The string and template literals of a JavaScript file (a template's literal parts,
    its `${...}` read as code), comments and regular expression literals skipped."""
    out: list[str] = []
    n = len(source)

    def code(i: int, stop: str | None = None) -> int:
        depth, last = 0, "("
        while i < n:
            c = source[i]
            if stop and c == "}" and depth == 0:
                return i + 1
            if source.startswith("//", i):
                i = source.find("\n", i)
                i = n if i < 0 else i
                continue
            if source.startswith("/*", i):
                i = source.find("*/", i) + 2
                continue
            if c in "\"'":
                j, buf = i + 1, []
                while j < n and source[j] != c:
                    buf.append(source[j:j + 2] if source[j] == "\\" else source[j])
                    j += 2 if source[j] == "\\" else 1
                out.append("".join(buf))
                i, last = j + 1, "a"
                continue
            if c == "`":
                i, last = template(i + 1), "a"
                continue
            if c == "/" and last in "(,=:[!&|?{};+-*%<>~^" :  # a regular expression literal
                j, in_class = i + 1, False
                while j < n and (source[j] != "/" or in_class):
                    if source[j] == "\\":
                        j += 1
                    elif source[j] == "[":
                        in_class = True
                    elif source[j] == "]":
                        in_class = False
                    j += 1
                i, last = j + 1, "a"
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if not c.isspace():
                last = c
            i += 1
        return i

    def template(i: int) -> int:
        buf: list[str] = []
        while i < n and source[i] != "`":
            if source[i] == "\\":
                buf.append(source[i:i + 2])
                i += 2
            elif source.startswith("${", i):
                buf.append(" ")
                i = code(i + 2, stop="}")
            else:
                buf.append(source[i])
                i += 1
        out.append("".join(buf))
        return i + 1

    code(0)
    return out


def user_strings(path: Path) -> list[str]:
    """A Python module's string constants that are not documentation (f-strings' literal
    parts included), with the line they are on."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # A string standing alone as a statement documents (a docstring, an attribute's).
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [f"{path.name}:{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_no_rule_ids_or_internal_words_in_what_users_read() -> None:
    """The page (its HTML and every string its scripts show), every command's help and the
    messages of the modules that talk to users carry no rule ids and no "leaf" (issue 41)."""
    found = []
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    found += [f"index.html: {m.group(0)}" for m in RULE_ID.finditer(re.sub(r"<!--.*?-->", "",
                                                                          html, flags=re.S))]
    for script in sorted(STATIC.glob("*.js")):
        found += [f"{script.name}: {s!r}" for s in js_strings(script.read_text("utf-8"))
                  if RULE_ID.search(s)]
    for path in USER_FACING:
        found += [s for s in user_strings(path) if RULE_ID.search(s.split(": ", 1)[1])]
    runner = CliRunner()
    commands = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    for command in ["", *commands]:
        shown = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (command, shown.output)
        found += [f"contextfold {command} --help: {line.strip()}"
                  for line in shown.output.splitlines() if RULE_ID.search(line)]
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_must() -> None:
    """The pattern catches each form the issue met, and spares ordinary words."""
    for bad in ("SPEC M7: --preview", "attribution violations (S7): 0", "(SPEC L5)",
                "over the threshold (A1)", "the session's leaf", "recall (L1, L4)"):
        assert RULE_ID.search(bad), bad
    script = ("const re = /[\"'`]/; // a comment names SPEC A1\n"
              'el("p", {}, `${n} tokens (${x ? `see "SPEC M7: y"` : "fine"})`); /* (S7) */')
    assert [s for s in js_strings(script) if RULE_ID.search(s)] == ['see "SPEC M7: y"']
    for fine in ("a leaflet", "leaf_id", "gpt-4o", "Q4 prices", "window 8,192 (safe 6,144)",
                 "claude-3-5: sonnet", "the base install leaves out"):
        assert not RULE_ID.search(fine), fine


def test_counts_have_their_nouns_in_the_right_number(tmp_path: Path) -> None:
    """ "1 message, 0 checkpoints", "1 node", "1 session" (issue 41: "1 checkpoints")."""
    url = f"sqlite:///{tmp_path / 'plural.db'}"
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"role": "user", "content": "hello"}]))
    runner = CliRunner()
    imported = runner.invoke(app, ["import", str(one), "--db", url], env={"COLUMNS": "200"})
    assert imported.exit_code == 0, imported.output
    assert "1 message, 0 checkpoints" in imported.output
    sid = re.search(r"[0-9a-f-]{36}", imported.output).group(0)
    outputs = [imported.output]
    for command in (["sessions"], ["show", sid], ["verify", sid], ["context", sid]):
        result = runner.invoke(app, [*command, "--db", url], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    text = "\n".join(outputs)
    assert "1 session" in text and "1 node" in text
    wrong = re.findall(r"\b1 (?:messages|checkpoints|sessions|nodes|requests|turns)\b", text)
    assert not wrong, wrong


@pytest.mark.parametrize("command", [["serve"], ["proxy", "--upstream", "http://127.0.0.1:9"]])
def test_a_busy_port_is_one_sentence(command: list[str], tmp_path: Path) -> None:
    """`serve` and `proxy` on a port another server holds: one sentence, exit 2; no start
    line before it, no uvicorn `[Errno 98]` after it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "contextfold", *command, "--port", str(port),
             "--db", f"sqlite:///{tmp_path / 'busy.db'}"],
            capture_output=True, text=True, timeout=120)
    said = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, said
    assert said == f"error: port {port} on 127.0.0.1 is already in use (another server is " \
        "listening there): stop it, or choose another port with --port N", said


async def test_too_large_names_the_safe_limit_and_the_window(tmp_path: Path) -> None:
    """The refusal names the safe input limit as the safe limit and the window as the
    window (issue 41: a 6,144 safe limit was called the model's maximum context length)."""
    from contextfold.cli.app import too_large_message as cli_words
    from contextfold.core.sizing.resolver import ModelResolver
    from contextfold.providers.offline import OfflineModel
    from contextfold.runtime import Conversation, DraftTooLargeError
    from contextfold.server.errors import too_large_message as api_words
    from contextfold.store import open_store

    resolved = ModelResolver().resolve("offline/echo")
    window, safe = resolved.capacity.context_window, resolved.budget.safe_input_limit
    assert safe < window
    async with await open_store(f"sqlite:///{tmp_path / 'big.db'}") as store:
        conv = await Conversation.open(store, model=OfflineModel(),
                                       capacity=resolved.capacity)
        with pytest.raises(DraftTooLargeError) as caught:
            await conv.send("word " * 40_000)
        await conv.close()
    error = caught.value
    assert (error.safe_input_limit, error.context_window) == (safe, window)
    assert error.facts()["context_window"] == window
    for words in (cli_words(error), api_words(error)):
        assert "safe input limit" in words and "window" in words, words
        assert f"{safe:,}" in words or str(safe) in words
        assert f"{window:,}" in words or str(window) in words
        assert "maximum context length" not in words


# ---------------------------------------------------------------------- a fast first run


def test_make_demo_installs_the_base_only_and_make_test_the_rest(tmp_path: Path) -> None:
    """`make demo` on a fresh clone installs the base package alone (the demo runs offline,
    no extra); the extras and test tools come with `make install` / `make test`."""
    root = Path(__file__).resolve().parents[1]

    def planned(target: str) -> str:
        done = subprocess.run(["make", "-n", "-f", str(root / "Makefile"), target,
                               f"VENV={tmp_path / 'venv'}", "CHROMIUM=/bin/sh",
                               "AGENTS=/bin/sh"],
                              cwd=root, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    demo = planned("demo")
    assert "pip install --quiet --disable-pip-version-check -e ." in demo
    assert "[dev]" not in demo and "contextfold demo" in demo
    test = planned("test")
    assert "-e '.[dev]'" in test and "pytest" in test


# ---------------------------------------------------------------------- docs


def test_docs_say_what_make_agents_runs_and_the_readmes_pi_config_has_compat() -> None:
    """docs/real-agents.md names the command the Makefile's agents target runs, and the
    README's Pi provider carries the `compat` block docs/real-agents.md says local servers
    need (issue 41)."""
    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("$(AGENTS):", 1)[1].split("\nagents:", 1)[0]
    command = re.search(r"\bnpm (install|ci)\b", recipe).group(0)
    agents_doc = (root / "docs/real-agents.md").read_text(encoding="utf-8")
    said = re.search(r"`make agents`: `(npm \w+)`", agents_doc)
    assert said and said.group(1) == command
    readme = (root / "README.md").read_text(encoding="utf-8")

    def pi_config(text: str) -> dict:
        block = re.search(r'```json\s*(\{"providers": \{"local": \{"baseUrl".*?)```', text,
                          re.S).group(1)
        return json.loads(block)["providers"]["local"]

    ours, theirs = pi_config(readme), pi_config(agents_doc)
    assert ours["compat"] == theirs["compat"]
    assert ours["compat"] == {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
