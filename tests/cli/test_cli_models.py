"""The CLI's face of the model resolver (SPEC B4): the one built-in default, the
`$CONTEXTFOLD_MODEL` and `$CONTEXTFOLD_MODELS` variables, and errors worded with the CLI's
options (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextfold.cli import app

CC_SHORT = Path(__file__).parents[1] / "fixtures" / "claude-code" / "short.jsonl"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CONTEXTFOLD_MODEL", raising=False)
    monkeypatch.delenv("CONTEXTFOLD_MODELS", raising=False)
    db = f"sqlite:///{tmp_path / 'cli.db'}"

    def run(*args: str, expect: int = 0, env: dict[str, str] | None = None) -> dict:
        where = [] if args[0] == "replay" else ["--db", db]  # replay reads no database
        result = CliRunner().invoke(app, [*args, *where, "--json"], env=env)
        assert result.exit_code == expect, result.output
        return json.loads(result.stdout)

    return run


def openai_list(tmp_path: Path) -> Path:
    """A recording that names no model (an OpenAI message list)."""
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": "hello there"},
                                {"role": "assistant", "content": "hi, how can I help?"}]))
    return path


def test_a_session_without_a_recorded_model_uses_the_one_default(cli, tmp_path):  # B4
    sid = cli("import", str(openai_list(tmp_path)))["session_id"]
    request = cli("project", sid)
    # The service's default too (it used to be claude-sonnet-4-5 here, offline/echo there).
    assert (request["model"], request["safe_input_limit"]) == ("offline/echo", 6144)
    chosen = cli("project", sid, env={"CONTEXTFOLD_MODEL": "gpt-4o-mini"})
    assert chosen["model"] == "gpt-4o-mini" and chosen["safe_input_limit"] > 6144


def test_an_overrides_file_reaches_every_command_and_a_bad_one_is_bad_input(
        cli, tmp_path):  # B4
    sid = cli("import", str(openai_list(tmp_path)))["session_id"]
    good = tmp_path / "models.toml"
    good.write_text('[models."house-model"]\ncontext_window = 20000\nmax_output = 2000\n')
    sized = cli("project", sid, "--model", "house-model",
                env={"CONTEXTFOLD_MODELS": str(good)})
    assert sized["safe_input_limit"] == 18_000
    bad = tmp_path / "bad.toml"
    bad.write_text("[models.broken\n")
    error = cli("project", sid, expect=2, env={"CONTEXTFOLD_MODELS": str(bad)})["error"]
    assert error.startswith("$CONTEXTFOLD_MODELS: ") and "bad.toml" in error


def test_an_unknown_model_names_the_cli_option_that_gives_its_window(cli):  # B4
    error = cli("replay", str(CC_SHORT), "--model", "house-model", expect=2)["error"]
    assert "unknown model 'house-model'" in error and "--context-window N" in error
    assert "capacity_for" not in error  # the library's wording is not the CLI's
