"""Continuity benchmark (issue 11): what the model still sees after K = 1…20 compactions.

Run: `.venv/bin/python -m bench.continuity` (part of `make bench`; writes
bench/results/continuity.json and prints a table). Deterministic: scripted sessions, a
scripted local model, the offline summariser (and, as a lower bound, an "LLM" summariser
whose model remembers nothing: only the ledger carries identifiers through it).

Each session (a synthetic 60-turn Zotero research session with tool results of 2-6k
tokens, `contextfold.evaluate.research`, and the first 60 turns of the real Pi transcript,
`bench.continuity_sessions`) is driven
through the public path — `Conversation.send` with the model's tool calls run by a
`run_tools` callback, compaction automatic (SPEC A1) — on gpt-4o with a catalog override of
its window (16k, 32k; 128k is its real window). At 128k a session compacts on its own only
every ~20 turns; so that every window reaches K = 20 in a bounded run, the benchmark asks
for a manual compaction (`Conversation.compact()`) after `CADENCE` turns without one.

After compaction k, every fact planted in a turn that is no longer raw in the projection
(its user message was compacted) is checked: is its exact text in what the next request
would carry (checkpoint summary + identifier ledger + raw messages)? Continuation is only
checked for the latest compacted turn (the current next step, not every old one).
`reachable_by_recall` is left None: it is filled by the recall work (issue 11, SPEC L)
through `recall_probe` once the store can search the history.
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.continuity_sessions import real_session
from contextfold.core.models.catalog import capacity_for, default_catalog
from contextfold.core.recall.recall_text import message_text
from contextfold.core.values.messages import (
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    text_message,
)
from contextfold.core.view.projection import Projection, checkpoint_text
from contextfold.evaluate.facts import CATEGORIES, Fact, ScriptedTurn, Session
from contextfold.evaluate.research import research_session
from contextfold.providers.base import ChatRequest, ChatResponse
from contextfold.runtime import Conversation
from contextfold.store import InvalidOperationError, open_store
from contextfold.summarize.llm import LlmSummarizer
from contextfold.summarize.prompts import PROGRESS_SECTION, sections_for

RESULTS = Path(__file__).parent / "results" / "continuity.json"
WINDOWS = (16_000, 32_000, 128_000)
MAX_K = 20
CADENCE = 3  # turns without a compaction before the benchmark asks for one (128k)
MODEL = "gpt-4o"


# --------------------------------------------------------------------------- the model


class ScriptedModel:
    """A local chat model that plays the session's assistant side, turn by turn.

    Summary requests (SPEC S1: a "context summarisation assistant") get a valid checkpoint
    that remembers nothing specific (one vague bullet per section, no identifier, number or
    quote): the lower bound of an LLM summariser, where only the ledger carries facts.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.replies: deque[Message] = deque()
        self.summary_requests = 0

    def script(self, t: int, turn: ScriptedTurn) -> None:
        for i, r in enumerate(turn.rounds):
            parts: list[Any] = [TextPart(text=r.text)] if r.text else []
            parts.append(ToolCallPart(id=f"call_{t}_{i}", name=r.name, input=r.arguments))
            self.replies.append(Message(role="assistant", parts=tuple(parts)))
        self.replies.append(text_message("assistant", turn.reply))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if request.system and "context summarisation assistant" in request.system:
            self.summary_requests += 1
            profile = "research" if "Research Goal" in request.pending[-1].text else "coding"
            return ChatResponse(message=text_message("assistant", _empty_summary(profile)),
                                stop_reason="end_turn")
        reply = self.replies.popleft()
        stop = "tool_use" if reply.tool_calls else "end_turn"
        return ChatResponse(message=reply, stop_reason=stop)

    def stream(self, request: ChatRequest) -> Any:  # pragma: no cover - never streamed here
        raise NotImplementedError("the benchmark does not stream")


def _empty_summary(profile: str) -> str:
    lines: list[str] = []
    for name in sections_for(profile):  # type: ignore[arg-type]
        lines.append(f"## {name}")
        if name == PROGRESS_SECTION[profile]:
            for sub in ("Done", "In Progress", "Blocked"):
                lines += [f"### {sub}", "- (inferred) work went on as the conversation shows"]
        else:
            lines.append("- (inferred) as discussed in the conversation")
        lines.append("")
    return "\n".join(lines).strip()


def _tool_runner(session: Session) -> Callable[..., Any]:
    results: dict[str, tuple[str, bool]] = {}
    for t, turn in enumerate(session.turns):
        for i, r in enumerate(turn.rounds):
            results[f"call_{t}_{i}"] = (r.output, r.is_error)

    async def run_tools(calls: Sequence[ToolCallPart]) -> list[Message]:
        out = []
        for call in calls:
            output, error = results[call.id]
            out.append(Message(role="tool", parts=(ToolResultPart(
                call_id=call.id, name=call.name, output=output, is_error=error),)))
        return out

    return run_tools


# --------------------------------------------------------------------------- measuring


def projection_text(projection: Projection) -> str:
    """Everything the next request carries besides system prompt and tools, as text."""
    parts = [checkpoint_text(projection.summary)] if projection.summary else []
    for node in projection.messages:
        msg = node.message
        if msg is None:
            continue
        parts.append(msg.text)
        parts += [json.dumps(c.input, ensure_ascii=False) for c in msg.tool_calls]
        parts += [r.output for r in msg.tool_results]
    return "\n".join(parts)


def _message_texts(msg: Message) -> str:
    """A stored message as the probe looks at it: text, tool arguments and tool output."""
    parts = [msg.text, message_text(msg)]
    parts += [json.dumps(c.input, ensure_ascii=False) for c in msg.tool_calls]
    parts += [r.output for r in msg.tool_results]
    return "\n".join(parts)


async def recall_probe(conv: Conversation, fact: Fact) -> bool:
    """Whether `fact` is reachable through recall (SPEC L): a search of the session's own
    branch for the fact's words (what the model's `history_search` runs) returns a message
    that holds the fact verbatim."""
    try:
        hits = await conv.store.search_history(conv.session_id, fact.text, limit=20)
    except InvalidOperationError:
        return False
    return any(h.node.message is not None and fact.text in _message_texts(h.node.message)
               for h in hits)


async def measure(conv: Conversation, session: Session, played: int, k: int,
            trigger: str) -> dict[str, Any]:
    """Per category: compacted facts planted so far, and how many the projection holds."""
    projection = conv.projection()
    visible = projection_text(projection)
    raw_users = {n.message.text.strip() for n in projection.messages
                 if n.message is not None and n.message.role == "user"}
    compacted = [t for t in range(played) if session.turns[t].user not in raw_users]
    facts = [f for t in compacted for f in session.turns[t].facts if f.category != "continuation"]
    if compacted:
        facts += [f for f in session.turns[compacted[-1]].facts if f.category == "continuation"]
    row: dict[str, Any] = {"k": k, "turn": played, "trigger": trigger,
                           "compacted_turns": len(compacted)}
    groups = {c: [f for f in facts if f.category == c] for c in CATEGORIES}
    groups["identifiers"] = [f for f in facts if f.identifier]
    for name, group in groups.items():
        kept = [f for f in group if f.text in visible]
        reachable = [await recall_probe(conv, f) for f in group]
        row[name] = {
            "total": len(group),
            "in_projection": len(kept),
            "reachable_by_recall": sum(1 for r in reachable if r),
            "missing": [f.text for f in group if f.text not in visible][:5],
        }
    return row


# --------------------------------------------------------------------------- running


async def run_one(session: Session, window: int, summarizer: str, db_dir: Path
                  ) -> dict[str, Any]:
    catalog = default_catalog().with_overrides({MODEL: {"context_window": window}})
    capacity = capacity_for(MODEL, catalog=catalog)
    model = ScriptedModel(MODEL)
    store = await open_store(f"sqlite:///{db_dir / f'{session.name}-{window}-{summarizer}.db'}")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        conv = await Conversation.open(
            store, model=model, capacity=capacity, system=session.system,
            run_tools=_tool_runner(session), max_tool_rounds=10_000,
            summarizer=LlmSummarizer(model, capacity) if summarizer == "llm-remembers-nothing"
            else None)
        k, quiet = 0, 0
        for t, turn in enumerate(session.turns):
            model.script(t, turn)
            await conv.send(turn.user)
            await conv.wait_idle()
            now = await _checkpoints(conv)
            trigger = "auto"
            if now == k:
                quiet += 1
                if quiet >= CADENCE:
                    outcome = await conv.compact()
                    trigger = "manual"
                    now = await _checkpoints(conv) if outcome.status == "compacted" else now
            for kk in range(k + 1, now + 1):
                if kk <= MAX_K:
                    rows.append(await measure(conv, session, t + 1, kk, trigger))
            if now > k:
                k, quiet = now, 0
            if k >= MAX_K:
                break
        await conv.close()
    finally:
        await store.close()
    return {"session": session.name, "window": window, "summarizer": summarizer,
            "safe_input_limit": conv.budget.safe_input_limit,
            "ledger_cap": conv.budget.ledger_budget, "seconds": round(
                time.perf_counter() - started, 1), "rows": rows}


async def _checkpoints(conv: Conversation) -> int:
    history = await conv.history()
    return sum(1 for n in history.nodes if n.checkpoint is not None)


def _share(rows: list[dict[str, Any]], category: str) -> float | None:
    total = sum(r[category]["total"] for r in rows)
    kept = sum(r[category]["in_projection"] for r in rows)
    return None if total == 0 else kept / total


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Share in the projection per window, summariser and category, at K = 1, 5, 10, 20
    (pooled over sessions), and the issue's goals."""
    table: dict[str, Any] = {}
    for window in WINDOWS:
        for summarizer in sorted({r["summarizer"] for r in runs}):
            these = [r for r in runs if r["window"] == window and r["summarizer"] == summarizer]
            per_k: dict[str, Any] = {}
            for k in (1, 5, 10, 20):
                rows = [row for r in these for row in r["rows"] if row["k"] == k]
                per_k[f"K={k}"] = {c: _share(rows, c) for c in (*CATEGORIES, "identifiers")}
            worst = [row for r in these for row in r["rows"]]
            per_k["worst K<=20"] = {
                c: min((row[c]["in_projection"] / row[c]["total"] for row in worst
                        if row[c]["total"]), default=None)
                for c in (*CATEGORIES, "identifiers")}
            table[f"{window // 1000}k/{summarizer}"] = per_k
    offline = "offline"
    at32 = table[f"32k/{offline}"]["K=10"]
    goals = {
        "identifiers at 32k after 10 compactions >= 95%": at32["identifiers"],
        "constraints at 32k after 10 compactions = 100%": at32["constraint"],
        "identifiers at 16k (worst K<=20) >= 90%": table[f"16k/{offline}"]["worst K<=20"][
            "identifiers"],
    }
    reach = [row[c]["reachable_by_recall"] / row[c]["total"] for r in runs for row in r["rows"]
             for c in (*CATEGORIES, "identifiers") if row[c]["total"]]
    goals["reachable by recall at every window and K = 100%"] = min(reach, default=None)
    met = {
        "identifiers_32k_k10": (at32["identifiers"] or 0) >= 0.95,
        "constraints_32k_k10": at32["constraint"] == 1.0,
        "identifiers_16k": (goals["identifiers at 16k (worst K<=20) >= 90%"] or 0) >= 0.90,
        "reachable_by_recall": goals["reachable by recall at every window and K = 100%"] == 1.0,
    }
    return {"table": table, "goals": goals, "met": met}


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    quick = "--quick" in argv
    sessions = [research_session(60 if not quick else 30), real_session("pi", 60)]
    summarizers = ("offline",) if quick else ("offline", "llm-remembers-nothing")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for session in sessions:
            for window in WINDOWS:
                for summarizer in summarizers:
                    run = asyncio.run(run_one(session, window, summarizer, Path(tmp)))
                    runs.append(run)
                    last = run["rows"][-1] if run["rows"] else {}
                    ids = last.get("identifiers", {})
                    print(f"{session.name:12} {window // 1000:>4}k {summarizer:22} "
                          f"K={last.get('k', 0):>2} identifiers {ids.get('in_projection')}/"
                          f"{ids.get('total')}  {run['seconds']} s", file=sys.stderr)
    report = {
        "benchmark": "continuity",
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "model": MODEL, "windows": list(WINDOWS), "max_k": MAX_K, "cadence": CADENCE,
        "sessions": [{"name": s.name, "turns": len(s.turns),
                      "facts": {c: sum(1 for f in s.facts if f.category == c)
                                for c in CATEGORIES}} for s in sessions],
        **summarise(runs),
        "seconds": {f"{r['session']}/{r['window'] // 1000}k/{r['summarizer']}": r["seconds"]
                    for r in runs},
        "median_run_seconds": statistics.median(r["seconds"] for r in runs),
        "runs": runs,
    }
    if not quick:
        RESULTS.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    for name, per_k in report["table"].items():
        print(name, json.dumps({k: {c: None if v is None else round(v, 3)
                                    for c, v in cats.items()} for k, cats in per_k.items()},
                               ensure_ascii=False))
    print(json.dumps(report["goals"]), json.dumps(report["met"]))
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
