"""Replaying real recorded sessions under contextfold's management.

Every request the model would have received is checked by the independent validity oracles;
nothing may exceed the safe limit and no message may be dropped (SPEC P1-P3, A1-A4, K3, T2-T4).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.money.costs import projection_blocks
from contextfold.core.render.export import to_openai
from contextfold.core.values.messages import Message
from contextfold.core.values.tree import Branch
from contextfold.core.view.projection import project
from contextfold.demo_session import build_research_session
from contextfold.formats import import_file
from contextfold.replay import active_messages, replay_messages

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL_SESSIONS = [
    "pi-mono/large-session.jsonl",
    "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "claude-code/ae4a77f8-aedd-4bc1-888f-c94edc91af04.jsonl",
    "claude-code/tool_heavy.jsonl",
    "claude-code/short.jsonl",
]



@pytest.mark.parametrize("name", REAL_SESSIONS)
@pytest.mark.parametrize("window", [200_000, 64_000])
def test_real_sessions_replay_cleanly(name, window):  # P1 P2 P3 A1 A4 K3 T4
    result = import_file(FIXTURES / name)
    messages = active_messages(result.nodes, result.leaf_id)
    cap = ModelCapacity(model=f"replay-{window}", context_window=window, max_output=32_000)
    budget = derive_budget(cap)
    report = replay_messages(messages, cap, budget)
    assert report.requests, "a real session has model requests"
    assert report.invalid_tool_sequences == 0
    assert report.dropped_messages == 0
    assert report.max_projected_tokens <= budget.safe_input_limit
    if window == 64_000 and "short" not in name and "tool_heavy" not in name:
        assert report.compactions, "a long session on a 64k window must compact"


def test_demo_session_compacts_and_keeps_identifiers():  # A1 P2 T4
    messages = build_research_session()
    cap = ModelCapacity(model="demo-16k", context_window=16_384, max_output=4_096)
    budget = derive_budget(cap)
    report = replay_messages([(f"d{i}", m) for i, m in enumerate(messages)], cap, budget)
    assert len(report.compactions) >= 3
    assert report.invalid_tool_sequences == 0 and report.dropped_messages == 0
    assert report.max_projected_tokens <= budget.safe_input_limit
    # Every Zotero item key the session used is still visible to the model.
    last = [n for n in report.chain if n.checkpoint is not None][-1].checkpoint
    visible = last.summary + " ".join(e.value for e in last.ledger.entries)
    projection = project(Branch(nodes=tuple(report.chain)))
    tail = " ".join(n.payload.model_dump_json() for n in projection.messages
                    if isinstance(n.payload, Message))
    for key in ("PQKBRC33", "Z8N84QAJ", "B2VNV5Q7", "6XDC27WD", "ICK5M93W"):
        assert key in visible or key in tail
    assert "PQKBRC33" in visible


def test_recorded_usage_is_not_a_baseline_in_replay():  # E1
    result = import_file(FIXTURES / "claude-code/short.jsonl")
    messages = active_messages(result.nodes, result.leaf_id)
    cap = ModelCapacity(model="m", context_window=200_000, max_output=32_000)
    report = replay_messages(messages, cap, derive_budget(cap))
    assert all(n.message is None or n.message.usage is None for n in report.chain)
    recorded = [r.recorded_tokens for r in report.requests if r.recorded_tokens]
    assert recorded, "the recorded usage is kept aside for comparison"


def test_fixed_overhead_leaves_a_raw_tail_for_split_turns():  # K6 B2
    from contextfold.core.models.budget import derive_budget
    from contextfold.core.models.catalog import capacity_for
    from contextfold.core.sizing.fit import budget_after_overhead

    budget = derive_budget(capacity_for("claude-sonnet-4-5", context_window=64_000))
    after = budget_after_overhead(budget, 25_864)  # a recorded Claude Code agent's overhead
    assert after.safe_input_limit == budget.safe_input_limit - 25_864
    assert after.tail_budget > 0
    # summary + tail still leave room to grow before the next compaction
    assert after.summary_budget + after.tail_budget < after.safe_input_limit


def test_q4_replay_reports_the_recorded_bill_beside_contextfolds():
    from contextfold.core.models.catalog import capacity_for
    from contextfold.core.money.costs import session_cost
    from contextfold.core.money.prices import PriceBook
    from contextfold.replay import recorded_session, replay_recorded

    result = import_file(FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    session = recorded_session(result.nodes, result.leaf_id)
    cap = capacity_for("claude-sonnet-4-5", context_window=64_000)
    report = replay_recorded(session, cap, derive_budget(cap))
    cost = report.to_json()["cost"]
    recorded = session_cost([n for n in result.nodes if n.message is not None],
                            PriceBook.packaged())
    assert recorded.requests.usd and recorded.requests.usd > 0
    assert cost["recorded"]["usd"] == pytest.approx(recorded.requests.usd, abs=1e-6)
    ours = cost["contextfold"]
    assert ours["requests"] == len(report.requests)
    # every token of every request contextfold would have sent is billed once, by kind
    assert ours["input_tokens"] + ours["cached_tokens"] + ours["cache_write_tokens"] == \
        sum(r.estimated_tokens for r in report.requests)
    assert ours["cached_tokens"] > ours["cache_write_tokens"] > 0  # turns read the cache back
    assert ours["usd"] > 0 and cost["recorded_modelled"]["usd"] > 0


# SPEC Q3 (issue 40): the replay's summaries are offline; it says what a summariser that is
# the session's model would have read from the cache, each compaction's request starting
# with the previous request (none for a preflight compaction, whose plan is over the limit)
def test_q3_replay_reports_what_a_same_model_summariser_would_read_from_the_cache():
    from contextfold.core.models.catalog import capacity_for
    from contextfold.replay import recorded_session, replay_recorded

    result = import_file(FIXTURES / "pi-mono" / "large-session.jsonl")
    session = recorded_session(result.nodes, result.leaf_id)
    cap = capacity_for("gpt-4.1", context_window=64_000)
    out = replay_recorded(session, cap, derive_budget(cap)).to_json()
    same = out["cost"]["same_model_summarizer"]
    log = out["compaction_log"]
    shares = [c["summarizer_cache_read_share"] for c in log]
    assert [s is None for s in shares] == [c["trigger"] == "preflight" for c in log]
    assert same["requests"] == len(log) - same["not_prefixed"] > 0
    prompt = same["input_tokens"] + same["cached_tokens"] + same["cache_write_tokens"]
    assert same["cache_read_share"] == pytest.approx(same["cached_tokens"] / prompt, abs=1e-4)
    # the previous request is in the cache: most of each summarising request is read
    assert all(s > 0.5 for s in shares if s is not None)


def _planted_session() -> list[tuple[str, Message]]:
    """A fact said once early, buried in bulky turns that fold it away, then asked about
    by its rare words."""
    import random

    from tests.builders import assistant, user

    rng = random.Random(3)
    topics = ["river", "harbor", "lantern", "orchard", "meadow", "quarry", "saddle", "violin",
              "compass", "anchor"]

    def filler(i: int, n: int) -> str:
        return " ".join(f"Note {i}.{k}: the {rng.choice(topics)} survey found "
                        f"{rng.choice(topics)} results in sector {rng.randint(1, 99)}."
                        for k in range(n))

    msgs = [user("Let us start the survey log."),
            assistant(filler(0, 10) + " The cryostat calibration constant is ZEPHYRINE-42, "
                      "recorded by Dr Okafor. " + filler(1, 10))]
    for i in range(2, 30):
        msgs += [user(f"Continue with part {i}: " + filler(i, 8)), assistant(filler(i + 100, 20))]
    msgs += [user("Which constant did Dr Okafor record for the cryostat calibration?"),
             assistant("It was ZEPHYRINE-42.")]
    return [(f"n{i}", m) for i, m in enumerate(msgs)]


@pytest.mark.parametrize("share", [0.03, 0.0])
def test_replay_recalls_a_folded_fact_when_asked(share):  # L5 (replay applies it too)
    from contextfold.core.models.budget import CompactionSettings
    from contextfold.replay import ManagedSession

    pairs = _planted_session()
    cap = ModelCapacity(model="recall-16k", context_window=16_384, max_output=4_096)
    budget = derive_budget(cap, CompactionSettings(auto_recall_share=share))
    session = ManagedSession(cap, budget)
    records = [r for node_id, m in pairs if (r := session.step(node_id, m)) is not None]
    asked = records[-1].projection
    assert session.compactions and "n1" in session.summarized_ids  # the fact was folded
    assert all(r.estimated_tokens <= budget.safe_input_limit for r in records)
    if share:
        # The question's own block goes right before it (SPEC L5; the earlier turns'
        # blocks stay before theirs, SPEC Q5).
        block = asked.recalled[-1]
        assert block.before_id == asked.messages[-1].id and "n1" in block.node_ids
        assert "ZEPHYRINE-42" in block.text
        # The estimate counts the blocks: the same request without them is that much smaller.
        without = session.estimate(projection=replace(asked, recalled=())).tokens
        assert records[-1].estimated_tokens - without == asked.recall_tokens >= block.tokens > 0
        assert records[-1].recall_tokens == asked.recall_tokens
        # The exported request carries it, before the question.
        sent = to_openai(asked).messages
        assert "ZEPHYRINE-42" in str(sent[-2:])
        # And its modelled cost (SPEC Q4) counts it, right before the question.
        blocks = projection_blocks(asked, session.costs)
        assert [(b.key.split("@")[0], b.tokens) for b in blocks[-2:-1]] == [
            ("recall:n1", block.tokens)]
    else:
        assert not asked.recalled and all(r.recall_tokens == 0 for r in records)
    report = replay_messages(pairs, cap, budget)
    assert report.max_projected_tokens <= budget.safe_input_limit
    assert report.dropped_messages == 0 and report.invalid_tool_sequences == 0
    assert (report.to_json()["recall_requests"] > 0) == bool(share)


def test_held_projection_equals_the_one_derived_from_the_store():  # T2 T4 (issue 40)
    """Replay grows the branch it holds by each appended message instead of reading it
    again: at every step, through compactions and recall blocks, what it projects equals
    the projection of the branch the store returns, derived from every node."""
    from contextfold.core.models.budget import CompactionSettings
    from contextfold.core.values.tree import GROWN_FROM
    from contextfold.replay import ManagedSession
    from contextfold.replay_session import _now

    cap = ModelCapacity(model="recall-16k", context_window=16_384, max_output=4_096)
    session = ManagedSession(cap, derive_budget(cap, CompactionSettings(auto_recall_share=0.03)))
    grown = 0
    for node_id, msg in _planted_session():
        session.step(node_id, msg)
        stored = _now(session.store.load_branch(session.session_id))
        held = session.fit.branch
        grown += GROWN_FROM in held.__dict__  # handed its parent's projection
        assert held.nodes == stored.nodes
        assert (held.revision, held.complete) == (stored.revision, stored.complete)
        assert session.projection() == project(Branch(stored.nodes, stored.complete,
                                                      stored.revision))
    assert session.compactions and grown > len(_planted_session()) // 2


def test_the_checkpoint_text_memo_changes_no_block(monkeypatch):  # L5 Q5 (issue 40)
    """Automatic recall keeps the checkpoint's text (as blocks compare with it) per
    checkpoint: every request is byte for byte the one worked out afresh at every turn,
    and the text is worked out once per checkpoint, not once per turn."""
    from contextfold.core.models.budget import CompactionSettings
    from contextfold.core.recall import auto_recall as core_recall
    from contextfold.replay import ManagedSession
    from contextfold.runtime import auto_recall

    cap = ModelCapacity(model="recall-16k", context_window=16_384, max_output=4_096)
    budget = derive_budget(cap, CompactionSettings(auto_recall_share=0.03))

    def run() -> tuple[list[list[dict]], list[str]]:
        worked: list[str] = []
        original = core_recall.known_text
        monkeypatch.setattr(auto_recall, "known_text",
                            lambda p: worked.append(p.checkpoint.id) or original(p))
        session = ManagedSession(cap, budget)
        sent = [to_openai(r.projection).messages for node_id, m in _planted_session()
                if (r := session.step(node_id, m)) is not None]
        return sent, worked

    memo_sent, memo_worked = run()
    monkeypatch.setattr(auto_recall.AutoRecall, "_known",
                        lambda self, p: auto_recall.known_text(p))
    fresh_sent, fresh_worked = run()
    assert memo_sent == fresh_sent
    assert any("[contextfold recall]" in str(m) for m in memo_sent[-1])  # blocks were chosen
    assert len(fresh_worked) > len(set(fresh_worked))  # several turns under one checkpoint
    # Once per checkpoint (ids are new in each run; as many checkpoints searched in both).
    assert len(memo_worked) == len(set(memo_worked)) == len(set(fresh_worked))
