"""A proxied session names its agent and is sized, by every command, for the proxy's window
(issue 25, item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from contextfold.core.models.budget import derive_budget
from contextfold.core.sizing.resolver import ModelResolver
from contextfold.proxy import ProxyConfig
from contextfold.proxy.identity import known_agent, session_title
from contextfold.proxy.serve import ProxyThread
from tests.builders import assistant as assistant_msg
from tests.builders import user as user_msg
from tests.fakeserver import Reply, fake_server

PI_SYSTEM = ("You are an expert coding assistant operating inside pi, a coding agent harness. "
             "You help users by reading files, executing commands, editing code.")


@pytest.mark.parametrize(("headers", "system", "agent"), [
    ({"user-agent": "claude-cli/2.1.197 (external, cli)"}, None, "Claude Code"),
    ({"user-agent": "OpenAI/JS 6.26.0"}, PI_SYSTEM, "Pi"),
    ({"user-agent": "codex_cli_rs/0.171.0 (Debian 12; x86_64)"}, None, "Codex"),
    ({"user-agent": "OpenAI/JS 6.26.0", "originator": "codex_exec"}, None, "Codex"),
    ({"user-agent": "opencode/1.18.33 ai-sdk/provider-utils/3.0"}, None, "OpenCode"),
    ({"user-agent": "OpenAI/JS 6.26.0"}, "You are a helpful assistant.", None),
    ({}, None, None),
])
def test_the_agent_is_named_where_it_can_be_told(headers, system, agent):
    assert known_agent(headers, system) == agent
    title = session_title(headers, system)
    if agent:
        assert title.startswith(f"proxy: {agent} (")
        assert headers["user-agent"].split()[0] in title  # the client stays visible
    else:
        assert title == f"proxy: {headers.get('user-agent', 'unknown client')}"


def test_a_title_is_what_the_person_first_asked_not_a_notice_nor_a_paste():
    """Issue 41: every proxied session of one agent was titled alike. The title is the
    first statement a person typed (an agent's injected notice and a pasted log are not
    one), shortened at a word, with the agent and its client beside it."""
    headers = {"user-agent": "claude-cli/2.1.197 (external, cli)"}
    notice = user_msg("<system-reminder>\nAs you answer the user's questions, you can use "
                      "the following context: CLAUDE.md says use uv.\n</system-reminder>")
    paste = user_msg("```\nTraceback (most recent call last):\n  File \"app.py\", line 3, "
                     "in <module>\nValueError: bad\n```")
    asked = user_msg("Why does the importer reject files with a BOM? Please keep the public "
                     "API unchanged while you fix it, and do not touch the migrations.")
    title = session_title(headers, None, [notice, paste, assistant_msg("ok"), asked])
    assert title.startswith("Why does the importer reject files with a BOM?")
    assert title.endswith(" · Claude Code (claude-cli/2.1.197 (external, cli))")
    assert " …" in title and len(title) <= 120
    head = title.split(" · ")[0].removesuffix(" …")
    assert asked.text.startswith(head) and asked.text[len(head)] == " "  # cut at a word
    # nothing typed yet: the agent and its client, as before
    assert session_title(headers, None, [notice]) == \
        "proxy: Claude Code (claude-cli/2.1.197 (external, cli))"


def test_a_proxied_pi_session_is_titled_pi_and_projected_at_the_proxys_window(tmp_path: Path):
    """It was `proxy: OpenAI/JS 6.26.0`, and `project` sized it for the default model (the
    catalog does not know `local-model`), not the proxy's --model-window."""
    window = 12_000
    db = f"sqlite:///{tmp_path / 'proxy.db'}"
    with fake_server(context_window=window, api_key="k") as upstream:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.openai_url,
                                        windows={"local-model": window}, db=db)).start()
        try:
            upstream.enqueue(Reply(text="done"), kind="chat")
            r = httpx.post(proxy.url + "/v1/chat/completions", timeout=60, headers={
                "user-agent": "OpenAI/JS 6.26.0", "authorization": "Bearer k"}, json={
                "model": "local-model", "messages": [
                    {"role": "system", "content": PI_SYSTEM},
                    {"role": "user", "content": "list the files"}]})
            assert r.status_code == 200, r.text
        finally:
            proxy.stop()
    env = {**os.environ, "CONTEXTFOLD_DB": db, "COLUMNS": "200"}

    def cf(*args: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "contextfold", *args, "--json"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    (row,) = cf("sessions")["sessions"]
    assert row["title"] == "list the files · Pi (OpenAI/JS 6.26.0)"
    projected = cf("project", row["session_id"])
    expected = derive_budget(ModelResolver(windows={"local-model": window})
                             .resolve("local-model").capacity)
    assert projected["model"] == "local-model"
    assert projected["safe_input_limit"] == expected.safe_input_limit
    # an explicit window still wins over the recorded one
    assert cf("project", row["session_id"], "--context-window", "64000")[
        "safe_input_limit"] != expected.safe_input_limit
