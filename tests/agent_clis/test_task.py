"""The ledger task itself: big enough, and a stateless script that survives compaction."""

from __future__ import annotations

from pathlib import Path

from tests.fakeserver.tokens import count_text

from .scenario import PARTS, WINDOW
from .task import LedgerTask, seal


def _task(tmp_path: Path) -> LedgerTask:
    return LedgerTask(tmp_path / "ledger", parts=PARTS).write()


def _openai_turns(task: LedgerTask, upto: int) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": task.prompt}]
    for part in range(1, upto + 1):
        call = {"id": f"c{part}", "type": "function",
                "function": {"name": "bash", "arguments": "{}"}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{part}",
                      "content": task.path(part).read_text()}]
    return messages


TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def test_history_exceeds_150k_tokens_and_every_part_fits_the_window(tmp_path: Path) -> None:
    task = _task(tmp_path)
    sizes = [count_text(task.path(p).read_text()) for p in range(1, PARTS + 1)]
    assert PARTS >= 30
    assert sum(sizes) > 150_000
    # One part plus an agent's fixed overhead must fit, or no proxy could help.
    assert max(sizes) < WINDOW // 4


def test_script_reads_parts_in_order_then_answers_the_last_seal(tmp_path: Path) -> None:
    task = _task(tmp_path)
    first = task.respond("openai", {"messages": _openai_turns(task, 0), "tools": TOOLS})
    assert first.tool_calls[0].arguments["command"].endswith("part_01.txt")
    nxt = task.respond("openai", {"messages": _openai_turns(task, 7), "tools": TOOLS})
    assert nxt.tool_calls[0].arguments["command"].endswith("part_08.txt")
    last = task.respond("openai", {"messages": _openai_turns(task, PARTS), "tools": TOOLS})
    assert not last.tool_calls and last.text == task.expected_answer
    assert seal(PARTS) in task.expected_answer and seal(PARTS - 1) not in task.expected_answer


def test_script_resumes_after_a_compaction_from_the_latest_tool_result(tmp_path: Path) -> None:
    task = _task(tmp_path)
    turns = _openai_turns(task, 12)
    # A compacted request: a summary that says nothing useful, then the recent turns verbatim.
    compacted = [{"role": "user", "content": "Summary: auditing a ledger."}, *turns[-4:]]
    reply = task.respond("openai", {"messages": compacted, "tools": TOOLS})
    assert reply.tool_calls[0].arguments["command"].endswith("part_13.txt")
    # After an agent's own compaction the last message is the user's: resume from its marker.
    asks = {"role": "user", "content": "Summarise the conversation so far."}
    note = task.respond("openai", {"messages": [*turns, asks], "tools": TOOLS})
    assert not note.tool_calls and "END OF PART 12 OF 40" in (note.text or "")
    resumed = task.respond("openai", {"messages": [
        {"role": "user", "content": task.prompt + "\n" + (note.text or "")}], "tools": TOOLS})
    assert resumed.tool_calls[0].arguments["command"].endswith("part_13.txt")


def test_script_reads_anthropic_tool_results(tmp_path: Path) -> None:
    task = _task(tmp_path)
    body = {"tools": [{"name": "Bash", "input_schema": {}}], "messages": [
        {"role": "user", "content": task.prompt},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text",
                                                   "text": task.path(3).read_text()}]}]},
    ]}
    reply = task.respond("anthropic", body)
    assert reply.tool_calls[0].name == "Bash"
    assert reply.tool_calls[0].arguments["command"].endswith("part_04.txt")
