"""One agent run on the ledger task, directly against the upstream or through the proxy.

    agent --> tap (measures what the client sent) --> [contextfold proxy] --> upstream (32k)

The upstream is the project's fake provider (tests/fakeserver): real tokenizer, the providers'
genuine context-length error bodies, request validation, every request recorded. Its answers
come from `LedgerTask.respond`, decided from each request alone.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.render.validity import anthropic_problems, openai_problems
from tests.fakeserver import FakeServer, Reply, fake_server
from tests.fakeserver.responses import chat_view

from .clis import (
    CLAUDE_MODEL,
    PI_MODEL,
    ROOT,
    AgentRun,
    run_claude,
    run_codex,
    run_opencode,
    run_pi,
)
from .proxy_process import RunningProxy, contextfold_cli, running_proxy
from .tap import Tap
from .task import LedgerTask

WINDOW = 32_768
PARTS = 40
FIGURES_DIR = ROOT / "out" / "agents"
# The protocol each agent speaks (Codex: the Responses API), and the proxy's --protocol.
PROTOCOL = {"pi": "openai", "claude": "anthropic", "codex": "responses", "opencode": "openai"}
PROXY_PROTOCOL = {"responses": "openai"}
MODEL = {"pi": PI_MODEL, "claude": CLAUDE_MODEL, "codex": PI_MODEL, "opencode": PI_MODEL}
RUNNERS = {"pi": run_pi, "codex": run_codex, "opencode": run_opencode}


@dataclass
class Outcome:
    """Everything a test asserts on, and the figures the docs quote."""

    agent: str
    via_proxy: bool
    run: AgentRun
    task: LedgerTask
    upstream: FakeServer
    tap: Tap
    decisions: dict[int, str]  # id(request body) -> what the model did with it
    proxy: RunningProxy | None = None
    sessions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def protocol(self) -> str:
        return PROTOCOL[self.agent]

    def invalid_requests(self) -> list[tuple[int, list[str]]]:
        """Upstream requests the project's validity oracles reject, with the reasons."""
        found = []
        for i, request in enumerate(self.upstream.requests):
            if request.is_summary:
                continue  # the proxy's own summariser call, judged by the fake's validation
            if self.protocol == "responses":
                problems = openai_problems(chat_view(request.body)["messages"])
            else:
                check = openai_problems if self.protocol == "openai" else anthropic_problems
                problems = check(request.messages)
            if problems:
                found.append((i, problems))
        return found

    def over_window(self) -> list[int]:
        """Upstream requests whose prompt (plus the output they reserve) exceeds the window."""
        return [i for i, r in enumerate(self.upstream.requests)
                if r.prompt_tokens + (r.max_tokens or 0) > WINDOW]

    def answered(self) -> list[str]:
        """What the model did, for the requests the upstream answered (not refused)."""
        return [self.decisions[id(r.body)] for r in self.upstream.requests
                if r.outcome == "ok" and id(r.body) in self.decisions]

    def parts_read(self) -> set[int]:
        return {int(d.split()[1]) for d in self.answered() if d.startswith("read ")}

    def proxy_lines(self) -> list[dict[str, str]]:
        """The proxy's one-line-per-request log (key=value fields), parsed."""
        text = self.proxy.log_text() if self.proxy else ""
        return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in text.splitlines()
                if "contextfold.proxy" in line and " session=" in line]

    def figures(self) -> dict[str, Any]:
        up = self.upstream.requests
        sent = self.tap.model_requests
        return {
            "agent": self.agent, "via_proxy": self.via_proxy, "window": WINDOW,
            "parts": self.task.parts, "exit_code": self.run.returncode,
            "finished": self.task.expected_answer in self.run.answer,
            "wall_seconds": round(self.run.seconds, 1),
            "client_requests": len(sent),
            "client_tokens_total": sum(s.prompt_tokens for s in sent),
            "client_tokens_max": max((s.prompt_tokens for s in sent), default=0),
            "upstream_requests": len(up),
            "upstream_tokens_total": sum(r.prompt_tokens for r in up),
            "upstream_tokens_max": max((r.prompt_tokens for r in up), default=0),
            "upstream_over_window": len(self.over_window()),
            "upstream_overflow_errors": len(self.upstream.overflowed),
            "upstream_invalid": len(self.invalid_requests()) + len(self.upstream.rejected),
            "tool_turns": sum(d.startswith("read ") for d in self.answered()),
            "agent_summary_requests": sum(d == "note" for d in self.answered()),
            "proxy_summary_requests": len(self.upstream.summary_requests),
            "proxy_compactions_logged": sum(
                line.get("compaction", "-") != "-" for line in self.proxy_lines()),
            "checkpoints": sum(int(s.get("checkpoints", 0) or 0) for s in self.sessions),
            "sessions": len(self.sessions),
        }

    def save_figures(self, label: str = "") -> dict[str, Any]:
        figures = self.figures()
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        name = f"{self.agent}-{'proxy' if self.via_proxy else 'direct'}{label}.json"
        (FIGURES_DIR / name).write_text(json.dumps(figures, indent=2) + "\n")
        return figures

    def describe(self) -> str:
        return (f"{self.run.describe()}\nfigures: {json.dumps(self.figures())}\n"
                f"proxy log tail: {self.proxy.log_text()[-3000:] if self.proxy else '-'}")


def _recording(task: LedgerTask, decisions: dict[int, str]) -> Any:
    lock = threading.Lock()

    def respond(protocol: str, body: dict[str, Any]) -> Reply:
        reply = task.respond(protocol, body)
        if reply.tool_calls:
            args = reply.tool_calls[0].arguments
            command = str(args.get("command", args.get("cmd", "")))
            kind = f"read {int(command.rsplit('part_', 1)[1][:2])}"
        else:
            kind = "final" if (reply.text or "").startswith("AUDIT") else "note"
        with lock:
            decisions[id(body)] = kind  # the body object the fake records, so they join
        return reply

    return respond


@contextmanager
def ledger_run(agent: str, scratch: Path, *, via_proxy: bool, parts: int = PARTS,
               claude_tools: str = "Bash", timeout: float | None = None) -> Iterator[Outcome]:
    """Run `agent` on the ledger task; yield the outcome while the servers still run."""
    task = LedgerTask(scratch / "ledger", parts=parts).write()
    decisions: dict[int, str] = {}
    with ExitStack() as stack:
        upstream = stack.enter_context(fake_server(
            context_window=WINDOW, count_max_tokens=True,
            openai_flavor="vllm" if agent == "pi" else "openai"))
        upstream.respond_with(_recording(task, decisions))
        openai = agent != "claude"
        up_url = upstream.openai_url if openai else upstream.anthropic_url
        proxy = None
        target = up_url
        if via_proxy:
            protocol = PROXY_PROTOCOL.get(PROTOCOL[agent], PROTOCOL[agent])
            proxy = stack.enter_context(running_proxy(
                up_url, protocol, MODEL[agent], WINDOW, scratch))
            target = proxy.base_url + ("/v1" if openai else "")
        # The tap relays paths unchanged, so its base URL takes the target's path prefix.
        tap = stack.enter_context(Tap(target.removesuffix("/v1")))
        client_url = tap.base_url + ("/v1" if openai else "")
        if timeout is not None and agent == "opencode":
            run = run_opencode(client_url, task.prompt, scratch, timeout)
        elif openai:
            run = RUNNERS[agent](client_url, task.prompt, scratch)
        else:
            run = run_claude(client_url, task.prompt, scratch, claude_tools)
        outcome = Outcome(agent, via_proxy, run, task, upstream, tap, decisions, proxy)
        if proxy is not None:
            outcome.sessions = stored_sessions(proxy.db_url)
        yield outcome


def stored_sessions(db_url: str) -> list[dict[str, Any]]:
    """`contextfold sessions --json` on the proxy's database, as a user would list them."""
    done = subprocess.run([*contextfold_cli(), "sessions", "--db", db_url, "--json"],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(f"contextfold sessions failed: {done.stderr}")
    data = json.loads(done.stdout)
    return list(data if isinstance(data, list) else data.get("sessions", []))


__all__ = ["PARTS", "WINDOW", "Outcome", "ledger_run", "stored_sessions"]
