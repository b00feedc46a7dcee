"""`contextfold proxy --summarizer-model`: checkpoints written by a model, with the server's own
key (never a client's, SPEC Y5), falling back to the offline summary when the model fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.proxy import ProxyConfig, llm_summarizer
from contextfold.proxy.serve import ProxyThread
from tests.fakeserver import fake_server
from tests.proxy.test_proxy_openai import WINDOW, client, run_tool_loop, sessions


def checkpoints(db: str) -> list:
    return [n.checkpoint for _, tree in asyncio.run(sessions(db)) for n in tree
            if n.checkpoint is not None]


def test_checkpoints_come_from_the_named_model_served_by_the_upstream_y2(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    with fake_server(context_window=WINDOW) as upstream:
        # Named without /v1, as a user may: the summariser still reaches the OpenAI routes.
        config = ProxyConfig(upstream=upstream.base_url, windows={"local-model": WINDOW}, db=db)
        config.summarizer = llm_summarizer(config, "local-model")
        proxy = ProxyThread(config).start()
        try:
            run_tool_loop(client(proxy), upstream, rounds=18)
        finally:
            proxy.stop()
        chats = [r for r in upstream.requests if not r.is_summary]
        assert max(r.prompt_tokens for r in chats) <= WINDOW and not upstream.overflowed
        assert upstream.summary_requests, "the upstream was never asked for a summary"
        assert all(r.prompt_tokens <= WINDOW for r in upstream.summary_requests)
    made = checkpoints(db)
    assert made and all(c.summarizer not in ("extractive", "extractive-fallback")
                        for c in made), [c.summarizer for c in made]


def test_a_failing_summariser_model_falls_back_to_the_offline_summary(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    with fake_server(context_window=WINDOW) as upstream:
        config = ProxyConfig(upstream=upstream.openai_url, windows={"local-model": WINDOW}, db=db)
        # A server that is not there: every summary call fails, the proxy must go on.
        config.summarizer = llm_summarizer(config, "local-model",
                                           base_url="http://127.0.0.1:9/v1")
        proxy = ProxyThread(config).start()
        try:
            run_tool_loop(client(proxy), upstream, rounds=18)
        finally:
            proxy.stop()
        assert not upstream.overflowed and not upstream.summary_requests
    made = checkpoints(db)
    assert made and {c.summarizer for c in made} == {"extractive-fallback"}


@pytest.mark.parametrize("args, says", [
    (["--summarizer-model", "mystery-model"], "mystery-model"),
    (["--summarizer-model", "local-model", "--summarizer-provider", "nope"], "nope"),
])
def test_a_summariser_model_that_cannot_be_used_is_bad_input(args, says):
    result = CliRunner().invoke(app, ["proxy", "--upstream", "http://127.0.0.1:9", *args])
    assert result.exit_code == 2, result.output
    assert says in result.output


SERVER_ANTHROPIC_KEY = "sk-ant-server-key-must-stay-home"
BARE_CLAUDE = "claude-3-5-haiku-latest"


@pytest.mark.parametrize("base_url", ["the upstream", "named"])
def test_a_bare_claude_summariser_never_gets_the_servers_anthropic_key_y8(
        tmp_path: Path, monkeypatch, base_url):
    """A bare name served by the upstream, or at a named base URL, is an OpenAI-compatible
    server's: its summary requests carry no server key (they carried ANTHROPIC_API_KEY)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SERVER_ANTHROPIC_KEY)
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    with fake_server(context_window=WINDOW) as upstream:
        config = ProxyConfig(upstream=upstream.base_url, db=db,
                             windows={"local-model": WINDOW, BARE_CLAUDE: WINDOW})
        config.summarizer = llm_summarizer(
            config, BARE_CLAUDE, base_url=upstream.base_url if base_url == "named" else None)
        proxy = ProxyThread(config).start()
        try:
            run_tool_loop(client(proxy), upstream, rounds=18)
        finally:
            proxy.stop()
        summaries = upstream.summary_requests
        assert summaries and {r.protocol for r in summaries} == {"openai"}
        sent = {v for r in summaries for v in r.key_headers.values()}
        assert sent == {"Bearer not-needed"}, sent
        assert not any(SERVER_ANTHROPIC_KEY in v for r in upstream.requests
                       for v in r.key_headers.values())


def test_the_operator_binds_a_provider_to_a_base_url_by_naming_both_y8(tmp_path: Path,
                                                                       monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SERVER_ANTHROPIC_KEY)
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    with fake_server(context_window=WINDOW) as upstream:
        config = ProxyConfig(upstream=upstream.base_url, db=db,
                             windows={"local-model": WINDOW, BARE_CLAUDE: WINDOW})
        config.summarizer = llm_summarizer(config, BARE_CLAUDE, provider="anthropic",
                                           base_url=upstream.base_url)
        proxy = ProxyThread(config).start()
        try:
            run_tool_loop(client(proxy), upstream, rounds=18)
        finally:
            proxy.stop()
        summaries = upstream.summary_requests
        assert summaries and {r.protocol for r in summaries} == {"anthropic"}
        assert {v.removeprefix("Bearer ") for r in summaries
                for v in r.key_headers.values()} == {SERVER_ANTHROPIC_KEY}
