"""Real agent CLIs from the npm registry, headless, on a 32k upstream: Pi and Claude Code.

Each agent does the ledger task (40 tool-using turns, ~170k tokens of history: see task.py)
twice: straight at the upstream, where its history overflows the window (the baseline), and
through `contextfold proxy` by changing only its base URL, where the upstream never sees a
request over its window or one the providers would reject, and the agent finishes.
Figures of every run land in out/agents/*.json (docs/proxy.md quotes them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .scenario import MODEL, PARTS, WINDOW, ledger_run

AGENTS = ["pi", "claude"]
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("agent", AGENTS)
def test_baseline_without_proxy_the_history_overflows_the_window(
        agent: str, tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    """The problem the proxy solves, measured: the agent alone cannot finish on 32k."""
    agent_installed(agent)
    with ledger_run(agent, tmp_path, via_proxy=False) as outcome:
        figures = outcome.save_figures()
        # The upstream refused with its genuine context-length error at least once ...
        assert outcome.upstream.overflowed, outcome.describe()
        assert figures["upstream_overflow_errors"] >= 1
        # ... and the agent never got to the last part, so it could not answer.
        assert outcome.task.expected_answer not in outcome.run.answer, outcome.describe()
        assert len(outcome.parts_read()) < PARTS


@pytest.mark.parametrize("agent", AGENTS)
def test_y2_y3_agent_finishes_through_the_proxy(
        agent: str, tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    """Y2, Y3: only the base URL changes; nothing over the window or invalid goes upstream."""
    agent_installed(agent)
    with ledger_run(agent, tmp_path, via_proxy=True) as outcome:
        figures = outcome.save_figures()
        why = outcome.describe()
        # The agent finished: exit 0 and the seal that only the last part prints.
        assert outcome.run.returncode == 0, why
        assert outcome.task.expected_answer in outcome.run.answer, why
        # It really did the long task: every part read, one tool turn each at least.
        assert outcome.parts_read() == set(range(1, PARTS + 1)), why
        assert figures["tool_turns"] >= 30
        # What it sent outgrew the upstream's window by far; what the upstream got never did.
        assert figures["client_tokens_max"] > WINDOW, why
        assert outcome.over_window() == [], why
        assert not outcome.upstream.overflowed, why
        # Zero invalid requests: the project's validity oracles and the fake's own validation.
        assert outcome.invalid_requests() == [], why
        assert not outcome.upstream.rejected, why
        # The proxy compacted (it had to: 170k tokens of history through a 32k window).
        assert figures["checkpoints"] >= 1, why
        # One session in the store, listed by `contextfold sessions` with its model and its
        # client (the agent's own user agent, e.g. claude-cli/2.1.197).
        assert len(outcome.sessions) == 1, outcome.sessions
        (session,) = outcome.sessions
        assert session["model"] == MODEL[agent], session
        client = outcome.tap.model_requests[0].user_agent.split()[0]
        assert client and client in session["title"], (client, session)
        assert session["messages"] >= 2 * PARTS, session


def test_y3_claude_code_with_all_its_tools_is_refused_locally_never_upstream(
        tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    """Y3: with its 24 default tools Claude Code's fixed part (system prompt + tool schemas,
    ~26.5k tokens) leaves a 32k window no room for the task's tool results and an answer,
    however much is compacted. The proxy answers the protocol's own context-length error
    itself (measured: already at the first request) and the upstream receives nothing
    oversized; Claude Code reports "Prompt is too long" and stops."""
    agent_installed("claude")
    with ledger_run("claude", tmp_path, via_proxy=True, parts=6,
                    claude_tools="default") as outcome:
        outcome.save_figures("-all-tools")
        why = outcome.describe()
        refused = [s for s in outcome.tap.model_requests if s.status == 400]
        assert refused, why
        assert outcome.over_window() == [] and not outcome.upstream.overflowed, why
        assert outcome.invalid_requests() == [], why
        assert outcome.task.expected_answer not in outcome.run.answer, why
        assert "too long" in outcome.run.answer.lower(), why
