"""Agent-style OpenAI chat histories for the proxy bench: non-repeating content.

A coding agent's resent list: a user task, then rounds of an assistant tool call (read a file,
run the tests), its tool result (real Python source from the standard library, a generated
test log) and a short assistant note. Every message differs from every other (each window of
each file is read once, logs carry their round), so nothing dedupes or compresses away. Sizes are in
tokens at 4 characters a token, like the rest of the proxy bench.
"""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _sources() -> Iterator[tuple[str, str]]:
    """(relative path, text) of the standard library's Python files, in a stable order."""
    for path in sorted(_STDLIB.rglob("*.py")):
        if "test" in path.parts or "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) > 400:
            yield str(path.relative_to(_STDLIB)), text


def _log(round_: int, lines: int) -> str:
    out = []
    for i in range(lines):
        status = "PASSED" if (i * 7 + round_) % 11 else "FAILED"
        out.append(f"tests/test_mod{round_}_{i}.py::test_case_{i * 3 + round_} {status} "
                   f"[{(i * 100) // max(lines, 1):3d}%] in {0.01 * (i + round_ % 13):.2f}s")
    return "\n".join(out)


def history(tokens: int, tag: str, *, chunk: int = 5_200) -> list[dict[str, Any]]:
    """A resent agent history of about `tokens` tokens (system prompt first), ending with a
    user message; `tag` makes histories of different clients differ from their first
    message. `chunk`: characters of each file read (the size of a tool result)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools to read, search "
                                      "and test the repository; answer briefly."},
        {"role": "user", "content": f"[{tag}] Review the standard library modules one by one "
                                    "and note anything surprising."}]
    total = sum(len(m["content"]) for m in msgs)
    # Each file read in successive windows of `chunk` characters: never the same text twice.
    sources = ((path, text[i:i + chunk]) for path, text in _sources()
               for i in range(0, len(text) - 200, chunk))
    round_ = 0
    while total < tokens * 4:
        call_id = f"call_{tag}_{round_}"
        if round_ % 4 == 3:
            name, args = "run_tests", {"k": f"mod{round_}"}
            result = _log(round_, 50)
        else:
            path, result = next(sources)
            name, args = "read_file", {"path": path, "limit": chunk}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": result})
        note = f"Round {round_}: {name} {args} returned {len(result)} characters; moving on."
        msgs.append({"role": "assistant", "content": note})
        msgs.append({"role": "user", "content": f"[{tag}] ok, continue ({round_})"})
        total += len(result) + len(note) + 120
        round_ += 1
    return msgs


TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} in the repository",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                    "k": {"type": "string"}}}}}
    for name in ("read_file", "run_tests", "grep")]
