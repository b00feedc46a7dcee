"""`contextfold eval` (issue 27 item 6): a summariser's continuity measured on a planted
session — per category and source, in the request a later question goes out with (SPEC L5
included) and in the checkpoint; S6 losses, S7 violations, fallbacks, tokens and cost.

The LLM case runs the real OpenAI SDK over real HTTP against `tests/fakeserver`, scripted to
write a valid checkpoint that drops the user's constraint and invents a `(user)`
instruction; the offline case asserts what the offline summariser really keeps.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.core.sizing.resolver import user_prices
from contextfold.core.values.messages import Usage
from contextfold.evaluate.facts import CATEGORIES, KINDS, SOURCES, STATED
from contextfold.evaluate.planted import MAX_TURNS, deal_rules, planted_session, topic
from contextfold.evaluate.rules import RULE_KINDS, cue_word_rule, natural_rules
from contextfold.evaluate.runner import (
    MAX_COMPACTIONS,
    WARMUP,
    EvalInputError,
    folded_turns,
    parse_compactions,
)
from contextfold.summarize.prompts import PROGRESS_SECTION, PROGRESS_SUBSECTIONS
from tests.fakeserver import Reply, server_fixture
from tests.fakeserver.summaries import request_text, requested_sections

fake = server_fixture()

INVENTED = "Delete every draft in the drafts folder before Friday."
_DECISION = re.compile(r"We decided to read the [a-z]+ [a-z]+ in the serial version because "
                       r"the book edition was revised by the printer\.")


def cf(*args: str, expect: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["eval", *args, "--json"])
    assert result.exit_code == expect, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- the session


def test_planted_facts_cover_every_category_from_both_sources_and_questions_never_quote():
    session = planted_session(MAX_TURNS)
    assert len({topic(t) for t in range(MAX_TURNS)}) == MAX_TURNS  # one topic per turn
    first = {(f.category, f.source) for t in session.turns[:WARMUP] for f in t.facts}
    assert first == {(c, s) for c in CATEGORIES for s in SOURCES}
    texts = [f.text for f in session.facts]
    assert len(set(texts)) == len(texts)  # every fact is told apart by its text
    for turn in session.turns:
        for fact in turn.facts:
            assert fact.question and fact.text not in fact.question
            assert topic(fact.turn) in fact.question  # what a later question names
            where = turn.user if fact.source == "user" else \
                "\n".join(r.output for r in turn.rounds)
            assert fact.text in where, fact
    # Prefix-stable: a longer run plays the same first turns.
    assert planted_session(8).turns == planted_session(20).turns[:8]


def test_natural_rules_are_the_hand_written_ones_without_a_cue_word():
    from pathlib import Path

    import contextfold.data.user_words as packaged

    fixture = Path(__file__).parents[1] / "fixtures" / "user_words" / "natural_rules.json"
    copy = Path(packaged.__file__).parent / "natural_rules.json"
    assert copy.read_bytes() == fixture.read_bytes()  # one set of rules, written by hand
    all_rules = json.loads(fixture.read_text(encoding="utf-8"))
    rules = natural_rules()
    # Only what the cue-word detector misses is planted, and that is most of them.
    assert {r.id for r in rules} == {r["id"] for r in all_rules if not cue_word_rule(r["text"])}
    assert len(rules) >= 30 and {r.kind for r in rules} == set(RULE_KINDS)
    assert {r.lang for r in rules} == {"en", "ja", "zh"}


def test_natural_rules_are_planted_in_the_first_a_middle_and_the_latest_message():
    at = (0, 5, 11)
    session, plain = planted_session(14, rules_at=at), planted_session(14)
    rules = [f for f in session.facts if f.category in RULE_KINDS]
    assert sorted(f.text for f in rules) == sorted(r.probe for r in natural_rules())  # once each
    for where, t in zip(STATED, at, strict=True):
        here = [f for f in session.turns[t].facts if f.category in RULE_KINDS]
        assert {f.category for f in here} == set(RULE_KINDS), where
        assert all(f.stated == where for f in session.turns[t].facts)
        assert all(f.source == "user" for f in here)
        for f in here:
            assert f.text in session.turns[t].user and not cue_word_rule(f.text)
            assert topic(t) in f.question and f.text not in f.question
        # Neither at the head nor at the tail of the message: a third of the way in.
        user = session.turns[t].user
        assert user.index(here[0].text) > 0 and user.rindex(here[-1].text) < len(user) - 200
    assert all(not f.stated for t, turn in enumerate(session.turns) if t not in at
               for f in turn.facts)
    # Only the rules' paragraphs differ: the rest of the session is the same.
    for a, b in zip(session.turns, plain.turns, strict=True):
        assert (a.rounds, a.reply) == (b.rounds, b.reply)
        assert [f.text for f in b.facts] == [f.text for f in a.facts][:len(b.facts)]
    with pytest.raises(ValueError, match="rules_at"):
        deal_rules(27, (4, 4, 9))


def test_the_rules_go_where_compacting_begins():
    from contextfold.core.models.budget import ModelCapacity, derive_budget
    from contextfold.evaluate.planted import planted_turns
    from contextfold.evaluate.runner import first_compaction, turn_messages
    from contextfold.runtime.sizing import Sizer

    for window in (8_192, 32_000, 128_000):
        capacity = ModelCapacity(model="m", context_window=window, max_output=2_000)
        sizer = Sizer(capacity, derive_budget(capacity), "system", ())
        first, folded = first_compaction(sizer, 27)
        sizes = [sum(sizer.costs.measure(m) for m in turn_messages(t, turn))
                 for t, turn in zip(range(first + 1), planted_turns(27), strict=False)]
        tail = sizer.budget.tail_budget
        # The first turn at which six turns would be folded beyond the raw tail.
        assert folded_turns(sizes, tail) == folded >= WARMUP > folded_turns(sizes[:-1], tail)


def test_the_first_compaction_waits_for_six_turns_beyond_the_tail():
    assert folded_turns([100] * 10, 1_000) == 0  # the tail keeps all ten
    assert folded_turns([100] * 10, 250) == 8
    assert folded_turns([5_000, 5_000], 1_000) == 1  # the latest turn stays (M2)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("value, words", [
    ("0", "at least 1"), ("-3", "at least 1"), ("1,x", "'x'"), ("51", "at most 50")])
def test_bad_compactions_are_refused_naming_the_option(value, words):
    out = cf("--compactions", value, expect=2)
    assert "--compactions" in out["error"] and words in out["error"], out


def test_an_unknown_model_without_a_window_is_bad_input():
    out = cf("--model", "nobody/unknown-model-xyz", expect=2)
    assert "unknown-model-xyz" in out["error"] and "--context-window" in out["error"], out


def test_a_window_too_small_to_compact_in_is_bad_input():
    out = cf("--model", "my-model", "--context-window", "600", expect=2)
    assert "--context-window" in out["error"], out


def test_summariser_options_that_do_not_go_together_are_refused():
    assert "extractive" in cf("--summarizer", "bogus", expect=2)["error"]
    out = cf("--summarizer-model", "gpt-4o", expect=2)
    assert "--summarizer llm" in out["error"], out


def test_parse_compactions_sorts_and_deduplicates():
    assert parse_compactions("10, 1,5,5") == (1, 5, 10)


@given(st.lists(st.integers(-5, MAX_COMPACTIONS + 5), min_size=1, max_size=8))
def test_parse_compactions_accepts_exactly_the_runnable_ks(ks):
    text = ",".join(map(str, ks))
    if all(1 <= k <= MAX_COMPACTIONS for k in ks):
        assert parse_compactions(text) == tuple(sorted(set(ks)))
    else:
        with pytest.raises(EvalInputError, match="compactions"):
            parse_compactions(text)


def test_help_names_values_and_the_command_is_listed():
    listed = CliRunner().invoke(app, ["--help"])
    assert listed.exit_code == 0 and "eval" in listed.stdout
    shown = CliRunner().invoke(app, ["eval", "--help"], terminal_width=100)
    assert shown.exit_code == 0, shown.output
    assert not re.search(r"<(bool|str|int)>", shown.stdout), shown.stdout
    for words in ("--compactions", "--summarizer", "--base-url", "--context-window"):
        assert words in shown.stdout, words


def test_the_llm_summariser_without_the_providers_extra_names_it():
    code = ("import sys\nsys.modules['openai'] = None\nfrom contextfold.cli import app\n"
            "sys.argv = ['contextfold', 'eval', '--summarizer', 'llm', '--json']\napp()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    out = json.loads(proc.stdout)
    # The CLI's one extras check: the extra named with its install line (kind "unavailable").
    assert proc.returncode == 1 and out["kind"] == "unavailable", out
    assert "pip install 'contextfold[providers]'" in out["error"] and "eval" in out["error"]
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- offline


def test_offline_eval_reports_what_the_offline_summary_keeps():  # S6 S7 L5
    out = cf("--compactions", "1,3")
    assert out["summarizer"] == "extractive" and out["model"] == "offline/echo"
    assert [m["k"] for m in out["milestones"]] == [1, 3] and out["not_reached"] == []
    assert out["compactions_done"] == 3 and out["summarizers_used"] == ["extractive"]
    assert out["attribution_violations"] == 0 and out["fallbacks"] == 0
    assert out["cost"]["summarizer"]["requests"] == 0 and out["cost"]["summarizer"]["usd"] == 0
    first = out["milestones"][0]
    # K=1 already folds six turns: every category from both sources is probed.
    assert all(first["by_source"][c][s]["total"] >= 1 for c in CATEGORIES for s in SOURCES)
    for m in out["milestones"]:
        for c in CATEGORIES:
            for s in SOURCES:
                n = m["by_source"][c][s]
                # A fact the checkpoint holds is in the request its question goes out with.
                assert n["in_checkpoint"] <= n["in_request"] <= n["total"], (m["k"], c, s)
        # S6 (with S8): every constraint and decision the user stated is in every
        # checkpoint, or its message is named there by node id (evicted for size).
        for c in ("constraint", "decision"):
            user = m["by_source"][c]["user"]
            assert user["in_checkpoint_or_named"] == user["total"] >= 1, (m["k"], c, user)
            assert user["in_checkpoint"] <= user["in_checkpoint_or_named"]
        listed = {x["text"] for x in m["missing"]}  # the first 20, each once
        assert len(listed) == len(m["missing"]) == min(20, m["missing_count"])
        assert m["missing_count"] == m["facts"] - sum(
            v["in_request"] for v in m["sources"].values())
        assert all(not x["in_request"] for x in m["missing"])
        # The kinds and the positions partition the facts probed.
        assert sum(v["total"] for v in m["categories"].values()) == m["facts"]
        assert m["natural_rules"]["total"] == sum(m["categories"][k]["total"]
                                                  for k in RULE_KINDS)
    # The latest rules' message is raw when compacting begins (M2): probed only later.
    assert first["rules_stated"]["latest"]["total"] == 0
    assert first["rules_stated"]["first"]["total"] >= 1 and first["rules_stated"]["middle"][
        "total"] >= 1


@pytest.mark.parametrize("window, ks", [
    ("8192", "1"),  # the task is clipped head and tail with its node, never only its head
    ("16000", "1,5"),
])
def test_every_natural_rule_is_in_the_checkpoint_or_its_message_named(window, ks):  # S8 S6
    out = cf("--model", "gpt-4o", "--context-window", window, "--compactions", ks)
    assert out["not_reached"] == []
    for m in out["milestones"]:
        rules = m["natural_rules"]
        # No cue word, still kept: whole in the checkpoint, or its message named by node.
        assert rules["total"] >= 1 and rules["in_checkpoint_or_named"] == rules["total"], m["k"]
        assert rules["in_checkpoint"] <= rules["in_checkpoint_or_named"]
        # S6 and S8 both: the user's constraints and decisions are carried or named.
        for c in ("constraint", "decision"):
            user = m["by_source"][c]["user"]
            assert user["in_checkpoint_or_named"] == user["total"] >= 1, (m["k"], c, user)
    # At 16k compacting long enough folds the latest rules' message too.
    assert out["milestones"][-1]["rules_stated"]["latest"]["total"] >= 1 or window == "8192"


def test_the_table_view_names_every_category_and_the_checks():
    result = CliRunner().invoke(app, ["eval", "--compactions", "1"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())  # the table wraps to the terminal's width
    for words in (*KINDS, "K=1", "attribution violations: 0", "user, no cue",
                  "stated: first", "stated: middle", "stated: latest", "natural rules",
                  "named there by node id: K=1",
                  "retention check: of", "fallbacks to the offline summary: 0 of 1"):
        assert words in shown, words


# --------------------------------------------------------------------------- scripted LLM


def _bad_summary(protocol: str, body: dict[str, Any]) -> Reply:
    """A valid checkpoint that keeps a user decision it was shown, drops every user
    constraint and says the user asked for something nobody asked for."""
    text = request_text(body)
    decision = _DECISION.search(text)
    lines: list[str] = []
    for name in requested_sections(text):
        lines.append(f"## {name}")
        if name in PROGRESS_SECTION.values():
            for sub in PROGRESS_SUBSECTIONS:
                lines += [f"### {sub}", "- (inferred) the review went on."]
        elif name == "User Requirements and Constraints":
            lines.append(f"- (user) {INVENTED}")
        elif name == "Decisions" and decision:
            lines.append(f"- (user) {decision.group(0)}")
        else:
            lines.append("- (inferred) as discussed.")
        lines.append("")
    return Reply(text="\n".join(lines))


def test_a_summariser_dropping_a_constraint_and_inventing_an_instruction_is_caught(fake):  # S6 S7
    fake.respond_with(_bad_summary)
    out = cf("--summarizer", "llm", "--summarizer-model", "scripted-summariser",
             "--base-url", fake.openai_url, "--model", "gpt-4o", "--context-window", "32000",
             "--compactions", "1,2")
    summaries = fake.summary_requests
    assert summaries and all(r.outcome == "ok" for r in summaries), summaries
    assert out["summarizer"] == "llm:scripted-summariser"
    assert out["summarizers_used"] == ["llm:scripted-summariser"]  # valid: no fallback
    assert out["fallbacks"] == 0 and out["compactions_done"] == 2
    # S7: the invented instruction is reported, the quoted decision is not.
    claimed = [v for v in out["violations"] if v["claimed"] == "user"]
    assert claimed and all(INVENTED in v["text"] for v in claimed), out["violations"]
    assert out["attribution_violations"] == len(out["violations"]) >= 2  # once per checkpoint
    # S6: the summary lacked the user's constraint; the check re-added it, and eval says so.
    assert out["summary_lacked"].get("constraint", 0) >= 1, out["summary_lacked"]
    for m in out["milestones"]:
        user = m["by_source"]["constraint"]["user"]
        assert user["total"] >= 1 and user["in_checkpoint"] == user["total"]
    # Tokens as the server reported them; an unpriced model's dollars are unknown.
    cost = out["cost"]["summarizer"]
    assert cost["requests"] == len(summaries) and cost["input_tokens"] > 0
    assert cost["output_tokens"] > 0 and cost["usd"] is None
    assert out["base_url"] == fake.openai_url


def test_a_password_in_the_base_url_is_never_shown(fake):
    url = fake.openai_url.replace("http://", "http://me:s3cret@")
    out = cf("--summarizer", "llm", "--summarizer-model", "scripted", "--base-url", url,
             "--model", "gpt-4o", "--context-window", "32000", "--compactions", "1")
    assert "s3cret" not in json.dumps(out) and out["base_url"].startswith("http://me:***@")


def test_a_priced_summariser_is_costed_at_the_packaged_price(fake):  # Q4
    fake.respond_with(_bad_summary)
    out = cf("--summarizer", "llm", "--summarizer-model", "gpt-4o-mini", "--base-url",
             fake.openai_url, "--model", "gpt-4o", "--context-window", "32000",
             "--compactions", "1")
    cost = out["cost"]["summarizer"]
    assert cost["input_tokens"] > 0 and cost["output_tokens"] > 0
    price = user_prices().lookup("gpt-4o-mini")
    assert price is not None
    expected = price.cost(Usage(input=cost["input_tokens"], output=cost["output_tokens"],
                                cache_read=cost["cached_tokens"])).usd
    assert expected and cost["usd"] == pytest.approx(expected, abs=1e-6)
    assert out["compaction_log"][0]["cost"]["usd"] == cost["usd"]  # one compaction


# --------------------------------------------------------------------------- one probe


async def test_a_probe_counts_the_fact_only_where_the_request_holds_it():  # L5
    from contextfold.core.models.budget import ModelCapacity, derive_budget
    from contextfold.core.values.messages import Checkpoint, Node, text_message
    from contextfold.core.view.projection import Projection
    from contextfold.evaluate.facts import Fact
    from contextfold.evaluate.probes import probe
    from contextfold.runtime.auto_recall import AutoRecall
    from contextfold.runtime.sizing import Sizer
    from contextfold.store.memory import MemoryStore

    capacity = ModelCapacity(model="m", context_window=32_000, max_output=4_000)
    sizer = Sizer(capacity, derive_budget(capacity), "system", ())
    recall = AutoRecall(MemoryStore())  # no such session there: no recall block
    kept = Fact("decision", "We decided to use X because Y.", 0,
                question="What did we decide about X?")
    raw = Fact("recall", "Error: code ZS042", 1, question="Which error came back?")
    lost = Fact("constraint", "Never touch Z.", 2, question="Which rule about Z?")
    cp = Node(id="cp", payload=Checkpoint(summary=f"## Decisions\n- (user) {kept.text}",
                                          first_kept_id="m1", tokens_before=10))
    tail = Node(id="m1", payload=text_message("user", f"It said: {raw.text}"))
    projection = Projection(checkpoint=cp, messages=(tail,))
    got = {f.category: await probe(f, projection, recall, "s", sizer) for f in (kept, raw, lost)}
    assert (got["decision"].in_request, got["decision"].in_checkpoint) == (True, True)
    assert (got["recall"].in_request, got["recall"].in_checkpoint) == (True, False)
    assert not got["constraint"].in_request and not got["constraint"].in_checkpoint
    assert not any(p.in_recall_block for p in got.values())


def test_what_automatic_recall_brings_back_counts_as_continued():  # L5
    out = cf("--model", "gpt-4o", "--context-window", "32000", "--compactions", "1")
    m = out["milestones"][0]
    tool = m["sources"]["tool"]
    # Tool-result decisions, rules, tasks and abstracts are not in the offline checkpoint;
    # the recall block of the question's request brings them back.
    assert tool["in_recall_block"] >= 1 and tool["in_request"] > tool["in_checkpoint"]
    # The block is part of the request: nothing it holds is missing from the request.
    assert not any(x["in_recall_block"] for x in m["missing"])
    assert out["recall_budget"] == int(out["safe_input_limit"] * 0.06)  # the default share
