"""Large recorded sessions for the scale benchmarks, generated deterministically.

A real Pi session from `tests/fixtures/pi-mono` (v1: entries in file order, no ids) is
repeated until the file holds the number of messages asked for. Each repetition renames
the tool-call ids (`toolu_…` → `toolu_…_r<k>`) so every call still pairs with its own
result, and the header gets an id naming the size, so two generated files can be imported
into one database. Same arguments, same bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from contextfold.core.models.catalog import capacity_for

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pi-mono" / \
    "large-session.jsonl"
# The model every scale benchmark sizes for (the recorded session's own model).
CAPACITY = capacity_for("claude-sonnet-4-5")
_CALL_ID = re.compile(r'"(toolu_[A-Za-z0-9]+|call_[A-Za-z0-9|_-]+)"')
_USAGE = re.compile(r',"usage":\{"input".*?"total":[0-9.e-]+\}\}')


def _source_lines() -> tuple[dict, list[str]]:
    lines = SOURCE.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    body = [ln for ln in lines[1:] if '"type":"message"' in ln]
    return header, body


def _settled(line: str) -> bool:
    """A finished assistant reply without tool calls: a file may end there (stable)."""
    msg = json.loads(line)["message"]
    return (msg.get("role") == "assistant" and msg.get("stopReason") == "stop"
            and not any(b.get("type") == "toolCall" for b in msg.get("content", [])))


def write_session(path: Path, messages: int, *, usage: bool = True,
                  same_end_as: int | None = None) -> int:
    """Write a Pi v1 session of at most `messages` message entries to `path`, ending at a
    finished reply (so the session is stable); returns the number written.

    `same_end_as=n`: end where a session of `n` messages ends, with whole repetitions
    before it, so sessions of every size share their last messages (a check or a page
    then reads the same content at every size, and only the history's length differs).

    `usage=False` strips every reply's provider usage (what a local server that reports
    none produces), so estimates cannot use a usage baseline.
    """
    header, body = _source_lines()
    ends = [i + 1 for i, line in enumerate(body) if _settled(line)]
    reps, rest = divmod(messages, len(body))
    if same_end_as is not None:
        rest = same_end_as % len(body)
        reps = round(max(0, messages - rest) / len(body))
    last = max((e for e in ends if e <= rest), default=0)
    if last == 0:  # end at the previous repetition's last finished reply
        reps, last = reps - 1, ends[-1]
    header = {**header, "id": f"bench-{messages}-{'u' if usage else 'n'}"}
    written = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for rep in range(reps + 1):
            for line in body[: len(body) if rep < reps else last]:
                line = _CALL_ID.sub(lambda m, r=rep: f'"{m.group(1)}_r{r}"', line)
                if not usage:
                    line = _USAGE.sub("", line)
                out.write(line + "\n")
                written += 1
    return written
