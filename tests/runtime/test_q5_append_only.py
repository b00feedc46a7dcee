"""SPEC Q5: between two checkpoints the projection only grows at its end.

What a request adds for one turn stays, byte for byte, in every later request until the next
checkpoint: a turn's automatic recall block (L5) right before its user message, a clipped or
masked tool result (K6, V1: decided by the checkpoint), a pin or unpin (N1: a note where it
happened, the prefix keeping the checkpoint's pins). So no request breaks the previous
request's cached prefix except at a checkpoint (`core.money.prefix_breaks` counts them).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.money.prefix_breaks import count_prefix_breaks
from contextfold.core.recall.auto_recall import (
    Candidate,
    RecallTurns,
    choose_block,
    held_blocks,
    latest_request,
    recall_query,
    smallest_block,
    undecided_needs_search,
    within,
)
from contextfold.core.recall.recall_text import message_text
from contextfold.core.render.export import to_anthropic, to_openai
from contextfold.core.render.validity import anthropic_problems, openai_problems
from contextfold.core.sizing.estimator import estimate_request
from contextfold.core.sizing.fit import recall_compaction_due, recall_full, recall_room
from contextfold.core.values.messages import Checkpoint, Message, Node, PinEvent
from contextfold.core.values.tree import Branch
from contextfold.core.view.pins import active_pins, pin_event
from contextfold.core.view.projection import Projection, RecallBlock, project, raw_start
from tests.builders import assistant, tool_call, tool_result, user
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

AT = datetime(2026, 1, 1, tzinfo=UTC)
CAP = ModelCapacity(model="q5-32k", context_window=32_000, max_output=2_000)
LIMIT = derive_budget(CAP).safe_input_limit
CLIP = 400  # characters a kept long tool result is clipped to by the checkpoint (K6)
# Folded facts a turn's question can find (each its own rare words and identifier).
FACTS = [
    "The cryostat calibration constant is ZEPHYRINE-42, recorded by Dr Okafor.",
    "The harbor survey used sonar grid QX-7731 along the northern breakwater.",
    "Cohort B censoring is heavy, so the Kaplan-Meier estimator was chosen (ZK9Q2W7R).",
    "The lantern archive sits in bucket orchard-backup-2024 under the meadow prefix.",
    "Violin tuning drift measured 3.2 cents per hour in the quarry studio.",
]
QUESTIONS = [
    "Which constant did Dr Okafor record for the cryostat calibration?",
    "What sonar grid did the harbor survey use along the breakwater?",
    "Which estimator did we pick for cohort B censoring?",
    "Where is the lantern archive bucket with the meadow prefix?",
    "How much did the violin tuning drift in the quarry studio?",
    "Please continue with the next part of the plan.",
]


class Session:
    """A session played request by request over the pure core, as the runtime plays it:
    the projection of the branch, each new turn's recall decision (`RecallTurns`, the same
    functions `runtime.auto_recall` runs, the store's search replaced by the folded
    messages that hold a query word), and the request as the exports send it."""

    def __init__(self, recall_budget: int) -> None:
        self.nodes: list[Node] = []
        self.budget = recall_budget
        self.turns: RecallTurns | None = None
        self.n = 0

    def add(self, payload: Message | Checkpoint | PinEvent) -> Node:
        node = Node(id=f"m{self.n:03d}", parent_id=self.nodes[-1].id if self.nodes else None,
                    created_at=AT, payload=payload)
        self.n += 1
        self.nodes.append(node)
        return node

    def branch(self) -> Branch:
        return Branch(nodes=tuple(self.nodes))

    def checkpoint(self, mask: bool) -> None:
        """Fold everything before the previous user turn; clip its long tool results
        (K6) and, with `mask`, mask them (V1): all decided by the checkpoint alone."""
        users = [i for i, n in enumerate(self.nodes)
                 if n.message is not None and n.message.role == "user"
                 and not n.message.tool_results]
        if len(users) < 2:
            return
        keep, latest = self.nodes[users[-2]], self.nodes[users[-1]]
        clips = {n.id: CLIP for n in self.nodes[users[-2]:]
                 if n.message is not None and any(len(r.output) > CLIP
                                                  for r in n.message.tool_results)}
        ci = next((i for i in range(len(self.nodes) - 1, -1, -1)
                   if self.nodes[i].checkpoint is not None), None)
        self.add(Checkpoint(summary="## Goal\n- The survey log, folded.", first_kept_id=keep.id,
                            tokens_before=0, summarizer="test", tail_clips=clips,
                            pins=active_pins(self.nodes, ci),
                            masked_before_id=latest.id if mask else None))

    def request(self) -> Projection:
        """The next request's projection, with the recall blocks of its turns."""
        branch = self.branch()
        projection = project(branch)
        if projection.checkpoint is None or self.budget <= 0:
            return projection
        if self.turns is None or self.turns.checkpoint_id != projection.checkpoint.id:
            self.turns = RecallTurns(projection.checkpoint.id)  # afresh at a checkpoint
        turns = self.turns
        held = held_blocks(turns, projection)
        request = latest_request(projection)
        if request is not None and not turns.decided(request[0]):
            with_held = replace(projection, recalled=held)
            query = recall_query(request[1], request[2])
            used = with_held.recall_tokens
            room = recall_room(estimate_request(with_held, CAP).tokens, LIMIT,
                               self.budget - used)
            decided = undecided_needs_search(turns, request[0], query, used, self.budget,
                                             room, smallest_block())
            if decided is None:
                assert query is not None
                folded = [Candidate(node_id=n.id, position=i, turn=i, role=n.message.role,
                                    text=message_text(n.message))
                          for i, n in enumerate(branch.nodes[:raw_start(branch)])
                          if n.message is not None]
                words = {t for term in query.terms for t in term.tokens}
                hits = [c for c in folded if words & c.words]
                decided = turns.with_turn(request[0],
                                          choose_block(hits, with_held, query, room))
            self.turns = turns = decided
            held = held_blocks(turns, projection)
        return replace(projection, recalled=held)


def _wire(projection: Projection) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in to_openai(projection).messages]


def _grows_at_its_end(before: list[str], after: list[str]) -> bool:
    """`after` holds `before` byte for byte at its start; only the last message may grow
    at its end (a user message joined by the text after it, one user-side message)."""
    if len(after) < len(before):
        return False
    if after[:len(before) - 1] != before[:-1]:
        return False
    last, now = json.loads(before[-1]), json.loads(after[len(before) - 1])
    if last == now:
        return True
    return last["role"] == now["role"] == "user" and isinstance(last["content"], str) and \
        now["content"].startswith(last["content"])


STEP = st.one_of(
    st.tuples(st.just("turn"), st.integers(0, len(QUESTIONS) - 1), st.integers(0, 2),
              st.booleans()),
    st.tuples(st.just("pin"), st.sampled_from(["Never overwrite data/raw.csv",
                                               "Cite DOI 10.1000/xyz123 in every section"])),
    st.tuples(st.just("unpin")),
    st.tuples(st.just("checkpoint"), st.booleans()),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=4, max_size=14), budget=st.sampled_from([0, 160, 2_000]))
def test_between_checkpoints_each_request_starts_with_the_previous_one(steps, budget):  # Q5
    """A random session (recall hits, long tool results clipped and masked by checkpoints,
    pins and unpins) played request by request: within one checkpoint every request's wire
    messages start with the previous request's, byte for byte; the recall blocks stay
    within their budget, and a turn that finds them full gets none and says so."""
    s = Session(budget)
    # A folded past holding the facts, then a first checkpoint (Q5 starts from it).
    for k, fact in enumerate(FACTS):
        s.add(user(f"Log entry {k}: {fact}"))
        s.add(assistant(f"Noted entry {k}."))
    s.add(user("Start the review."))
    s.add(assistant("Started."))
    s.checkpoint(mask=False)
    previous: tuple[str | None, list[str]] | None = None
    requests: list[list[str]] = []
    pins: list[str] = []
    calls = 0

    def send() -> None:
        nonlocal previous
        projection = s.request()
        wire = _wire(projection)
        assert openai_problems(to_openai(projection).messages) == []
        assert anthropic_problems(to_anthropic(projection).messages) == []
        assert projection.recall_tokens <= budget
        checkpoint = projection.checkpoint.id if projection.checkpoint else None
        if previous is not None and previous[0] == checkpoint:
            assert _grows_at_its_end(previous[1], wire)
        previous = (checkpoint, wire)
        requests.append(wire)

    for step in steps:
        if step[0] == "turn":
            _, q, tools, long = step
            s.add(user(QUESTIONS[q]))
            send()
            for _ in range(tools):
                calls += 1
                s.add(tool_call(f"c{calls}", "read", {"path": f"notes/part{calls}.md"}))
                s.add(tool_result(f"c{calls}", ("line of output " * 200) if long else "ok"))
                send()
            s.add(assistant("Done."))
        elif step[0] == "pin":
            pin_id = f"pin{len(pins)}"
            pins.append(pin_id)
            s.add(pin_event(pin_id, step[1]))
        elif step[0] == "unpin" and pins:
            s.add(PinEvent(action="unpin", pin_id=pins.pop(0)))
        elif step[0] == "checkpoint":
            s.checkpoint(mask=step[1])
    # Every turn decided under the last checkpoint: its blocks fit the budget together,
    # and once they left no room for a block, a later turn was marked full.
    if s.turns is not None and budget:
        assert sum(b.tokens for b in s.turns.blocks) <= budget
        used = 0
        for _uid, block in s.turns.turns:
            if recall_full(used, budget, smallest_block()):
                assert block is None and s.turns.full
            used += block.tokens if block is not None else 0


def test_a_turn_that_finds_the_blocks_full_gets_none_and_is_a_reason_to_compact():  # Q5
    turns = RecallTurns("cp")
    smallest = smallest_block()
    query = recall_query("Which constant did Dr Okafor record?")
    # Room left: the turn is searched (None), nothing is decided yet.
    assert undecided_needs_search(turns, "u1", query, 0, 400, 400, smallest) is None
    # The blocks so far leave less than the smallest block: no block, and full.
    full = undecided_needs_search(turns, "u2", query, 400 - smallest + 1, 400, 400, smallest)
    assert full is not None and full.decided("u2") and full.full and not full.blocks
    # A request near the safe limit gets none either, but the budget is not full.
    near = undecided_needs_search(turns, "u3", query, 0, 400, smallest - 1, smallest)
    assert near is not None and near.decided("u3") and not near.full
    # A turn is decided once: the first decision stays (the one every process sends).
    block = RecallBlock(text="x", node_ids=("n1",), tokens=30, before_id="u4")
    once = turns.with_turn("u4", block).with_turn("u4", None)
    assert once.blocks == (block,)
    # Full blocks compact at the next check only when there is something to fold.
    budget = derive_budget(CAP)
    over = budget.tail_budget + 1_000
    assert recall_compaction_due(True, over + 500, budget, fixed=300, checkpoint=200)
    assert not recall_compaction_due(True, budget.tail_budget, budget, fixed=0, checkpoint=0)
    assert not recall_compaction_due(False, over + 500, budget, fixed=300, checkpoint=200)


def test_blocks_cut_to_the_limit_keep_the_earliest():  # Q5 with P1
    blocks = tuple(RecallBlock(text=f"b{i}", node_ids=(f"n{i}",), tokens=100, before_id=f"u{i}")
                   for i in range(4))
    assert within(blocks, 250) == blocks[:2]  # cut at the end: earlier prefixes stay whole
    assert within(blocks, 1_000) == blocks and within(blocks, 50) == ()


def test_the_decisions_read_back_from_json_are_the_same():  # Q5 (across processes)
    block = RecallBlock(text="[contextfold recall] x\n- node n1 (turn 1, user): fact",
                        node_ids=("n1",), tokens=21, before_id="u1")
    turns = RecallTurns("cp", (("u1", block), ("u2", None)), full=True)
    assert RecallTurns.from_json(json.loads(json.dumps(turns.to_json()))) == turns
    assert RecallTurns.from_json({"checkpoint": "cp"}) is None  # damaged: none, no error
    assert RecallTurns.from_json(None) is None


def test_prefix_breaks_are_counted_and_attributed():  # Q5
    a = ["fixed", "checkpoint:c1", "m1"]
    b = [*a, "recall:n1@x", "m2"]
    c = ["fixed", "checkpoint:c1", "m1", "m2"]  # the block of m2 went away: a break
    d = ["fixed", "checkpoint:c2", "m2"]  # a compaction: explained
    got = count_prefix_breaks([a, b, c, d])
    assert (got.requests, got.breaks, got.at_checkpoint, got.unexplained) == (4, 2, 1, (2,))


# --------------------------------------------------------------------------- the runtime


def test_replay_breaks_the_prefix_only_at_checkpoints():  # Q5 L5 (replay over memory)
    """The replay face (the product's engine over the in-memory store, with its search):
    a session whose questions each recall a folded fact. Every request starts with the
    previous one's content except where a checkpoint was made, and the recall blocks of
    the earlier turns are sent again, byte for byte."""
    from contextfold.core.models.budget import CompactionSettings
    from contextfold.replay import ManagedSession

    cap = ModelCapacity(model="q5-16k", context_window=16_384, max_output=4_096)
    budget = derive_budget(cap, CompactionSettings(auto_recall_share=0.05))
    session = ManagedSession(cap, budget)
    filler = " ".join(f"Survey note {k}: the river sector held steady." for k in range(60))
    step = 0

    def feed(message: Message):
        nonlocal step
        step += 1
        return session.step(f"n{step}", message)

    for k, fact in enumerate(FACTS):
        feed(user(f"Log entry {k}: {fact} {filler}"))
        feed(assistant(f"Noted entry {k}. {filler}"))
    records = []
    for question in QUESTIONS[:5] * 2:
        feed(user(question))
        records.append(feed(assistant("Looked it up.")))
    from contextfold.core.money.costs import projection_blocks

    got = count_prefix_breaks(projection_blocks(r.projection, session.costs) for r in records)
    assert session.compactions and any(r.projection.recalled for r in records)
    assert got.unexplained == () and got.breaks == got.at_checkpoint
    # A block, once sent, is in every later request of its checkpoint, the same bytes.
    for earlier, later in itertools.pairwise(records):
        if earlier.projection.checkpoint.id == later.projection.checkpoint.id:
            assert set(earlier.projection.recalled) <= set(later.projection.recalled)


async def test_two_processes_send_the_same_earlier_blocks(db_url):  # noqa: F811 (Q5 L5)
    """Two proxies on one database (issue 38's fleet), the mirror's face, on SQLite and
    PostgreSQL: a turn decided by one process is sent byte for byte by the other, and each
    request starts with the previous one's content whichever process built it."""
    from contextfold.runtime.mirror import Mirror
    from contextfold.store import open_store
    from tests.core.recall.test_auto_recall import FACT, FILLER, _fixed_summary
    from tests.runtime.test_runtime_support import capacity

    cap = capacity(16_000, 1_000)
    outline = ("Yesterday's outline sits in notes/outline_B7.md; its third part covers the "
               "cohort tables.")
    msgs: list[Message] = [user(FILLER * 2 + outline), assistant("saved"),
                           user(FILLER * 3 + FACT), assistant("noted"),
                           user("Now draft the introduction paragraph."), assistant("ok"),
                           user("Then tighten the wording."), assistant("ok")]
    async with await open_store(db_url) as one, await open_store(db_url) as two:
        a = Mirror(one, summarizer=_fixed_summary, background=False)
        b = Mirror(two, summarizer=_fixed_summary, background=False)
        synced = await a.sync(msgs[:7], capacity=cap, scope="q5")
        await a.record_reply(synced, msgs[7])
        assert (await a.compact(synced.session_id, capacity=cap)).status == "compacted"
        ask1 = user("Which estimator did we choose for cohort B?")
        s1 = await a.sync([*msgs, ask1], capacity=cap, scope="q5")
        first = s1.projection.recalled
        assert first and "Kaplan-Meier" in first[-1].text
        await a.record_reply(s1, assistant("Kaplan-Meier."))
        convo = [*msgs, ask1, assistant("Kaplan-Meier."),
                 user("Where is the outline with the cohort tables, notes/outline_B7.md?")]
        s2 = await b.sync(convo, capacity=cap, scope="q5")  # the other process
        assert s2.session_id == s1.session_id
        assert s2.projection.recalled[:len(first)] == first  # read back, byte for byte
        sent1, sent2 = [i.message for i in s1.items()], [i.message for i in s2.items()]
        assert sent2[:len(sent1)] == sent1
        await b.record_reply(s2, assistant("In the notes."))
        s3 = await a.sync([*convo, assistant("In the notes."), user("Thanks, go on.")],
                          capacity=cap, scope="q5")  # back on the first process
        assert s3.projection.recalled[:len(s2.projection.recalled)] == s2.projection.recalled
        sent3 = [i.message for i in s3.items()]
        assert sent3[:len(sent2)] == sent2


def test_the_check_after_a_turn_compacts_when_the_blocks_are_full():  # Q5 with A1
    """`Sizer.auto_due` takes full recall blocks as a reason to compact, under the
    automatic threshold, once the history after the checkpoint is longer than the tail."""
    from contextfold.runtime.sizing import Sizer

    budget = derive_budget(CAP).model_copy(update={"trigger": "size"})
    sizer = Sizer(CAP, budget, None, ())
    s = Session(0)
    s.add(user("Start."))
    s.add(assistant("Started."))
    s.checkpoint(mask=False)  # nothing before two user turns: no checkpoint yet
    s.add(user("Next."))
    s.add(assistant("Ok."))
    s.checkpoint(mask=False)
    words = " ".join(f"word{k}" for k in range(400))
    for k in range(8):
        s.add(user(f"Turn {k}: {words}"))
        s.add(assistant(f"Answer {k}: {words}"))
    projection = project(s.branch())
    tokens = sizer.estimate(projection).tokens
    assert budget.tail_budget < tokens < budget.auto_threshold
    assert not sizer.auto_due(projection)
    assert sizer.auto_due(projection, recall_full=True)
    short = project(Branch(nodes=tuple(s.nodes[:-14])))  # little after the checkpoint
    assert not sizer.auto_due(short, recall_full=True)


def test_a_summariser_reading_the_prefix_gets_the_blocks_the_session_sent():  # Q3 Q5
    """The plan's session prefix (what a summariser that is the session's model starts
    with) holds the recall blocks of its turns, so its request starts with the session's
    last request; a block whose message the plan's projection does not hold is left out."""
    from contextfold.core.planning.plan import Plan
    from contextfold.core.planning.planner import plan_compaction
    from contextfold.runtime.compaction import with_recalled

    s = Session(0)
    words = " ".join(f"word{k}" for k in range(300))
    for k in range(12):
        s.add(user(f"Turn {k}: {words}"))
        s.add(assistant(f"Answer {k}: {words}"))
    plan = plan_compaction(s.branch(), derive_budget(CAP), "manual", capacity=CAP)
    assert isinstance(plan, Plan) and plan.request is not None
    latest = s.nodes[-2]
    kept = RecallBlock(text="[contextfold recall] kept", node_ids=("x",), tokens=9,
                       before_id=latest.id)
    gone = RecallBlock(text="[contextfold recall] gone", node_ids=("y",), tokens=9,
                       before_id="not-on-the-branch")
    got = with_recalled(plan, (gone, kept))
    assert isinstance(got, Plan) and got.request is not None
    assert got.request.projection.recalled == (kept,)
    # The same request with the block right before its turn's user message.
    sent = to_openai(got.request.projection).messages
    at = next(i for i, m in enumerate(sent) if "Turn 11:" in str(m["content"]))
    assert str(sent[at]["content"]).index("recall] kept") < \
        str(sent[at]["content"]).index("Turn 11:")
    assert with_recalled(plan, ()) is plan
