"""The long task the real agents perform, and the scripted model that drives it.

The agent is asked to audit a ledger split into `parts` files in a scratch directory. The
scripted model reads them one per turn with the agent's own shell tool (`cat`), then answers
with the seal printed at the end of the last part. Every part is a few thousand tokens, so the
agent's history passes 150k tokens long before the end, far over a 32k upstream window.

The model is stateless: it decides each step from the request alone, because the agent or the
proxy may have replaced the older turns with a summary by then. The latest tool result
always carries an `END OF PART i OF n` marker; without one (a fresh task, or a continuation
after a compaction) the highest marker anywhere in the request says where to resume. A
request that offers no shell tool (a summarisation or title request) gets a progress note
that repeats the highest marker, so a summary written from it still says where the work was.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakeserver import Reply, ToolCallSpec
from tests.fakeserver.responses import chat_view
from tests.fakeserver.tokens import _content_text

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
          "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
          "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu")
MARKER = re.compile(r"END OF PART (\d+) OF (\d+) - seal: (S\d+-[0-9a-f]{10})")
SHELL_TOOLS = ("bash", "Bash", "exec_command")  # Pi, Claude Code, Codex
FINAL_PREFIX = "AUDIT COMPLETE"


def seal(part: int) -> str:
    """The seal printed at the end of `part` (what the final answer must quote for the last)."""
    return f"S{part:02d}-" + hashlib.sha256(f"ledger-part-{part}".encode()).hexdigest()[:10]


@dataclass(frozen=True)
class LedgerTask:
    """A scratch directory of ledger parts and the prompt that asks the agent to audit it."""

    root: Path
    parts: int = 40
    rows: int = 130

    def write(self) -> LedgerTask:
        """Generate the parts (deterministic: the same seed gives the same bytes)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for part in range(1, self.parts + 1):
            rng = random.Random(part)
            lines = [f"LEDGER PART {part} OF {self.parts}"]
            for row in range(self.rows):
                memo = " ".join(rng.choice(_WORDS) for _ in range(8))
                lines.append(f"row {part:02d}-{row:04d}: account ACCT-{rng.randint(10000, 99999)}"
                             f" amount {rng.randint(100, 99999)}.{rng.randint(0, 99):02d}"
                             f" memo {memo}")
            lines.append(f"END OF PART {part} OF {self.parts} - seal: {seal(part)}")
            self.path(part).write_text("\n".join(lines) + "\n")
        return self

    def path(self, part: int) -> Path:
        return self.root / f"part_{part:02d}.txt"

    @property
    def prompt(self) -> str:
        return (f"Audit the ledger in {self.root}: read every part file (part_01.txt to "
                f"part_{self.parts:02d}.txt) in order with the shell, then report the seal "
                "printed at the end of the last part.")

    @property
    def expected_answer(self) -> str:
        """What the final answer must contain."""
        return f"{FINAL_PREFIX} {self.parts}/{self.parts} seal {seal(self.parts)}"

    # ------------------------------------------------------------------ the scripted model

    def respond(self, protocol: str, body: dict[str, Any]) -> Reply:
        """The model's next move, decided from this request alone (see the module docstring)."""
        if protocol == "responses":  # Codex: read the Responses items as chat messages
            body, protocol = chat_view(body), "openai"
        tool = _shell_tool(body)
        if tool is None or _asks_for_summary(protocol, body):
            return Reply(text=_progress_note(body))
        latest = _latest_tool_output(protocol, body)
        found = MARKER.findall(latest) if latest else []
        if not found:
            found = MARKER.findall(_request_text(body))
        done = max((int(p) for p, _, _ in found), default=0)
        if done >= self.parts:
            last = next(s for p, _, s in found if int(p) == self.parts)
            return Reply(text=f"{FINAL_PREFIX} {self.parts}/{self.parts} seal {last}")
        command = f"cat {self.path(done + 1)}"
        arguments: dict[str, Any] = {"cmd" if tool == "exec_command" else "command": command}
        if tool == "Bash":
            arguments["description"] = f"Read ledger part {done + 1}"
        return Reply(text=f"Reading part {done + 1}.", tool_calls=(ToolCallSpec(tool, arguments),))


def _tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for spec in body.get("tools") or []:
        fn = spec.get("function") if isinstance(spec.get("function"), dict) else spec
        names.append(str(fn.get("name", "")))
    return names


def _shell_tool(body: dict[str, Any]) -> str | None:
    names = _tool_names(body)
    return next((n for n in SHELL_TOOLS if n in names), None)


def _latest_tool_output(protocol: str, body: dict[str, Any]) -> str:
    """Text of the tool results in the request's last message ("" when it holds none)."""
    messages = body.get("messages") or []
    if not messages:
        return ""
    last = messages[-1]
    if protocol == "openai":
        # Parallel results arrive as several trailing `tool` messages.
        tail = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            tail.append(_content_text(message.get("content")))
        return "\n".join(reversed(tail))
    content = last.get("content")
    if last.get("role") != "user" or not isinstance(content, list):
        return ""
    return "\n".join(_content_text(b.get("content")) for b in content
                     if isinstance(b, dict) and b.get("type") == "tool_result")


def _asks_for_summary(protocol: str, body: dict[str, Any]) -> bool:
    """An agent's own compaction request: it may keep the tools (for its prompt cache) but
    its last message is the user-side instruction to summarise, not a tool result."""
    if _latest_tool_output(protocol, body):
        return False
    messages = body.get("messages") or []
    last = _content_text(messages[-1].get("content")) if messages else ""
    return "summar" in last.lower() and not MARKER.search(last)


def _request_text(body: dict[str, Any]) -> str:
    parts = [_content_text(body.get("system"))]
    parts += [_content_text(m.get("content")) for m in body.get("messages") or []]
    parts += [json.dumps(m.get("tool_calls")) for m in body.get("messages") or []
              if m.get("tool_calls")]
    return "\n".join(p for p in parts if p)


def _progress_note(body: dict[str, Any]) -> str:
    found = MARKER.findall(_request_text(body))
    if not found:
        return "Progress: no ledger part has been read yet."
    part, total, last_seal = max(found, key=lambda m: int(m[0]))
    return (f"Progress so far: ledger parts 1 to {part} of {total} were read in order. "
            f"Last marker seen: END OF PART {part} OF {total} - seal: {last_seal}. "
            "Next: read the following part.")
