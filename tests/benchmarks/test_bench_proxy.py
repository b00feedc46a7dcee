"""The proxy bench's own machinery, without LiteLLM's venv (bench/proxy_bench.py, issue 26):
servers in their own processes, the agent's pre-encoded requests, the CPU of a server's
process tree, and LiteLLM's config."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bench import litellm_proxy
from bench.agent_history import history
from bench.proxy_bench import Agent, agent_history
from bench.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]


def test_an_agent_through_the_bare_pass_through_in_its_own_process(tmp_path):
    up_port, bare_port = free_port(), free_port()
    with ServerProcess("direct", [sys.executable, "-m", "bench.proxy_bench",
                                  "--serve-upstream", str(up_port)], up_port,
                       log=tmp_path / "up.log", cwd=ROOT) as upstream:
        upstream.ready()
        with ServerProcess("bare", [sys.executable, "-m", "bench.bare_proxy", upstream.url,
                                    str(bare_port)], bare_port, log=tmp_path / "bare.log",
                           cwd=ROOT) as bare:
            bare.ready()
            msgs = agent_history(2_000, "t")
            agent = Agent(bare, msgs, "t", pause=0)
            sent = len(b", ".join(agent.parts))
            took, cpu = agent.step()
            agent.step()
    assert took > 0 and cpu > 0  # the pass-through's own process did the work
    assert agent.messages == len(msgs) + 4  # each reply kept, one new user message each
    # The upstream saw the whole list (its usage: the body's bytes / 4) through the relay.
    assert agent.forwarded[0] >= sent // 4


def test_agent_history_is_history_with_each_agents_tag():
    assert agent_history(2_000, "a-1") == history(2_000, "a-1")
    assert agent_history(2_000, "a-1") != agent_history(2_000, "a-2")


def test_litellm_config_serves_the_upstream_with_a_master_key(tmp_path):
    key = litellm_proxy.write_config(tmp_path / "c.yaml", "http://127.0.0.1:9")
    text = (tmp_path / "c.yaml").read_text()
    assert f"master_key: {key}" in text and key.startswith("sk-") and len(key) > 40
    assert "api_base: http://127.0.0.1:9/v1" in text
    assert re.fullmatch(r"\d+\.\d+\.\d+", litellm_proxy.pinned_version())
