"""Recall that comes by itself (SPEC L5): the latest request is searched in the folded part
of the branch and the best excerpts are placed after the checkpoint, labelled, with node ids,
within the recall budget, never repeating the request, never crossing branches (L4), stable
for identical hits, counted in the estimate, and never pushing a request over the limit."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.core.models.budget import CompactionSettings, derive_budget
from contextfold.core.recall.auto_recall import (
    RECALL_HEADER,
    Candidate,
    choose_block,
    latest_request,
    query_text,
    recall_query,
)
from contextfold.core.render.export import to_openai
from contextfold.core.sizing.estimator import estimate_request
from contextfold.core.sizing.fit import recall_room
from contextfold.core.values.messages import Checkpoint, Message, Node, TextPart
from contextfold.core.view.projection import Projection, checkpoint_text
from contextfold.summarize.summary import Summary
from tests.builders import assistant, user
from tests.fakeserver import Reply
from tests.runtime.test_runtime_support import (
    capacity,
    chat_requests,
    open_conversation,
    runtime_fixtures,
)
from tests.store_fixtures import backend, db_url  # noqa: F401  (fixtures)

store, close_models, fake = runtime_fixtures()

DECISION = ("We decided to use the Kaplan-Meier estimator because the censoring in cohort "
            "B is heavy, and the Zotero key for it is ZK9Q2W7R.")
# A fact the user wrote in passing, not a decision, constraint or next step: S6 does not make
# the checkpoint keep it (it keeps those), so only recall (L5) can bring it back.
FACT = ("The censoring table for cohort B came back heavy; the review notes the Kaplan-Meier "
        "estimator for it, under the Zotero key ZK9Q2W7R.")
FILLER = ("Here is a long note about reading papers and drafting paragraphs for the review; "
          "it goes on about structure, tone and the order of sections. ")


def _node(nid: str, msg: Message | None = None, cp: Checkpoint | None = None) -> Node:
    return Node(id=nid, parent_id=None, created_at=datetime(2026, 1, 1, tzinfo=UTC),
                payload=cp or msg)


def _projection(summary: str, raw: list[tuple[str, Message]]) -> Projection:
    cp = Checkpoint(summary=summary, first_kept_id=raw[0][0] if raw else None,
                    tokens_before=0, summarizer="test")
    return Projection(checkpoint=_node("cp", cp=cp),
                      messages=tuple(_node(i, m) for i, m in raw))


def _cand(nid: str, pos: int, text: str) -> Candidate:
    return Candidate(node_id=nid, position=pos, turn=pos // 2 + 1, role="user", text=text)


# --------------------------------------------------------------------------- the pure part


def test_query_takes_identifiers_first_and_is_deterministic():  # L5
    text = "Compare ZK9Q2W7R with doi 10.1000/xyz-12 on censoring and estimator choice"
    q = recall_query(text)
    assert q is not None
    assert [t.raw for t in q.terms[:2]] == ["ZK9Q2W7R", "10.1000/xyz-12"]
    assert all(not t.exact for t in q.terms)  # any term may match: no verbatim filter
    assert recall_query(text) == q
    assert recall_query("?! ... ok") is None


def test_query_is_the_latest_user_message_and_the_pending_tool_call():  # L5
    from contextfold.core.values.messages import ToolCallPart, ToolResultPart

    call = Message(role="assistant", parts=(ToolCallPart(id="c1", name="zotero_get",
                                                         input={"key": "ZK9Q2W7R"}),))
    result = Message(role="tool", parts=(ToolResultPart(call_id="c1", output="item"),))
    proj = _projection("s", [("a", user("old question")), ("b", assistant("old answer")),
                             ("c", user("which estimator did we choose")), ("d", call),
                             ("e", result)])
    text = query_text(proj)
    assert "which estimator" in text and "ZK9Q2W7R" in text and "old question" not in text
    assert latest_request(proj) == ("c", "which estimator did we choose", "ZK9Q2W7R")
    q = recall_query(*latest_request(proj)[1:])
    assert q is not None and q.terms[0].raw == "ZK9Q2W7R"
    # A tool call adds its identifiers, never its words (they would re-weigh the matches
    # every round of a tool loop).
    q = recall_query("which estimator", "notes/draft_3.md careful reading")
    assert q is not None and "notes/draft_3.md" in [t.raw for t in q.terms]
    assert not {"careful", "reading"} & {t.raw for t in q.terms}
    folded = _projection("s", [("d", call), ("e", result)])  # its request was folded (K6)
    assert latest_request(folded) is None
    assert choose_block([_cand("n1", 1, DECISION)], folded, recall_query(DECISION),
                        300) is None


def test_block_takes_the_hits_holding_most_terms_not_the_stores_first():  # L5
    """The store's bm25 puts short messages holding one rare term before a long one holding
    them all; the block keeps the one that answers (the fair bench's identifiers-250)."""
    ask = "What did we note on the silver bellows?"
    proj = _projection("Earlier work.", [("ask", user(ask))])
    query = recall_query(ask)
    assert query is not None
    singles = [_cand(f"s{i}", i, f"A short note on the {word} pages, read once.")
               for i, word in enumerate(["silver", "bellows"] * 3)]
    both = _cand("both", 40, FILLER * 4 + "Our note on the silver bellows: its Zotero key "
                 "is QX7T4PLM. " + FILLER * 4)
    block = choose_block([*singles, both], proj, query, 400)
    assert block is not None and "both" in block.node_ids and "QX7T4PLM" in block.text


def test_block_drops_what_is_raw_or_in_the_checkpoint():  # L5
    proj = _projection("Done: chose the estimator for cohort A.",
                       [("raw1", user("estimator talk in the tail")),
                        ("ask", user("which estimator for cohort B and the censoring"))])
    q = recall_query("which estimator for cohort B and the censoring")
    assert q is not None
    cands = [_cand("raw1", 9, "estimator talk in the tail"),
             _cand("n1", 1, "Done: chose the estimator for cohort A.\n" + DECISION)]
    block = choose_block(cands, proj, q, budget=300)
    assert block is not None and block.node_ids == ("n1",) and block.before_id == "ask"
    assert block.text.startswith(RECALL_HEADER)
    assert "node n1" in block.text and "Kaplan-Meier" in block.text
    assert "cohort A" not in block.text  # that sentence is already in the checkpoint
    assert "raw1" not in block.text


def test_identical_hits_give_a_byte_identical_block_in_branch_order():  # L5 (prompt cache)
    proj = _projection("summary", [("ask", user("estimator censoring cohort Zotero key"))])
    q = recall_query("estimator censoring cohort Zotero key")
    assert q is not None
    a = _cand("n1", 1, DECISION)
    b = _cand("n2", 5, "For cohort C the censoring estimator has no Zotero key.")
    one = choose_block([a, b], proj, q, budget=400)
    two = choose_block([b, a], proj, q, budget=400)  # ranked the other way round
    assert one is not None and one == two
    assert one.text.index("node n1") < one.text.index("node n2")


def test_the_telling_match_wins_over_common_words():  # L5
    """Terms are weighed by how rare they are among the matches: the one message naming
    cohort33 is recalled, the many that share only "method" and "section" are not, and of
    it only the sentence that says what was decided."""
    proj = _projection("summary", [("ask", user("Which method did we settle on for cohort33, "
                                                "for the methods section?"))])
    q = recall_query(query_text(proj))
    assert q is not None
    noise = [_cand(f"n{i}", i, "method section draft outline method section. " * 6)
             for i in range(1, 5)]
    fact = _cand("f", 9, "method section review. For cohort33 we decided to use Cox "
                         "regression because reviewers asked; the key is ATP6QCQC.")
    block = choose_block([*noise, fact], proj, q, budget=400)
    assert block is not None and block.node_ids == ("f",)
    assert "Cox regression" in block.text and "review." not in block.text


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(min_value=0, max_value=600),
       texts=st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=8))
def test_block_never_exceeds_its_budget(budget, texts):  # L5
    proj = _projection("summary", [("ask", user("estimator"))])
    q = recall_query("estimator censoring cohort " + " ".join(texts))
    if q is None:
        return
    cands = [_cand(f"n{i}", i, t + " estimator censoring") for i, t in enumerate(texts)]
    block = choose_block(cands, proj, q, budget=budget)
    if block is not None:
        from contextfold.core.text.text_estimate import estimate_text

        assert block.tokens == estimate_text(block.text) <= budget
        assert set(block.node_ids) <= {c.node_id for c in cands}


def test_recall_room_never_passes_the_limit():  # L5 with P1
    assert recall_room(900, 1_000, 300) == 100
    assert recall_room(1_200, 1_000, 300) == 0
    assert recall_room(0, 1_000, 300) == 300
    assert recall_room(0, 1_000, 0) == 0


def test_the_estimate_and_the_export_carry_the_block_before_the_request():  # L5, Y4
    from contextfold.core.view.projection import RecallBlock, prefix_text

    proj = _projection("summary", [("t", user("tail message")), ("a", assistant("reply")),
                                   ("u", user("which estimator"))])
    cap = capacity(16_000)
    plain = estimate_request(proj, cap).tokens
    block = RecallBlock(text=RECALL_HEADER + "\n- node n1 (turn 1, user): " + DECISION,
                        node_ids=("n1",), tokens=60, before_id="u")
    with_block = Projection(checkpoint=proj.checkpoint, messages=proj.messages,
                            recalled=(block,))
    assert estimate_request(with_block, cap).tokens > plain
    sent = json.dumps(to_openai(with_block).messages)
    assert sent.index("summary") < sent.index("tail message") < sent.index("Kaplan-Meier") \
        < sent.index("which estimator")
    # The cached prefix (checkpoint and pins) does not hold it (SPEC Y4).
    assert prefix_text(with_block) == prefix_text(proj)


def test_share_zero_disables_and_the_default_is_small():  # L5
    cap = capacity(32_000, 4_000)
    default = derive_budget(cap)
    assert 0 < default.recall_budget <= default.safe_input_limit * 0.06  # issue 40: 6%
    assert derive_budget(cap, CompactionSettings(auto_recall_share=0)).recall_budget == 0


# --------------------------------------------------------------------------- the runtime


async def _fixed_summary(plan) -> Summary:
    """A valid summary that kept nothing of the decision (a lossy summariser)."""
    from contextfold.summarize.prompts import sections_for

    body = "\n\n".join(f"## {name}\n- (none)" for name in sections_for(plan.profile)[1:])
    first = sections_for(plan.profile)[0]
    return Summary(f"## {first}\n- Earlier turns discussed the review outline.\n\n{body}",
                   "fixed")


async def _folded_session(store, fake, **options):
    conv = await open_conversation(store, fake, "openai", window=16_000,
                                   summarizer=_fixed_summary, **options)
    fake.enqueue(Reply(text="noted"), Reply(text="ok"), Reply(text="ok"))
    await conv.send(FILLER * 3 + FACT + " " + FILLER)
    await conv.send("Now draft the introduction paragraph about the review.")
    await conv.send("Then tighten the wording of the second paragraph.")
    outcome = await conv.compact()
    assert outcome.status == "compacted"
    return conv


def _sent_text(request) -> str:
    return json.dumps(request.messages, ensure_ascii=False)


async def test_conversation_recalls_a_folded_fact_by_itself(fake, store):  # L5
    conv = await _folded_session(store, fake)
    first = (await conv.history()).nodes[0]
    assert first.id not in {n.id for n in conv.projection().messages}
    assert "Kaplan-Meier" not in checkpoint_text(conv.projection().summary)
    fake.enqueue(Reply(text="Kaplan-Meier"))
    result = await conv.send("Which estimator did we choose for cohort B, and its Zotero key?")
    sent = _sent_text(chat_requests(fake)[-1])
    assert "From earlier in this session" in sent and f"node {first.id}" in sent
    assert "Kaplan-Meier" in sent and "ZK9Q2W7R" in sent
    assert sent.index("Then tighten the wording") < sent.index("From earlier in this session") \
        < sent.index("Which estimator did we")  # right before the latest request

    # The same session with the share at 0 sends no block, and its estimate is smaller by
    # what the block costs: the estimate counts it.
    off = await _folded_session(store, fake, settings=CompactionSettings(auto_recall_share=0))
    fake.enqueue(Reply(text="Kaplan-Meier"))
    plain = await off.send("Which estimator did we choose for cohort B, and its Zotero key?")
    assert "From earlier in this session" not in _sent_text(chat_requests(fake)[-1])
    assert result.request_tokens > plain.request_tokens
    await off.close()
    await conv.close()


def _blocks_sent(fake, before: int, ask: str, *, placed: bool = False) -> list:
    """The recall block of each chat request after the first `before`: the text from its
    header to the question `ask` (`placed`: with where it starts in the request)."""
    blocks = []
    for request in chat_requests(fake)[before:]:
        sent = _sent_text(request)
        start = sent.index("[contextfold recall]")
        block = sent[start:sent.index(ask, start)]
        blocks.append((start, block) if placed else block)
    return blocks


async def test_the_block_is_stable_through_a_tool_loop(fake, store):  # L5 (prompt cache)
    from tests.fakeserver import ToolCallSpec

    async def run(calls):
        from contextfold.core.values.messages import ToolResultPart

        return [ToolResultPart(call_id=c.id, name=c.name, output="done") for c in calls]

    conv = await _folded_session(store, fake, run_tools=run)
    before = len(chat_requests(fake))
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("note", {"text": "x"}),)),
                 Reply(text="Kaplan-Meier"))
    await conv.send("Which estimator did we choose for cohort B?")
    blocks = _blocks_sent(fake, before, "Which estimator", placed=True)
    assert len(blocks) == 2 and blocks[0] == blocks[1]
    assert conv._auto_recall.searches == 1  # the second request reused the first's hits
    await conv.close()


async def test_a_pending_call_never_changes_the_turns_block(fake, store):  # L5 (Y4)
    """The tool loop's second request names an identifier that matches another folded
    message: the turn keeps the block its first request was sent with, byte for byte."""
    from contextfold.core.values.messages import ToolResultPart
    from tests.fakeserver import ToolCallSpec

    async def run(calls):
        return [ToolResultPart(call_id=c.id, name=c.name, output="read") for c in calls]

    conv = await open_conversation(store, fake, "openai", window=16_000,
                                   summarizer=_fixed_summary, run_tools=run)
    fake.enqueue(Reply(text="noted"), Reply(text="saved"), Reply(text="ok"), Reply(text="ok"))
    await conv.send(FILLER * 2 + "Yesterday's outline sits in notes/outline_B7.md; its third "
                    "part covers the cohort tables. " + FILLER)
    await conv.send(FILLER * 3 + FACT + " " + FILLER)
    await conv.send("Now draft the introduction paragraph about the review.")
    await conv.send("Then tighten the wording of the second paragraph.")
    assert (await conv.compact()).status == "compacted"
    before = len(chat_requests(fake))
    fake.enqueue(Reply(tool_calls=(ToolCallSpec("read_file",
                                                {"path": "notes/outline_B7.md"}),)),
                 Reply(text="Kaplan-Meier"))
    await conv.send("Which estimator?")
    blocks = _blocks_sent(fake, before, "Which estimator?")
    assert len(blocks) == 2 and "ZK9Q2W7R" in blocks[0]
    # Without the turn's memo the call's notes/outline_B7.md would add the outline's
    # excerpt here, and re-bill everything after the block.
    assert blocks[1] == blocks[0]
    await conv.close()


async def test_a_fork_never_recalls_the_other_branch(fake, store):  # L5 with L4
    conv = await open_conversation(store, fake, "openai", window=16_000,
                                   summarizer=_fixed_summary)
    fake.enqueue(Reply(text="shared"), Reply(text="ok"), Reply(text="ok"), Reply(text="ok"))
    shared = await conv.send("Shared opening about the review outline.")
    await conv.send(FACT)  # only on the original branch
    forked = await conv.fork(shared.nodes[-1].id)
    fake.enqueue(Reply(text="ok"), Reply(text="ok"))
    await forked.send("Draft the introduction about the review outline.")
    await forked.send("Then tighten the wording.")
    assert (await forked.compact()).status == "compacted"
    fake.enqueue(Reply(text="?"))
    await forked.send("Which estimator did we choose for cohort B, Kaplan-Meier?")
    sent = _sent_text(chat_requests(fake)[-1])
    assert "ZK9Q2W7R" not in sent
    await forked.close()
    await conv.close()


async def test_the_mirror_places_the_block_before_the_request(db_url):  # noqa: F811 (L5)
    """The proxy's face, on SQLite and PostgreSQL."""
    from contextfold.store import open_store

    async with await open_store(db_url) as store:
        await _mirror_places_the_block(store)


async def _mirror_places_the_block(store) -> None:
    from contextfold.runtime.mirror import Mirror

    mirror = Mirror(store, summarizer=_fixed_summary, background=False)
    cap = capacity(16_000, 1_000)
    msgs: list[Message] = [user(FILLER * 3 + FACT), assistant("noted"),
                           user("Now draft the introduction paragraph."), assistant("ok"),
                           user("Then tighten the wording."), assistant("ok")]
    synced = await mirror.sync(msgs[:5], capacity=cap, scope="l5")
    await mirror.record_reply(synced, msgs[5])
    outcome = await mirror.compact(synced.session_id, capacity=cap)
    assert outcome.status == "compacted"
    ask = user("Which estimator did we choose for cohort B?")
    synced = await mirror.sync([*msgs, ask], capacity=cap, scope="l5")
    assert synced.projection.recalled is not None
    prefix = synced.prefix_text
    assert prefix is not None and "Kaplan-Meier" not in prefix  # Y4: the prefix is as it was
    items = synced.items()
    block, latest = items[-2], items[-1]
    assert block.recall and block.index is None and latest.index == len(msgs) and \
        latest.verbatim  # Y2: the request itself goes out as sent
    assert isinstance(block.message.parts[0], TextPart)
    assert RECALL_HEADER in block.message.text and "Kaplan-Meier" in block.message.text
    assert synced.estimate.tokens <= synced.budget.safe_input_limit

    # The proxy's Anthropic request stays valid (roles alternate, the block joins the
    # latest user message), and so does its OpenAI one.
    from contextfold.core.render.validity import anthropic_problems, openai_problems
    from contextfold.proxy.wire import Parsed, build
    from contextfold.wire import anthropic_messages, openai_chat

    for protocol, wire, problems in (("anthropic", anthropic_messages, anthropic_problems),
                                     ("openai", openai_chat, openai_problems)):
        body = {"model": "m", "max_tokens": 100,
                "messages": [m for msg in [*msgs, ask] for m in wire.render_message(msg)]}
        parsed = Parsed(protocol=protocol, model="m", system=None, tools=[],
                        messages=[*msgs, ask])
        sent = build(parsed, body, synced)
        assert problems(sent["messages"]) == [], protocol
        assert "Kaplan-Meier" in json.dumps(sent["messages"])


class _Searching:
    """A store whose search returns the given messages for every query."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    async def search_history_each(self, session_id, queries, *, limit, any_term):
        from contextfold.store.values import RecallHit

        return [[RecallHit(node=n, position=i, turn=i // 2 + 1)
                 for i, n in enumerate(self.nodes)] for _ in queries]


async def test_the_match_memo_counts_what_it_really_holds():  # Y14
    import gc
    import random
    import tracemalloc

    from bench.varied_data import varied_message

    from contextfold.core.recall.auto_recall import recall_query
    from contextfold.runtime.auto_recall import AutoRecall

    rng = random.Random(38)
    nodes = [_node(f"n{i}", user(varied_message(rng))) for i in range(6)]
    recall = AutoRecall(_Searching(nodes))  # type: ignore[arg-type]
    queries = [q for q in (recall_query(f"compare the parser {i} with cache_{i}")
                           for i in range(8)) if q is not None]
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for n, q in enumerate(queries):  # one entry per checkpoint: 8 memos of 6 matches
            found = await recall._candidates("s", f"cp{n}", [q])
            assert found is not None and len(found[0]) == len(nodes)
            for c in found[0]:  # what choosing a block works out, kept with the match
                c.words  # noqa: B018
            del found, c
        gc.collect()
        measured = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    reported = recall._memo.bytes
    assert len(recall._memo) == len(queries)
    assert measured / 2 <= reported <= measured * 2, (reported, measured)
