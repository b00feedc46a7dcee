"""The paths users run do each piece of work once (issue 13): behaviour, not timing.

* `Conversation` estimates every stored message once, however many checks and sends read it
  (the one `MessageCosts` memo), with and without provider usage (SPEC E1-E2, P1).
* A compaction (the CLI's and `Conversation`'s `compact_session`) estimates each message once
  and extracts each newly old message's identifiers once, for the summary and the ledger.
* The store's conditional commit re-reads only the kept tail when it verified the branch
  already (SPEC C2).
* The memoised results equal the plain ones (hypothesis).
"""

from __future__ import annotations

import pytest
from bench.local_model import LocalModel
from bench.scale_data import CAPACITY
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import derive_budget
from contextfold.core.planning.plan import Plan
from contextfold.core.planning.planner import build_checkpoint, plan_compaction
from contextfold.core.sizing import estimator
from contextfold.core.sizing.estimator import MessageCosts
from contextfold.core.text import identifiers
from contextfold.core.text.identifiers import extract_identifiers
from contextfold.runtime import CompactionRequest, Conversation, compact_session
from contextfold.store.sql import loading, queries
from tests.builders import branch_of, chain, tool_call, tool_result, turn, user

pytest_plugins = ["tests.store_fixtures"]

BUDGET = derive_budget(CAPACITY)


class Counter:
    """Wrap a module function and count its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
        self.calls = 0
        original = getattr(module, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def history(turns: int, size: int = 300) -> list:
    return [m for i in range(turns) for m in turn(i, tools=2, size=size)]


async def seeded(store, turns: int) -> str:
    info = await store.create_session(title="perf")
    await store.append_many(info.id, history(turns))
    return info.id


@pytest.mark.parametrize("usage", [True, False])
async def test_conversation_estimates_each_stored_message_once(store, monkeypatch, usage):  # P1 E2
    sid = await seeded(store, 20)
    stored = 20 * 6
    conv = await Conversation.open(store, sid, model=LocalModel(usage=usage), capacity=CAPACITY)
    count = Counter(monkeypatch, estimator, "_message_tokens")
    for _ in range(3):
        conv.estimate()
        conv.gauge()
    assert count.calls == stored  # the first check estimates every message; the rest look up
    await conv.send("one more question about the same files")
    await conv.wait_idle()
    # The send adds the draft (checked as pending, then stored) and the reply: a handful of
    # new estimates, never a second pass over the history.
    assert stored < count.calls <= stored + 6
    again = count.calls
    conv.estimate()
    assert count.calls == again
    await conv.close()


async def test_a_projection_is_estimated_once_however_often_asked(store, monkeypatch):  # P1
    """A turn asks for the same projection's estimate several times (preflight, automatic
    check, gauge, state); each whole-request estimate walks every message, so they are
    kept: the same projection and drafts give the same estimate without a second walk, and
    anything new is estimated afresh (issue 26: a turn's cost grew with the session)."""
    from contextfold.runtime import sizing

    sid = await seeded(store, 20)
    conv = await Conversation.open(store, sid, model=LocalModel(usage=False), capacity=CAPACITY)
    walks = Counter(monkeypatch, sizing, "estimate_request")
    first = conv.estimate()
    for _ in range(3):
        assert conv.estimate() == first
        assert conv.gauge().tokens == first.tokens
    assert walks.calls == 1
    draft = user("a draft not stored yet")
    with_draft = conv.estimate([draft])
    assert with_draft.tokens > first.tokens and walks.calls == 2
    assert conv.estimate([draft]) == with_draft and walks.calls == 2
    await conv.send("one more question about the same files")
    await conv.wait_idle()
    after = conv.estimate()
    assert after.tokens > first.tokens  # the new projection's, not the kept one
    walked = walks.calls
    assert conv.estimate() is after and walks.calls == walked
    await conv.close()


async def test_compaction_estimates_and_extracts_each_message_once(store, monkeypatch):  # M1 S4
    sid = await seeded(store, 30)
    branch = await store.load_branch(sid)
    estimates = Counter(monkeypatch, estimator, "_message_tokens")
    extractions = Counter(monkeypatch, identifiers, "_message_identifiers")
    lines: list[str] = []
    outcome = await compact_session(CompactionRequest(store, sid, capacity=CAPACITY, budget=BUDGET,
                                    progress=lines.append))
    assert outcome.status == "compacted"
    assert estimates.calls == len(branch.nodes)
    assert extractions.calls == outcome.summarized_messages
    assert any("summarising" in line for line in lines) and lines[-1].startswith("committing")


async def test_commit_rereads_only_the_kept_tail(store, monkeypatch):  # C2
    sid = await seeded(store, 30)
    branch = await store.load_branch(sid)  # this store instance has now verified the branch
    plan = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY)
    assert isinstance(plan, Plan)
    read: list[int] = []
    walk = queries.walk_up

    async def counted(*args, **kwargs):
        found = await walk(*args, **kwargs)
        read.append(len(found))
        return found

    monkeypatch.setattr(queries, "walk_up", counted)
    checkpoint = build_checkpoint(plan, "## Goal\n- keep going", summarizer="test")
    result = await store.commit_checkpoint(plan, checkpoint, session_id=sid)
    assert result.status == "committed"
    assert read == [len(plan.kept)]  # the kept tail, not the 180-message history


async def test_commit_still_refuses_a_boundary_off_the_branch(store):  # C2 C3
    sid = await seeded(store, 6)
    branch = await store.load_branch(sid)
    plan = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY)
    assert isinstance(plan, Plan)
    other = await seeded(store, 2)
    foreign = (await store.load_branch(other)).nodes[0].id
    moved = Plan(**{**plan.__dict__, "first_kept_id": foreign})
    moved.__dict__.pop("message_identifiers", None)
    checkpoint = build_checkpoint(moved, "## Goal\n- x", summarizer="test")
    result = await store.commit_checkpoint(moved, checkpoint, session_id=sid)
    assert result.status == "stale" and "not on the current branch" in result.reason


def _forced(plan: Plan, first_kept_id: str) -> Plan:
    moved = Plan(**{**plan.__dict__, "first_kept_id": first_kept_id})
    moved.__dict__.pop("message_identifiers", None)
    return moved


async def test_commit_with_boundary_before_the_latest_checkpoint(store):  # C2 K4
    # The new boundary lies after the latest checkpoint's first_kept_id but before that
    # checkpoint: the kept tail alone does not reach the old raw start, which is no damage.
    sid = await seeded(store, 8)
    branch = await store.load_branch(sid)
    starts = [n.id for n in branch.nodes if n.message and n.message.role == "user"]
    first = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY)
    assert isinstance(first, Plan)
    first = _forced(first, starts[4])
    result = await store.commit_checkpoint(
        first, build_checkpoint(first, "## Goal\n- a", summarizer="test"), session_id=sid)
    assert result.status == "committed"
    await store.append_many(sid, list(turn(8, tools=2, size=300)))
    branch = await store.load_branch(sid)  # verified by this store instance
    second = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY)
    assert isinstance(second, Plan)
    second = _forced(second, starts[5])  # monotonic (K4), before the checkpoint
    result = await store.commit_checkpoint(
        second, build_checkpoint(second, "## Goal\n- b", summarizer="test"), session_id=sid)
    assert result.status == "committed"
    assert not (await store.get_session(sid)).read_only
    after = await store.load_branch(sid)
    assert after.nodes[-1].checkpoint is not None
    assert after.nodes[-1].checkpoint.first_kept_id == starts[5]


# --------------------------------------------------------------------------- equivalence

texts = st.sampled_from([
    "see 10.1000/xyz123 and https://example.org/a", "edit src/app/main.py now",
    "commit 3f2a9c1 fixed it", "plain words", "Error: boom\nmore", "DOI 10.5555/abc.def",
])


@st.composite
def histories(draw):
    msgs = []
    for i in range(draw(st.integers(2, 6))):
        msgs.append(user(draw(texts) + f" {i}"))
        for t in range(draw(st.integers(0, 2))):
            cid = f"c{i}_{t}"
            msgs.append(tool_call(cid, "read", {"path": f"src/f{i}_{t}.py"}))
            msgs.append(tool_result(cid, draw(texts), is_error=draw(st.booleans())))
        msgs.append(turn(i, size=draw(st.integers(0, 400)))[-1])
    return msgs


@settings(max_examples=40, deadline=None)
@given(histories(), st.sampled_from(["manual", "auto", "preflight"]))
def test_memoised_planning_equals_plain(msgs, trigger):  # E2 S4
    small = CAPACITY.model_copy(update={"context_window": 4_000, "max_output": 1_000,
                                        "max_input": None})
    budget = derive_budget(small)
    branch = branch_of(chain(msgs))
    costs = MessageCosts(small)
    plain = plan_compaction(branch, budget, trigger, capacity=small)
    memo = plan_compaction(branch, budget, trigger, capacity=small, costs=costs)
    again = plan_compaction(branch, budget, trigger, capacity=small, costs=costs)
    assert plain == memo == again
    if isinstance(plain, Plan):
        assert plain.identifiers() == extract_identifiers(plain.newly_old)
        for chunk in plain.chunks:  # chunks start at turn boundaries: calls precede results
            assert plain.identifiers(chunk) == extract_identifiers(chunk) or any(
                n.message.tool_results for n in chunk[:1])
        plain_cp = build_checkpoint(plain, "## Goal\n- x", summarizer="t",
                                    ledger_entries=extract_identifiers(plain.newly_old))
        assert build_checkpoint(plain, "## Goal\n- x", summarizer="t") == plain_cp


# --------------------------------------------------------------------------- O(tail) reads


class RowSpy:
    """Rows read by the store's ancestor walks, and whether a full-branch load happened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows: list[int] = []
        self.full = 0
        # The loading rules (store/sql/loading.py) serve every caller: `queries` wraps them.
        walk, full = loading.walk_up, loading.load_full

        async def counted_walk(*args, **kwargs):
            found = await walk(*args, **kwargs)
            self.rows.append(len(found))
            return found

        async def counted_full(*args, **kwargs):
            self.full += 1
            return await full(*args, **kwargs)

        monkeypatch.setattr(loading, "walk_up", counted_walk)
        monkeypatch.setattr(loading, "load_full", counted_full)


async def test_history_pages_read_only_the_page(store, monkeypatch):  # T1
    sid = await seeded(store, 40)  # 240 nodes
    conv = await Conversation.open(store, sid, model=LocalModel(), capacity=CAPACITY)
    whole = await conv.history()
    spy = RowSpy(monkeypatch)
    page = await conv.history(limit=25)
    older = await conv.history(limit=25, before=page.nodes[0].id)
    assert spy.rows == [25, 25] and spy.full == 0
    assert not page.complete and [n.id for n in older.nodes + page.nodes] == \
        [n.id for n in whole.nodes[-50:]]
    first = await conv.history(limit=1000)
    assert first.complete and first.nodes == whole.nodes
    with pytest.raises(ValueError):
        await conv.history(before=page.nodes[0].id)
    await conv.close()


async def test_edit_reads_the_tail_not_the_history(store, monkeypatch):  # O2 P3
    sid = await seeded(store, 40)
    conv = await Conversation.open(store, sid, model=LocalModel(), capacity=CAPACITY)
    assert (await conv.compact()).status == "compacted"
    await conv.send("a new question after the checkpoint")
    await conv.wait_idle()
    tail = len(conv.branch.nodes)
    spy = RowSpy(monkeypatch)
    result = await conv.edit("the same question, asked better")
    assert spy.full == 0 and max(spy.rows) <= tail + 1  # never the 240-node history
    assert result.reply.role == "assistant"
    last_users = [n for n in conv.branch.nodes if n.is_user_message]
    assert last_users[-1].message.text == "the same question, asked better"
    await conv.close()


async def test_edit_across_the_latest_checkpoint_reads_the_segment_before_it(store):  # O2
    # The last user message was kept raw by a checkpoint made after it: editing it takes
    # that checkpoint off the branch, and the size check sees the branch without it.
    sid = await seeded(store, 12)
    conv = await Conversation.open(store, sid, model=LocalModel(), capacity=CAPACITY)
    assert (await conv.compact()).status == "compacted"
    result = await conv.edit("replace the last question")
    assert result.reply.role == "assistant"
    branch = await conv.history()
    assert not any(n.checkpoint for n in branch.nodes)  # the checkpoint left the branch
    assert branch.nodes[-2].message.text == "replace the last question"
    await conv.close()


# --------------------------------------------------------------------------- streaming


class SummaryModel:
    """A chat model that answers every summary request with a valid summary."""

    def __init__(self, text: str, events: list) -> None:
        self.text, self.events = text, events

    @property
    def model(self) -> str:
        return "summary-model"

    async def complete(self, request):
        from contextfold.core.values.messages import text_message
        from contextfold.providers.base import ChatResponse

        self.events.append("request")
        return ChatResponse(message=text_message("assistant", self.text), stop_reason="end_turn")

    async def stream(self, request):  # pragma: no cover - the summariser never streams
        raise NotImplementedError


async def test_summariser_serialises_one_chunk_at_a_time(monkeypatch):  # S4 R1
    from contextfold.core.render import serialize
    from contextfold.summarize import llm
    from contextfold.summarize.prompts import sections_for

    msgs = [m for i in range(60) for m in turn(i, tools=1, size=1_500)]
    branch = branch_of(chain(msgs))
    small = CAPACITY.model_copy(update={"context_window": 16_000, "max_output": 2_000,
                                        "max_input": None})
    planning = Counter(monkeypatch, serialize, "serialize_message")
    plan = plan_compaction(branch, BUDGET, "manual", capacity=CAPACITY,
                           summarizer_budget=derive_budget(small))
    assert isinstance(plan, Plan) and len(plan.chunks) >= 3
    assert planning.calls == 0  # planning sizes chunks from the memo, never serialising
    events: list = []
    real = llm.serialize_chunk

    def spy(chunk, *args, **kwargs):
        events.append(("serialize", len(chunk)))
        return real(chunk, *args, **kwargs)

    monkeypatch.setattr(llm, "serialize_chunk", spy)
    text = "\n\n".join(f"## {name}\n- (user) keep working on the selector"
                       for name in sections_for(plan.profile))
    model = SummaryModel(text, events)
    outcome = await llm.LlmSummarizer(model, small).summarize(plan)
    assert outcome.summarizer == "llm:summary-model"
    # Each chunk is serialised just before its own request: never two serialisations alive.
    expected = [e for c in plan.chunks for e in (("serialize", len(c)), "request")]
    assert events == expected


async def test_conversation_compaction_reuses_the_branch_it_holds(store, monkeypatch):  # C1
    sid = await seeded(store, 20)
    conv = await Conversation.open(store, sid, model=LocalModel(), capacity=CAPACITY)
    loads = Counter(monkeypatch, store, "load_branch")
    assert (await conv.compact()).status == "compacted"
    assert loads.calls == 1  # the reload after the commit; the plan used the held branch
    await conv.close()


def test_show_last_lists_one_page(tmp_path):  # T1
    import json

    from typer.testing import CliRunner

    from contextfold.cli import app

    db = f"sqlite:///{tmp_path / 'cf.db'}"

    async def seed() -> str:
        from contextfold import open_store

        opened = await open_store(db)
        try:
            return await seeded(opened, 10)  # 60 nodes
        finally:
            await opened.close()

    import asyncio

    sid = asyncio.run(seed())
    runner = CliRunner()
    page = runner.invoke(app, ["show", sid, "--last", "7", "--json", "--db", db])
    assert page.exit_code == 0, page.output
    shown = json.loads(page.stdout)
    assert len(shown["nodes"]) == 7 and shown["page"] == {"last": 7, "complete": False}
    assert shown["nodes"][-1]["id"] == shown["leaf_id"]
    whole = json.loads(runner.invoke(app, ["show", sid, "--json", "--db", db]).stdout)
    assert len(whole["nodes"]) == 60 and "page" not in whole
    human = runner.invoke(app, ["show", sid, "--last", "7", "--db", db])
    assert human.exit_code == 0 and "the last 7 nodes" in human.stdout
