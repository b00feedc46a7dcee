"""The real Claude Code CLI recalls a folded fact through `contextfold mcp` (SPEC L2, L4, L6).

Claude Code runs the ledger task through `contextfold proxy` on a 32k upstream with the MCP
server configured (`--mcp-config`, the same server `claude mcp add contextfold -- contextfold
mcp` adds). The history outgrows the window, the proxy folds the first parts into a
checkpoint, and at the end the scripted model needs a row of part 1 that no forwarded
request holds any more: it calls `mcp__contextfold__history_search`, Claude Code runs the
tool through the MCP server, which finds the proxy's session of this agent and returns the
original row, and the model answers with the amount the tool returned.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.fakeserver import Reply, ToolCallSpec, fake_server

from .clis import CLAUDE_MODEL, ROOT, run_claude
from .proxy_process import running_proxy
from .scenario import WINDOW
from .tap import Tap
from .task import FINAL_PREFIX, LedgerTask, _latest_tool_output, _tool_names

pytestmark = pytest.mark.slow

PARTS = 14  # ~46k tokens of tool output: the first parts are folded on a 32k window
ROW = "01-0042"
ROW_LINE = re.compile(rf"row {ROW}: account (ACCT-\d+) amount (\d+\.\d\d)")
FOUND_BY = re.compile(r'found_by\\*": *\\*"([^"\\]+)')


class RecallTask(LedgerTask):
    """The ledger task, then one more question only recall can answer: row 01-0042's amount."""

    searched: list[dict[str, Any]]

    @property
    def prompt(self) -> str:
        return super().prompt + f" Also report the amount on row {ROW} of part 1."

    def truth(self) -> str:
        match = ROW_LINE.search(self.path(1).read_text())
        assert match is not None
        return match.group(2)

    def respond(self, protocol: str, body: dict[str, Any]) -> Reply:
        search = next((n for n in _tool_names(body) if n.endswith("history_search")), None)
        latest = _latest_tool_output(protocol, body)
        found = ROW_LINE.search(latest) if latest and '"matches"' in latest else None
        if found is not None:  # the recall tool's result: answer with what it returned
            base = super().respond(protocol, body)
            seal_text = (base.text or "") if (base.text or "").startswith(FINAL_PREFIX) else ""
            return Reply(text=f"{seal_text} amount on row {ROW}: {found.group(2)}".strip())
        reply = super().respond(protocol, body)
        if (reply.text or "").startswith(FINAL_PREFIX) and search is not None:
            self.searched.append(body)
            return Reply(text="Searching the history for the folded row.",
                         tool_calls=(ToolCallSpec(search, {"query": ROW}),))
        return reply


def test_l2_claude_code_calls_history_search_over_mcp_and_finds_a_folded_row(
        tmp_path: Path, agent_installed: Callable[[str], Path]) -> None:
    agent_installed("claude")
    task = RecallTask(tmp_path / "ledger", parts=PARTS).write()
    task.searched = []
    with ExitStack() as stack:
        upstream = stack.enter_context(fake_server(context_window=WINDOW,
                                                   count_max_tokens=True))
        upstream.respond_with(task.respond)
        proxy = stack.enter_context(running_proxy(upstream.anthropic_url, "anthropic",
                                                  CLAUDE_MODEL, WINDOW, tmp_path))
        tap = stack.enter_context(Tap(proxy.base_url))
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"contextfold": {
            "command": sys.executable,
            "args": ["-m", "contextfold", "mcp", "--db", proxy.db_url,
                     "--model-window", f"{CLAUDE_MODEL}={WINDOW}"],
            "env": {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))},
        }}}))
        run = run_claude(tap.base_url, task.prompt, tmp_path,
                         extra=["--mcp-config", str(config), "--strict-mcp-config"])
        why = f"{run.describe()}\nproxy log: {proxy.log_text()[-3000:]}"
        assert run.returncode == 0, why
        # The agent offered the MCP tools; the proxy named them in the recall note (L6).
        chats = [r for r in upstream.requests if not r.is_summary]
        assert any("mcp__contextfold__history_search" in _tool_names(r.body) for r in chats)
        noted = [r for r in chats if "[contextfold checkpoint]" in json.dumps(r.body)]
        assert noted, why  # the proxy folded the history
        assert "mcp__contextfold__history_search" in json.dumps(noted[-1].body["messages"]), why
        # When the model searched, the row was folded: no forwarded request held it.
        assert task.searched, why
        assert not ROW_LINE.search(json.dumps(task.searched[-1])), why
        # The answer has the amount the MCP tool returned from the folded part (L2, L4).
        assert f"amount on row {ROW}: {task.truth()}" in run.answer, why
        # The server found the proxy's session by the directory Claude Code works in (L7).
        found_by = {m for r in chats for m in FOUND_BY.findall(json.dumps(r.body))}
        assert found_by == {f"working directory {tmp_path}"}, (found_by, why)
