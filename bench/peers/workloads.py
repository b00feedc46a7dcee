"""Real transcripts -> neutral workloads (project venv: uses contextfold's importers).

`contextfold.formats.import_file` reads the Pi and Claude Code files; the messages of the
active branch (recorded checkpoints left out, so the whole uncompacted conversation is
replayed) become neutral messages, one per message and one per tool result, so every
system replays exactly the same conversation.

The workload is made a *valid* history first, so an invalid request can only come from the
system under test: tool calls of errored/aborted replies are void (they never got a result),
and results whose call is not on the branch are orphans of the recording. Both are dropped
and counted in `cleaned`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contextfold.core.values.messages import RESOURCE_PART_TYPES as _RESOURCES
from contextfold.core.values.messages import FilePart, Message, TextPart
from contextfold.core.values.resources import render_resource
from contextfold.core.values.tree import Branch, build_branch
from contextfold.formats import import_file

from .common import REPO_ROOT, Neutral, call_points, neutral

FIXTURES = REPO_ROOT / "tests" / "fixtures"
TRANSCRIPTS = (
    ("pi-large", FIXTURES / "pi-mono" / "large-session.jsonl"),
    ("cc-258c7280", FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"),
    ("cc-ae4a77f8", FIXTURES / "claude-code" / "ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl"),
    ("cc-tool_heavy", FIXTURES / "claude-code" / "tool_heavy.jsonl"),
    ("cc-short", FIXTURES / "claude-code" / "short.jsonl"),
)


def active_messages(path: Path) -> list[Message]:
    """The messages on the imported session's active branch, oldest first."""
    return [m for m, _ in timed_messages(path)]


def timed_messages(path: Path) -> list[tuple[Message, float]]:
    """The active branch's messages with when each was recorded (seconds from the first):
    the transcript's own timestamps, so the prompt cache's time to live is priced as the
    session really ran."""
    result = import_file(path)
    branch = build_branch(result.nodes, result.leaf_id)
    nodes = [n for n in (branch.nodes if isinstance(branch, Branch) else branch.readable)
             if isinstance(n.payload, Message)]
    if not nodes:
        return []
    start = nodes[0].created_at
    return [(n.payload, (n.created_at - start).total_seconds()) for n in nodes]


def _extras(msg: Message) -> list[str]:
    out: list[str] = []
    for part in msg.parts:
        if isinstance(part, _RESOURCES):
            out.append(render_resource(part))  # type: ignore[arg-type]
        elif isinstance(part, FilePart):
            out.append(f"[attached file: {part.name} ({part.media_type})]")
    return out


def to_neutral(messages: Sequence[Message], times: Sequence[float] | None = None
               ) -> tuple[list[Neutral], dict[str, int]]:
    """contextfold messages -> neutral messages (with markers), and what was cleaned.
    `times`: when each message was recorded (seconds), carried as the neutral `t`."""
    answered = {r.call_id for m in messages for r in m.tool_results}
    issued: set[str] = set()
    names: dict[str, str] = {}
    cleaned = {"void_calls": 0, "orphan_results": 0}
    out: list[Neutral] = []
    for n_msg, msg in enumerate(messages):
        at = times[n_msg] if times is not None else None
        texts = [p.text for p in msg.parts if isinstance(p, TextPart) and p.text.strip()]
        if msg.role == "tool":
            extras = _extras(msg)
            for n, result in enumerate(msg.tool_results):
                if result.call_id not in issued:
                    cleaned["orphan_results"] += 1
                    continue
                body = result.output
                if n == len(msg.tool_results) - 1:
                    body = "\n\n".join([body, *extras]) if extras else body
                out.append(neutral(len(out), "tool", body or "(no output)",
                                   call_id=result.call_id,
                                   tool_name=result.name or names.get(result.call_id),
                                   is_error=result.is_error or result.denied, t=at))
            continue
        body = "\n\n".join(texts + _extras(msg))
        if msg.role != "assistant":
            out.append(neutral(len(out), msg.role, body, t=at))
            continue
        calls = []
        for c in msg.tool_calls:
            if msg.is_closed_without_result or c.id not in answered or c.id in issued:
                cleaned["void_calls"] += 1
                continue
            issued.add(c.id)
            names[c.id] = c.name
            calls.append({"id": c.id, "name": c.name, "args": c.input})
        usage = None
        if msg.usage is not None and msg.status == "complete" and msg.usage.prompt > 0:
            usage = {"prompt": msg.usage.prompt, "output": msg.usage.output,
                     "model": msg.usage.model or msg.model or ""}
        out.append(neutral(len(out), "assistant", body, calls=calls, usage=usage, t=at))
    return out, cleaned


def intervals(msgs: Sequence[Neutral]) -> list[dict[str, Any]]:
    """Ground truth for the estimator figure: between two consecutive model calls with valid
    usage from the same model, the prompt growth minus the first call's output is the real
    token count of the messages added in between (`msgs[start:end]`)."""
    out: list[dict[str, Any]] = []
    points = call_points(msgs)
    for a, b in itertools.pairwise(points):
        ua, ub = msgs[a]["usage"], msgs[b]["usage"]
        if not ua or not ub or ua["model"] != ub["model"] or b - a < 2:
            continue
        real = ub["prompt"] - ua["prompt"] - ua["output"]
        if real > 0:
            out.append({"start": a + 1, "end": b, "real": real, "model": ub["model"]})
    return out


def build_transcript_workload(name: str, path: Path) -> dict[str, Any]:
    """One real transcript as a workload, with its estimator intervals."""
    timed = timed_messages(path)
    msgs, cleaned = to_neutral([m for m, _ in timed], [t for _, t in timed])
    return {
        "name": name,
        "source": str(path.relative_to(REPO_ROOT)),
        "messages": msgs,
        "calls": len(call_points(msgs)),
        "cleaned": cleaned,
        "intervals": intervals(msgs),
    }


def write_workloads(directory: Path, synth_messages: int) -> list[dict[str, Any]]:
    """Write every workload as JSON into `directory`; return name, path and size of each."""
    from .synth import research_session

    directory.mkdir(parents=True, exist_ok=True)
    built = [build_transcript_workload(name, path) for name, path in TRANSCRIPTS]
    synth = research_session(synth_messages)
    built.append({
        "name": f"synth-research-{synth_messages}",
        "source": "bench/peers/synth.py (Zotero records from tests/fixtures/zotero)",
        "messages": synth,
        "calls": len(call_points(synth)),
        "cleaned": {"void_calls": 0, "orphan_results": 0},
        "intervals": [],
    })
    out = []
    for w in built:
        path = directory / f"{w['name']}.json"
        path.write_text(json.dumps(w, ensure_ascii=False), encoding="utf-8")
        out.append({"name": w["name"], "path": str(path), "source": w["source"],
                    "messages": len(w["messages"]), "calls": w["calls"],
                    "cleaned": w["cleaned"], "intervals": len(w["intervals"])})
    return out
