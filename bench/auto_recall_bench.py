"""Automatic recall benchmark (SPEC L5): what the recall block costs per request and how often
it changes, on a folded 2,000-message research session → bench/results/auto_recall.json.

The session (SQLite, built through the public store API) has 1,000 turns: user prose of
60-120 words, one planted fact in every tenth turn ("we decided to use <method> because
<reason>; the Zotero key is <KEY>"), assistant replies. One manual compaction (offline
summariser, a 32k model) folds all but the recent tail. Then a live stretch of `--turns`
turns is simulated: each user message either asks about a planted fact (half of them, in
other words than the fact's) or is ordinary work; each turn has `--rounds` tool rounds
(a tool call whose input names a file, then its result); between turns the auto compaction
runs when over its threshold (A1). Before every request the block is computed with
`AutoRecall.apply`, exactly as `Conversation` and the mirror do.

Measured: time per request (a store search when the query is new, the memo otherwise), the
block's tokens, how often a planted fact asked about is in the block, and prompt-cache
stability: whether the block changed between two requests of one turn (a change re-reads
the turn from the block on) — between turns it always moves past the previous turn. A fact
asked about counts as in the request when the checkpoint states it (then L5 must not repeat
it) or the block quotes it.

Run: `.venv/bin/python -m bench.auto_recall_bench [--messages 2000] [--turns 40] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.recall.auto_recall import latest_request
from contextfold.core.sizing.fit import over_auto_threshold
from contextfold.core.values.messages import Message, ToolCallPart, ToolResultPart, text_message
from contextfold.core.view.projection import Projection, checkpoint_text, project
from contextfold.runtime.auto_recall import AutoRecall
from contextfold.runtime.compaction import CompactionRequest, compact_session
from contextfold.runtime.sizing import Sizer
from contextfold.store import open_store

RESULTS = Path(__file__).parent / "results" / "auto_recall.json"
ALPHABET = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"
WORDS = ("sample", "model", "cortex", "protein", "signal", "method", "result", "figure",
         "table", "dataset", "analysis", "review", "cohort", "neuron", "tissue", "assay",
         "paragraph", "draft", "section", "outline", "citation", "reference")
METHODS = ("Kaplan-Meier", "Cox regression", "mixed-effects", "bootstrap", "Bayesian hierarchy",
           "random forest", "LASSO", "propensity matching", "Mann-Whitney", "Wilcoxon")
REASONS = ("censoring is heavy", "the cohorts are small", "the outcome is skewed",
           "reviewers asked for it", "the baseline differs", "the data are nested")


def _latest_user(projection: Projection) -> str:
    """The id of the latest user message (its turn's block goes right before it)."""
    found = latest_request(projection)
    return found[0] if found is not None else ""


def _key(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(8))


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + "."


def build(rng: random.Random, messages: int) -> tuple[list[Message], list[dict[str, str]]]:
    """The folded part of the session, and the facts planted in it."""
    out: list[Message] = []
    facts: list[dict[str, str]] = []
    for turn in range(messages // 2):
        text = _prose(rng, rng.randint(60, 120))
        if turn % 10 == 3:
            fact = {"method": rng.choice(METHODS), "reason": rng.choice(REASONS),
                    "key": _key(rng), "cohort": f"cohort{turn}"}
            facts.append(fact)
            text += (f" For {fact['cohort']} we decided to use {fact['method']} because "
                     f"{fact['reason']}; the Zotero key is {fact['key']}. ") + _prose(rng, 30)
        out += [text_message("user", text), text_message("assistant", _prose(rng, 40))]
    return out, facts


async def run(messages: int, turns: int, rounds: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    history, facts = build(rng, messages)
    capacity = ModelCapacity(model="bench-32k", context_window=32_000, max_output=4_000)
    budget = derive_budget(capacity)
    sizer = Sizer(capacity, budget, None, ())
    with tempfile.TemporaryDirectory() as tmp:
        store = await open_store(f"sqlite:///{tmp}/bench.db")
        try:
            info = await store.create_session(title="auto recall bench")
            sid = info.id
            for i in range(0, len(history), 500):
                await store.append_many(sid, history[i:i + 500])
            started = time.perf_counter()
            outcome = await compact_session(CompactionRequest(store, sid, capacity, budget))
            compact_s = time.perf_counter() - started
            assert outcome.status == "compacted", outcome
            recall = AutoRecall(store)
            timings: dict[str, list[float]] = {}
            tokens: list[int] = []
            asked = found = before = in_request = compactions = same_hits = 0
            previous_ids: tuple[str, ...] = ()
            reread: list[int] = []
            previous_est: int | None = None
            had_block = False
            within = changed = 0
            with_block = requests = 0
            for turn in range(turns):
                fact = facts[rng.randrange(len(facts))] if turn % 2 == 0 else None
                if fact is not None:
                    ask = (f"Which method did we settle on for {fact['cohort']}, and why? "
                           "I need it for the methods section.")
                else:
                    ask = "Please continue: " + _prose(rng, 25)
                await store.append(sid, text_message("user", ask))
                previous: str | None = None
                for r in range(rounds + 1):
                    branch = await store.load_branch(sid)
                    projection = project(branch)
                    searches = recall.searches
                    t0 = time.perf_counter()
                    shown = await recall.apply(sid, projection, sizer)
                    ms = (time.perf_counter() - t0) * 1000
                    timings.setdefault(f"{recall.searches - searches}_searches", []).append(ms)
                    requests += 1
                    # SPEC Q5: this turn's block (the earlier turns' stay before theirs).
                    mine = shown.recall_at.get(_latest_user(shown))
                    text = mine.text if mine is not None else ""
                    if mine is not None:
                        with_block += 1
                        tokens.append(mine.tokens)
                    if r == 0:
                        est0 = sizer.estimate(shown).tokens
                        if previous_est is not None and had_block and est0 > previous_est:
                            # The previous turn's block moved away: that turn is re-read.
                            reread.append(est0 - previous_est)  # the new block included
                        previous_est = est0
                        had_block = mine is not None
                    if r == 0 and fact is not None:
                        asked += 1
                        found += fact["key"] in text and fact["method"] in text
                        held = checkpoint_text(projection.summary) if projection.summary \
                            else ""
                        before += fact["method"] in held and fact["cohort"] in held
                        in_request += (fact["method"] in held and fact["cohort"] in held) or \
                            (fact["key"] in text and fact["method"] in text)
                    ids = mine.node_ids if mine is not None else ()
                    if r > 0:
                        within += 1
                        changed += text != previous
                        same_hits += text != previous and ids == previous_ids
                    previous, previous_ids = text, ids
                    if r < rounds:  # the model calls a tool; its result comes back
                        call = ToolCallPart(id=f"c{turn}-{r}", name="read_file",
                                            input={"path": f"notes/draft_{turn}_{r}.md"})
                        await store.append_many(sid, [
                            Message(role="assistant", parts=(call,)),
                            Message(role="tool", parts=(ToolResultPart(
                                call_id=call.id, name="read_file",
                                output=_prose(rng, 80)),))])
                fake_reply = text_message("assistant", _prose(rng, 30))
                await store.append(sid, fake_reply)
                # A1: between turns, the auto compaction runs as in a live session.
                if over_auto_threshold(sizer.estimate(project(await store.load_branch(sid))
                                                      ).tokens, budget):
                    auto = await compact_session(CompactionRequest(store, sid, capacity=capacity,
                                                 budget=budget, trigger="auto"))
                    compactions += auto.status == "compacted"
                    previous_est = None  # a new checkpoint re-reads everything anyway
        finally:
            await store.close()

    def pct(values: list[float], q: float) -> float:
        if not values:
            return 0.0
        values = sorted(values)
        return round(values[min(len(values) - 1, int(q * len(values)))], 2)

    return {
        "machine": platform.platform(), "python": platform.python_version(),
        "messages_folded": outcome.summarized_messages, "messages": messages, "turns": turns,
        "rounds_per_turn": rounds, "requests": requests, "model": capacity.model,
        "safe_input_limit": budget.safe_input_limit, "recall_budget": budget.recall_budget,
        "compaction_s": round(compact_s, 2), "auto_compactions": compactions,
        "ms_per_request_by_store_searches": {
            k: {"n": len(v), "p50": pct(v, 0.5), "p95": pct(v, 0.95)}
            for k, v in sorted(timings.items())},
        "block_tokens": {"mean": round(statistics.mean(tokens), 1) if tokens else 0,
                         "max": max(tokens, default=0)},
        "requests_with_block": with_block,
        "planted_fact_asked": asked, "planted_fact_in_block": found,
        "planted_fact_in_checkpoint": before, "planted_fact_in_request": in_request,
        "within_turn_transitions": within, "within_turn_block_changes": changed,
        "within_turn_changes_same_hits": same_hits,
        "reread_tokens_per_turn_after_a_block": {
            "n": len(reread), "mean": round(statistics.mean(reread), 1) if reread else 0},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = asyncio.run(run(args.messages, args.turns, args.rounds))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
