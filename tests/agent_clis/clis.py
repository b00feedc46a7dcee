"""Run the real agent CLIs (installed by `make agents` into `.agents/`) headless and offline.

Settings verified to contact no host but the given base URL (see docs/proxy.md, "Real
agents"): each run gets its own HOME and config directory in a scratch folder, telemetry,
update checks and non-essential traffic off, and the binary is called directly (`npx` would
ask the registry for update notices).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENTS_DIR = ROOT / ".agents"
PI_BIN = AGENTS_DIR / "node_modules" / ".bin" / "pi"
CLAUDE_BIN = AGENTS_DIR / "node_modules" / ".bin" / "claude"
CODEX_BIN = AGENTS_DIR / "node_modules" / ".bin" / "codex"
OPENCODE_BIN = AGENTS_DIR / "node_modules" / ".bin" / "opencode"
PI_MODEL = "local-model"
CLAUDE_MODEL = "claude-sonnet-4-5"
# What the agents are told their model can hold: what a user who does not know the upstream's
# real window configures (the agents' default), so their own compaction does not save them.
ASSUMED_WINDOW = 200_000
# A whole run may not take longer than this (a stuck agent fails the test instead of CI).
RUN_TIMEOUT = 900


@dataclass
class AgentRun:
    """How one agent run ended."""

    agent: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def answer(self) -> str:
        """The agent's final answer text (Claude Code's JSON `result`, Pi's printed text)."""
        if self.agent == "claude":
            try:
                return str(json.loads(self.stdout).get("result", ""))
            except ValueError:
                return self.stdout
        return self.stdout

    def describe(self) -> str:
        return (f"{self.agent} exited {self.returncode} after {self.seconds:.0f}s\n"
                f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}")


def _base_env(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), NO_UPDATE_NOTIFIER="1", DISABLE_TELEMETRY="1",
               DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1")
    return env


TIMED_OUT = -9  # the return code of a run stopped at its time limit


def _run(agent: str, argv: list[str], env: dict[str, str], cwd: Path,
         timeout: float = RUN_TIMEOUT) -> AgentRun:
    """Run the agent; one still running after `timeout` seconds is stopped and reported as
    `TIMED_OUT` with what it printed so far (a baseline that loops is measured, not hung)."""
    start = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as stopped:
        def text(value: bytes | str | None) -> str:
            return value.decode(errors="replace") if isinstance(value, bytes) else value or ""

        return AgentRun(agent, TIMED_OUT, text(stopped.stdout), text(stopped.stderr),
                        time.monotonic() - start)
    return AgentRun(agent, done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def run_pi(openai_base_url: str, prompt: str, scratch: Path) -> AgentRun:
    """Pi in print mode with an OpenAI-compatible provider at `openai_base_url` (…/v1)."""
    home = scratch / "pi-home"
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    models = {"providers": {"local": {
        "baseUrl": openai_base_url, "api": "openai-completions", "apiKey": "sk-test",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": PI_MODEL, "contextWindow": ASSUMED_WINDOW, "maxTokens": 4096}],
    }}}
    (agent_dir / "models.json").write_text(json.dumps(models, indent=2))
    env = _base_env(home)
    env.update(PI_CODING_AGENT_DIR=str(agent_dir), PI_OFFLINE="1")
    argv = ["node", str(PI_BIN), "-p", "--provider", "local", "--model", PI_MODEL,
            "--no-session", prompt]
    return _run("pi", argv, env, scratch)


def run_claude(anthropic_base_url: str, prompt: str, scratch: Path,
               tools: str = "Bash", extra: Sequence[str] = ()) -> AgentRun:
    """Claude Code in `-p` mode with ANTHROPIC_BASE_URL at `anthropic_base_url`.

    `tools="Bash"` by default: Claude Code's 24 default tool schemas alone are ~19k tokens,
    with its system prompt ~26k, too much for a 32k window whatever the history
    ("default" runs with all of them). `extra`: more arguments (`--mcp-config FILE`).
    """
    home = scratch / "claude-home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    env = _base_env(home)
    env.update(
        IS_SANDBOX="1",  # lets --dangerously-skip-permissions run as root (CI containers)
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        ANTHROPIC_BASE_URL=anthropic_base_url, ANTHROPIC_API_KEY="sk-test",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        # One model name for every request (Claude Code's side requests use the small model).
        ANTHROPIC_MODEL=CLAUDE_MODEL, ANTHROPIC_SMALL_FAST_MODEL=CLAUDE_MODEL,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=CLAUDE_MODEL,
    )
    argv = [str(CLAUDE_BIN), "-p", prompt, "--output-format", "json",
            "--dangerously-skip-permissions", "--model", CLAUDE_MODEL,
            "--tools", tools, *extra]
    return _run("claude", argv, env, scratch)


def run_codex(openai_base_url: str, prompt: str, scratch: Path) -> AgentRun:
    """`codex exec` with a model provider at `openai_base_url` (…/v1) speaking the Responses
    API, every setting given as `-c key=value` (no config file, no login). Told its model
    holds `ASSUMED_WINDOW` tokens, like the other agents, so its own compaction waits."""
    home = scratch / "codex-home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    env = _base_env(home)
    env.update(CODEX_HOME=str(home / ".codex"), LOCAL_MODEL_KEY="sk-test")
    provider = (f'{{name="local", base_url="{openai_base_url}", wire_api="responses", '
                'env_key="LOCAL_MODEL_KEY"}')
    argv = [str(CODEX_BIN), "exec", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-m", PI_MODEL,
            "-c", "model_provider=local", "-c", f"model_providers.local={provider}",
            "-c", f"model_context_window={ASSUMED_WINDOW}",
            "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false",
            prompt]
    return _run("codex", argv, env, scratch)


def run_opencode(openai_base_url: str, prompt: str, scratch: Path,
                 timeout: float = RUN_TIMEOUT) -> AgentRun:
    """`opencode run` with an OpenAI-compatible provider at `openai_base_url` (…/v1), declared
    in the project's `opencode.json` (chat completions through `@ai-sdk/openai-compatible`)."""
    home = scratch / "opencode-home"
    home.mkdir(parents=True, exist_ok=True)
    config = {"$schema": "https://opencode.ai/config.json", "autoupdate": False,
              "share": "disabled", "model": f"local/{PI_MODEL}",
              "provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "local",
                                     "options": {"baseURL": openai_base_url,
                                                 "apiKey": "sk-test"},
                                     "models": {PI_MODEL: {"name": PI_MODEL, "limit": {
                                         "context": ASSUMED_WINDOW, "output": 4096}}}}}}
    (scratch / "opencode.json").write_text(json.dumps(config, indent=2))
    env = _base_env(home)
    env.update(OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_SHARE="1",
               XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local"),
               XDG_CACHE_HOME=str(home / ".cache"))
    argv = [str(OPENCODE_BIN), "run", "--model", f"local/{PI_MODEL}", prompt]
    return _run("opencode", argv, env, scratch, timeout)
