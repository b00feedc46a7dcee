"""Running an evaluation: the planted session, compacted K times, probed after each milestone.

The session (`evaluate.planted`) is written turn by turn into a temporary SQLite store (the
embedded store every face uses; it can search, so automatic recall works as in a real
session). Once a compaction would fold `WARMUP` turns (beyond the raw tail the model's
tail budget keeps; so the first checkpoint already folds every category from both
sources) every turn ends with one compaction through
`runtime.compaction.compact_session`, the path `contextfold compact` takes (prepare →
summarise → conditional commit, S6/S7 checks included): automatic when the request is over
the auto threshold (SPEC A1), else manual (M1). After compaction K, for K asked for, every
fact planted in a turn that is no longer raw is probed (`evaluate.probes`).

Where the first compaction runs is found first, on the session without rules
(`first_compaction`): the natural rules are then planted in the first user message, the
one halfway through what that compaction folds, and the latest one then
(`planted.deal_rules`), and compacting starts at that turn.

The summariser is the caller's (`Summarize`: the offline one, or a guarded LLM summariser
the face built with `summarize.factory`); the model and its budget are the caller's too.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..core.models.budget import Budget, ModelCapacity
from ..core.values.messages import Message, TextPart, ToolCallPart, ToolResultPart, text_message
from ..core.view.projection import project
from ..errors import ContextfoldError
from ..runtime.auto_recall import AutoRecall
from ..runtime.compaction import CompactionOutcome
from ..runtime.driver import session_sizer
from ..runtime.fitting import SessionFit, healthy
from ..runtime.sizing import Sizer
from ..runtime.summarizers import Summarize, offline_summarize
from ..store import open_store
from ..store.protocol import SessionStore
from .facts import ScriptedTurn
from .planted import MAX_TURNS, SYSTEM, planted_turns
from .probes import probe
from .report import CompactionRow, EvalResult, Milestone

WARMUP = 6  # turns before the first compaction: each category planted once per source
MAX_COMPACTIONS = 50  # the largest K a run goes to (one turn per compaction)


class EvalInputError(ContextfoldError, ValueError):
    """What was asked of an evaluation cannot be run (the message says what)."""

    kind = "bad_input"


def parse_compactions(text: str) -> tuple[int, ...]:
    """`"1,5,10"` → (1, 5, 10): positive, at most `MAX_COMPACTIONS`, sorted, once each."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            k = int(part)
        except ValueError:
            raise EvalInputError(f"compactions are whole numbers separated by commas "
                                 f"(e.g. 1,5,10), not {part!r}") from None
        if k <= 0:
            raise EvalInputError(f"a number of compactions must be at least 1, not {k}")
        if k > MAX_COMPACTIONS:
            raise EvalInputError(f"at most {MAX_COMPACTIONS} compactions, not {k}")
        values.append(k)
    return tuple(sorted(set(values)))


def turn_messages(t: int, turn: ScriptedTurn) -> list[Message]:
    """One scripted turn as stored messages: the user's, each tool round, the reply."""
    out = [text_message("user", turn.user)]
    for i, r in enumerate(turn.rounds):
        call = ToolCallPart(id=f"call_{t}_{i}", name=r.name, input=r.arguments)
        parts = (TextPart(text=r.text), call) if r.text else (call,)
        out.append(Message(role="assistant", parts=parts))
        out.append(Message(role="tool", parts=(ToolResultPart(
            call_id=call.id, name=r.name, output=r.output, is_error=r.is_error),)))
    out.append(text_message("assistant", turn.reply))
    return out


async def run_eval(capacity: ModelCapacity, budget: Budget, *,
                   summarize: Summarize = offline_summarize, summarizer: str = "extractive",
                   compactions: Sequence[int] = (1, 5, 10), seed: int = 27,
                   progress: Callable[[str], None] | None = None,
                   base_url: str | None = None) -> EvalResult:
    """Compact the planted session up to max(`compactions`) times with `summarize`, on the
    model `capacity` sized by `budget`; probe after each K asked for. `summarizer` names it
    in the result. Raises `EvalInputError` for K that cannot be run."""
    asked = tuple(sorted(set(compactions)))
    if not asked or asked[0] <= 0 or asked[-1] > MAX_COMPACTIONS:
        raise EvalInputError(f"compactions must be between 1 and {MAX_COMPACTIONS}, "
                             f"not {list(compactions)}")
    say = progress or (lambda _line: None)
    result = EvalResult(summarizer=summarizer, model=capacity.model,
                        context_window=capacity.context_window,
                        safe_input_limit=budget.safe_input_limit,
                        recall_budget=budget.recall_budget, asked=asked, base_url=base_url)
    started = time.perf_counter()
    sizer = session_sizer(capacity, budget=budget, system=SYSTEM)
    first, folded = first_compaction(sizer, seed)
    # The first message, the middle of what the first compaction folds, and the latest
    # message then: each folded by then, or (the latest) by the compactions that follow.
    rules_at = (0, folded // 2, first)
    with tempfile.TemporaryDirectory(prefix="contextfold-eval-") as tmp:
        store = await open_store(f"sqlite:///{Path(tmp) / 'eval.db'}")
        try:
            await _play(store, planted_turns(seed, rules_at=rules_at), first, sizer,
                        summarize, result, say)
        finally:
            await store.close()
    result.seconds = time.perf_counter() - started
    return result


def folded_turns(turn_tokens: Sequence[int], tail_budget: int) -> int:
    """How many of the turns a compaction would fold, the newest ones kept raw while they
    fit `tail_budget` (the latest always: SPEC M2). An estimate, to time the first one."""
    kept, used = 0, 0
    for tokens in reversed(turn_tokens):
        if kept and used + tokens > tail_budget:
            break
        kept, used = kept + 1, used + tokens
    return len(turn_tokens) - kept


def first_compaction(sizer: Sizer, seed: int) -> tuple[int, int]:
    """The turn after which the first compaction runs — the first at which `WARMUP` turns
    of the planted session (without rules) would be folded beyond the raw tail — and how
    many turns it would fold; the session's last turn when none is (the run then reports
    its K as not reached)."""
    sizes: list[int] = []
    for t, turn in enumerate(planted_turns(seed)):
        sizes.append(sum(sizer.costs.measure(m) for m in turn_messages(t, turn)))
        if (folded := folded_turns(sizes, sizer.budget.tail_budget)) >= WARMUP:
            return t, folded
    return MAX_TURNS - 1, WARMUP


async def _play(store: SessionStore, turns: Iterable[ScriptedTurn], first: int, sizer: Sizer,
                summarize: Summarize, result: EvalResult, say: Callable[[str], None]) -> None:
    """Write the turns, compact after each from turn `first` on, probe at each K asked
    for; stop after the last K (or when the turns run out)."""
    sid = (await store.create_session(title="contextfold eval")).id
    recall = AutoRecall(store)
    played: list[ScriptedTurn] = []
    user_nodes: list[str] = []  # turn → its user message's node (a clip or note names it)
    for t, turn in enumerate(turns):
        nodes = await store.append_many(sid, turn_messages(t, turn))
        user_nodes.append(nodes[0].id)
        played.append(turn)
        result.turns_played = t + 1
        if t < first:
            continue
        outcome = await _compact(store, sid, sizer, summarize)
        if outcome.status != "compacted":
            say(f"turn {t + 1}: no compaction ({outcome.reason})")
            continue
        k = len(result.compactions) + 1
        result.compactions.append(CompactionRow(
            k=k, turn=t + 1, trigger=outcome.trigger or "manual",
            summarizer=outcome.summarizer, fallback_reason=outcome.fallback_reason,
            tokens_before=outcome.tokens_before, tokens_after=outcome.tokens_after,
            summarized_messages=outcome.summarized_messages, check=outcome.check or {},
            cost=outcome.cost()))
        say(f"compaction {k} after turn {t + 1}: {outcome.summarizer}, "
            f"{outcome.tokens_before:,} → {outcome.tokens_after:,} tokens")
        if k in result.asked:
            result.milestones.append(await _milestone(store, sid, played, user_nodes, k, sizer,
                                                      recall))
            say(f"probed after compaction {k}")
        if k >= result.asked[-1]:
            return


async def _compact(store: SessionStore, sid: str, sizer: Sizer, summarize: Summarize
                   ) -> CompactionOutcome:
    """One compaction: the driver's check after a turn (A1: `SessionFit.auto`, what every
    face runs), else (or when the automatic one would not make the request smaller)
    manual (M1)."""
    fit = SessionFit(store, sid, sizer, summarize, healthy(await store.load_branch(sid), sid))
    outcome = await fit.auto()
    if outcome is not None and outcome.status == "compacted":
        return outcome
    return await fit.compact("manual")


async def _milestone(store: SessionStore, sid: str, played: Sequence[ScriptedTurn],
                     user_nodes: Sequence[str], k: int, sizer: Sizer, recall: AutoRecall
                     ) -> Milestone:
    """Probe every fact of a turn no longer raw after compaction `k`."""
    projection = project(await store.load_branch(sid))
    raw_users = {n.message.text.strip() for n in projection.messages
                 if n.message is not None and n.message.role == "user"}
    facts = [(f, user_nodes[t]) for t, turn in enumerate(played)
             if turn.user.strip() not in raw_users for f in turn.facts]
    probes = [await probe(f, projection, recall, sid, sizer,
                          node_id=node if f.source == "user" else None)
              for f, node in facts]
    return Milestone(k=k, turn=len(played), probes=tuple(probes))
