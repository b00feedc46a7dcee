"""Codex (`codex exec`, the OpenAI Responses API, SPEC Y6) and OpenCode (`opencode run`, chat
completions), headless, on the 32k ledger task: straight at the upstream and through
`contextfold proxy` by changing only the base URL (like Pi and Claude Code in
test_real_agents.py). Figures land in out/agents/*.json (docs/real-agents.md quotes them).

OpenCode starts its own title request in a second conversation, so its run stores two
sessions: the task's (the one with every part) and the title's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .clis import TIMED_OUT
from .scenario import MODEL, PARTS, WINDOW, ledger_run

AGENTS = ["codex", "opencode"]
# Seconds an agent alone gets (OpenCode loops on its own compaction, so it never ends by
# itself). 60 s shows the failure (its first refusal comes after ~20 s); docs/real-agents.md's
# OpenCode row was measured with CONTEXTFOLD_AGENT_BASELINE_SECONDS=240.
BASELINE_LIMIT = float(os.environ.get("CONTEXTFOLD_AGENT_BASELINE_SECONDS", "60"))
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("agent", AGENTS)
def test_baseline_without_proxy_the_agent_fails_or_degrades(
        agent: str, tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    """Alone on 32k the upstream refuses the agent with its context-length error. Codex then
    stops ("ran out of room in the model's context window", exit 1); OpenCode compacts
    itself after each refusal and tries again, its compaction request overflowing too, over
    and over: measured here until `BASELINE_LIMIT` seconds (through the proxy it finishes
    the whole task in less)."""
    agent_installed(agent)
    with ledger_run(agent, tmp_path, via_proxy=False, timeout=BASELINE_LIMIT) as outcome:
        figures = outcome.save_figures()
        assert outcome.upstream.overflowed, outcome.describe()
        assert figures["upstream_overflow_errors"] >= 1
        assert outcome.task.expected_answer not in outcome.run.answer, outcome.describe()
        assert len(outcome.parts_read()) < PARTS
        if agent == "codex":
            assert outcome.run.returncode not in (0, TIMED_OUT), outcome.describe()


@pytest.mark.parametrize("agent", AGENTS)
def test_y2_y3_y6_agent_finishes_through_the_proxy(
        agent: str, tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    """Y2, Y3 (and Y6 for Codex): nothing over the window or invalid goes upstream, the
    agent reads all 40 parts and answers with the last seal."""
    agent_installed(agent)
    with ledger_run(agent, tmp_path, via_proxy=True) as outcome:
        figures = outcome.save_figures()
        why = outcome.describe()
        assert outcome.run.returncode == 0, why
        assert outcome.task.expected_answer in outcome.run.answer, why
        assert outcome.parts_read() == set(range(1, PARTS + 1)), why
        assert figures["client_tokens_max"] > WINDOW, why
        assert outcome.over_window() == [], why
        assert not outcome.upstream.overflowed, why
        assert outcome.invalid_requests() == [], why
        assert not outcome.upstream.rejected, why
        assert figures["checkpoints"] >= 1, why
        task = max(outcome.sessions, key=lambda s: s["messages"])
        assert task["model"] == MODEL[agent], task
        assert task["messages"] >= 2 * PARTS, task
        assert len(outcome.sessions) == (1 if agent == "codex" else 2), outcome.sessions
        if agent == "codex":  # every model call went through the Responses endpoint
            assert all(s.path.endswith("/responses") for s in outcome.tap.model_requests)
