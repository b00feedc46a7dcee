"""Framework built-in vs framework + contextfold: the OpenAI Agents SDK and pydantic-ai.

    .venv/bin/python -m bench.peers.frameworks_oa_pa   # -> bench/results/frameworks_oa_pa.json

Unlike the rest of `bench/peers` (which replays transcripts through each peer's compaction
call), these rows run the frameworks' own agent loops end to end, in the project venv (the
`openai-agents` and `pydantic-ai` extras), with their offline test models
(`tests/oa_fakes.py`, `tests/pai_fakes.py`) on the tool-using workload of
`tests/framework_workload.py`: each turn asks for one or two records, the model calls the
lookup tool (parallel calls for two), then answers with the checksums it can see. Every
request the model received is judged by the validity oracles and counted with a real
tokenizer against the model's window (`Ledger`). `docs/peers.md` shows the table
(`markdown_section`, called by `bench/peers/report.py`).

Systems: the SDK's `SQLiteSession`; the SDK's `ToolOutputTrimmer` filter with
`SQLiteSession`; `ContextfoldSession`. pydantic-ai with no history processing; the
"keep the last messages" processor of pydantic-ai's documentation (`messages[-5:]`); the
contextfold history processor.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "frameworks_oa_pa.json"
WINDOWS = ((8192, 30), (16384, 40), (32768, 60))  # (window, turns)


async def _agents_sdk(system: str, window: int, turns: int, db: Path) -> dict[str, Any]:
    from agents import Agent, RunConfig, Runner, SQLiteSession
    from agents.extensions import ToolOutputTrimmer
    from tests.framework_workload import Ledger, prompt
    from tests.oa_fakes import WindowModel, lookup_record

    from contextfold.core.models.catalog import capacity_for
    from contextfold.integrations.openai_agents import ContextfoldSession
    from contextfold.store import open_store

    ledger = Ledger()
    model = WindowModel("m", window, ledger)
    tools: list[Any] = [lookup_record]
    store = None
    if system == "contextfold":
        store = await open_store(f"sqlite+aiosqlite:///{db}")
        session: Any = await ContextfoldSession.open(
            store, capacity=capacity_for("gpt-4o-mini", context_window=window))
        tools += session.recall_tools()
        config = session.run_config()
    else:
        session = SQLiteSession(f"bench-{system}-{window}")
        config = RunConfig(call_model_input_filter=ToolOutputTrimmer()) \
            if system == "ToolOutputTrimmer" else RunConfig()
    agent = Agent(name="researcher", instructions="You look up records.", model=model,
                  tools=tools)
    for t in range(turns):
        await Runner.run(agent, prompt(t), session=session, run_config=config)
    stored = None
    if store is not None:
        await session.wait_idle()
        branch = await store.load_full_branch(session.session_id)
        stored = sum(1 for n in branch.nodes if n.message is not None)
        await store.close()
    return _row(ledger, stored)


async def _pydantic_ai(system: str, window: int, turns: int, db: Path) -> dict[str, Any]:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from tests.framework_workload import Ledger, prompt
    from tests.pai_fakes import lookup_record, window_model

    from contextfold.core.models.catalog import capacity_for
    from contextfold.integrations.pydantic_ai import history_processor
    from contextfold.store import open_store

    ledger = Ledger()
    store = None
    capabilities: list[Any] = []
    tools: list[Any] = [lookup_record]
    if system == "contextfold":
        store = await open_store(f"sqlite+aiosqlite:///{db}")
        history = history_processor(store, capacity=capacity_for("gpt-4o-mini",
                                                                 context_window=window))
        capabilities.append(history.capability())
        tools += history.recall_tools()
    elif system == "keep-last-messages":
        capabilities.append(ProcessHistory(lambda messages: messages[-5:]))
    agent = Agent(window_model("m", window, ledger), instructions="You look up records.",
                  tools=tools, capabilities=capabilities)
    messages: list[Any] = []
    for t in range(turns):
        result = await agent.run(prompt(t), message_history=messages)
        messages = result.all_messages()
    stored = None
    if store is not None:
        branch = await store.load_full_branch(history.session_id)
        stored = sum(1 for n in branch.nodes if n.message is not None)
        await store.close()
    return _row(ledger, stored)


def _row(ledger: Any, stored: int | None) -> dict[str, Any]:
    return {"requests": ledger.requests, "invalid_requests": ledger.invalid_requests,
            "malformed": len({p.split(":")[0] for p in ledger.invalid}),
            "over_window": len(ledger.overflows), "max_prompt_tokens": ledger.max_tokens,
            "unknown_checksums": ledger.unknown_answers(), "stored_messages": stored}


SYSTEMS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "OpenAI Agents SDK": (_agents_sdk, ("SQLiteSession", "ToolOutputTrimmer", "contextfold")),
    "pydantic-ai": (_pydantic_ai, ("no processor", "keep-last-messages", "contextfold")),
}


def run() -> dict[str, Any]:
    """Every framework x system x window; the results as JSON-ready data."""
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for framework, (fn, systems) in SYSTEMS.items():
            for system in systems:
                for window, turns in WINDOWS:
                    db = Path(tmp) / f"{len(rows)}.db"
                    t0 = time.perf_counter()
                    row = asyncio.run(fn(system, window, turns, db))
                    rows.append({"framework": framework, "system": system, "window": window,
                                 "turns": turns, **row,
                                 "seconds": round(time.perf_counter() - t0, 1)})
                    print(f"{framework} / {system} / {window}: {row}", file=sys.stderr)
    return {"generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "wall_seconds": round(time.perf_counter() - started, 1), "rows": rows}


def markdown_section(path: Path = RESULTS) -> list[str]:
    """The docs/peers.md section (empty when the benchmark has not run)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    lines = [
        "## Framework built-in vs framework + contextfold (OpenAI Agents SDK, pydantic-ai)",
        "",
        f"`python -m bench.peers.frameworks_oa_pa`, run of {data['generated']} "
        f"({data['wall_seconds']} s). The frameworks' own agent loops with their offline test "
        "models, on a tool-using workload (one or two record lookups per turn, parallel calls "
        "for two, ~600-token tool outputs). *Invalid* = requests a provider would refuse: "
        "malformed (validity oracles) or over the model's window (real tokenizer). *Unknown* = "
        "checksums the model could not see when it answered. *Stored* = messages in "
        "contextfold's durable store (every user message, call, result and answer).",
        "",
        "| framework | system | window | turns | requests | invalid | malformed | over window "
        "| max prompt tokens | unknown | stored |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in data["rows"]:
        lines.append(
            f"| {r['framework']} | {r['system']} | {r['window']:,} | {r['turns']} | "
            f"{r['requests']} | {r['invalid_requests']} | {r['malformed']} | "
            f"{r['over_window']} | {r['max_prompt_tokens']:,} | {r['unknown_checksums']} | "
            f"{r['stored_messages'] if r['stored_messages'] is not None else '-'} |")
    lines += ["", "The Agents SDK's `OpenAIResponsesCompactionSession` calls the Responses "
              "API's server-side compaction and cannot run offline; its trigger is measured "
              "in the transcript replays above (`openai-agents-compaction-session`).", ""]
    return lines


def main() -> int:
    data = run()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
