"""Large sessions whose messages do not repeat, for the offline summariser's fit (issue 26).

`bench/scale_data.py` repeats one real session, whose facts dedupe away, so its compaction
folds few distinct items. This generator writes a Pi v1 session of agent-style turns with
content that never repeats: varied prose from a seeded vocabulary (about 10% of the
messages in Japanese), tool calls with their own paths and commands, and tool results of
200–5,000 characters (source code, logs, listings). Same arguments, same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def _split(words: str) -> tuple[str, ...]:
    return tuple(words.split())


_WORDS = _split(
    "parser selector theme config cache index loader router schema buffer token window "
    "session worker queue handler adapter renderer encoder decoder stream batch channel "
    "record ledger branch commit module package plugin widget layout border cursor panel "
    "migration fixture snapshot request response header payload timeout retry backoff "
    "lease revision checkpoint summary estimate budget profile prompt model provider"
)
_VERBS = _split(
    "port fix implement refactor check update read compare rename split merge move "
    "validate document measure profile trim replace extend remove"
)
_CJK = (
    "設定ファイルを確認して", "パーサーを修正します", "テストを追加してください",
    "次にキャッシュを調べて", "ログの出力を比較します", "この関数を分割したい",
    "エラーの原因を探して", "結果をまとめて",
)
_TOOLS = ("read", "bash", "edit", "write", "grep")


def _ident(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}{rng.randrange(10_000)}"


def _path(rng: random.Random) -> str:
    return (f"packages/{rng.choice(_WORDS)}-{rng.randrange(1000)}/src/"
            f"{rng.choice(_WORDS)}/{_ident(rng)}.ts")


def _sentence(rng: random.Random, cjk: bool) -> str:
    if cjk:
        return "".join(rng.choice(_CJK) for _ in range(rng.randint(1, 3))) + \
            f"（{_ident(rng)}）。"
    words = [rng.choice(_VERBS), "the", _ident(rng)]
    words += [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
    return " ".join(words).capitalize() + f" in {_path(rng)}."


def _prose(rng: random.Random, cjk: bool, sentences: tuple[int, int]) -> str:
    return " ".join(_sentence(rng, cjk) for _ in range(rng.randint(*sentences)))


def _result(rng: random.Random, tool: str) -> str:
    size = rng.randint(200, 5000)
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < size:
        if tool == "bash":
            lines.append(f"[{rng.randrange(24):02d}:{rng.randrange(60):02d}] "
                         f"{rng.choice(('INFO', 'WARN', 'DEBUG'))} {_ident(rng)} "
                         f"took {rng.randrange(9999)} ms ({rng.choice(_WORDS)})")
        else:
            lines.append(f"export function {_ident(rng)}({rng.choice(_WORDS)}: "
                         f"{rng.choice(_WORDS).capitalize()}) {{ return "
                         f"{rng.choice(_WORDS)}.{_ident(rng)}({rng.randrange(100)}); }}")
    return "\n".join(lines)[:size]


def _args(rng: random.Random, tool: str) -> dict[str, str]:
    if tool == "bash":
        return {"command": f"cd {_path(rng).rsplit('/', 1)[0]} && npm test -- {_ident(rng)}"}
    if tool == "grep":
        return {"pattern": _ident(rng), "path": _path(rng).rsplit("/", 2)[0]}
    return {"path": _path(rng)}


def varied_message(rng: random.Random) -> str:
    """One user message of agent-style text that does not repeat: one to four sentences of
    prose (about 10% Japanese) and, half the time, a pasted tool output of 200-5,000
    characters (source code or a log). Same generator state, same text."""
    cjk = rng.random() < 0.1
    text = _prose(rng, cjk, (1, 4))
    if rng.random() < 0.5:
        text += "\n\n" + _result(rng, rng.choice(_TOOLS))
    return text


def write_varied_session(path: Path, messages: int, *, seed: int = 26) -> int:
    """Write a Pi v1 session of about `messages` non-repeating message entries to `path`,
    ending at a finished assistant reply; returns the number written.

    A turn is a user request, then one to four tool rounds (an assistant message with a
    call, its result), then a final assistant reply. About 10% of the prose is Japanese.
    """
    rng = random.Random(seed)
    header = {"type": "session", "id": f"varied-{messages}-{seed}",
              "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work/project",
              "provider": "anthropic", "modelId": "claude-sonnet-4-5"}
    written, call = 0, 0
    ts = 1_767_225_600_000

    def entry(message: dict) -> str:
        nonlocal ts
        ts += rng.randrange(500, 20_000)
        return json.dumps({"type": "message", "timestamp": "2026-01-01T00:00:00.000Z",
                           "message": {**message, "timestamp": ts}}, ensure_ascii=False)

    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        while written < messages:
            cjk = rng.random() < 0.1
            turn = [entry({"role": "user", "content": [
                {"type": "text", "text": _prose(rng, cjk, (1, 3))}]})]
            for _ in range(rng.randint(1, 4)):
                tool = rng.choice(_TOOLS)
                call += 1
                cid = f"toolu_{call:08d}"
                turn.append(entry({
                    "role": "assistant", "stopReason": "toolUse",
                    "content": [{"type": "text", "text": _prose(rng, cjk, (1, 2))},
                                {"type": "toolCall", "id": cid, "name": tool,
                                 "arguments": _args(rng, tool)}]}))
                turn.append(entry({
                    "role": "toolResult", "toolCallId": cid, "toolName": tool,
                    "content": [{"type": "text", "text": _result(rng, tool)}],
                    "isError": rng.random() < 0.05}))
            turn.append(entry({"role": "assistant", "stopReason": "stop", "content": [
                {"type": "text", "text": _prose(rng, cjk, (2, 5))}]}))
            if written + len(turn) > messages and written:
                break
            for line in turn:
                out.write(line + "\n")
            written += len(turn)
    return written
