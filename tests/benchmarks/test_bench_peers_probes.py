"""The fair continuity bench's probe questions (`bench/peers/continuity.py`, issue 27 item 7):
how they are built, and how a request is scored against them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from bench.peers.common import Neutral, body_of, call_points, echo_summary
from bench.peers.continuity import (
    BUCKETS,
    CATEGORIES,
    FACT_RE,
    MAX_HOOKS,
    MIN_AGE,
    facts_in,
    hook,
    planted_session,
    probe_points,
    run_continuity,
)
from bench.peers.figures import probe_share, probe_targets
from bench.peers.reference import FullHistory
from bench.peers.synth import research_session

N = 1_200


@pytest.fixture(scope="module")
def session() -> list[Neutral]:
    return planted_session(N)


def _questions(msgs: Sequence[Neutral]) -> list[Neutral]:
    return [m for m in msgs if m.get("probe")]


def test_probe_questions_name_a_hook_only_the_planted_message_has(session):
    questions = _questions(session)
    assert len(questions) >= 30 and {q["probe"]["category"] for q in questions} == \
        set(CATEGORIES)
    assert len({q["probe"]["fact"] for q in questions}) == len(questions)  # asked once each
    planted = [m for m in session if not m.get("probe")]
    for q in questions:
        text = body_of(q["text"])
        assert not FACT_RE.search(text), text  # never the fact itself
        assert q["probe"]["hook"] in text
        holders = [m for m in planted if q["probe"]["hook"] in m["text"]]
        assert len(holders) == 1, q["probe"]
        assert f"FACT-{q['probe']['fact']}" in holders[0]["text"]
        assert session.index(holders[0]) <= session.index(q) - MIN_AGE
    # The answer of a probe turn plants nothing and names no hook.
    for k in probe_points(session):
        assert session[k]["role"] == "assistant" and not facts_in(session[k]["text"])
        assert session[k - 1]["probe"]["hook"] not in session[k]["text"]


def test_hooks_are_unique_and_foreign_to_the_session():
    pairs = [hook(n) for n in range(MAX_HOOKS)]
    assert len(set(pairs)) == MAX_HOOKS
    with pytest.raises(ValueError):
        hook(MAX_HOOKS)
    words = set(re.findall(r"[a-z]+", " ".join(m["text"] for m in research_session(
        3_600, seed=11)).lower()))
    assert not words & {w for p in pairs for w in p.split()}


def test_the_session_is_deterministic_and_numbered(session):
    again = planted_session(N)
    assert again == session
    assert [m["i"] for m in session] == list(range(len(session)))
    assert all(m["text"].startswith(f"[[m{m['i']}]] ") for m in session)
    # the research session's own messages, plus two per probe, the battery at the end
    n_probes = len(_questions(session))
    assert len(session) == N + 2 * n_probes
    assert all(m.get("probe", {}).get("end") for m in session[-2 * len(CATEGORIES)::2])


STOP_WORDS = {"what", "where", "which", "does", "with", "about"}


class Forgetful:
    """Keeps nothing but the latest message; with `retrieve`, when the user asks a
    question, also the earlier message a text search ranks first for it (most of its
    words but stop words, then the rarer ones)."""

    name = "forgetful"

    def __init__(self, retrieve: bool = False) -> None:
        self.msgs: list[Neutral] = []
        self.words: list[set[str]] = []
        self.retrieve = retrieve

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.msgs.extend(new)
        self.words.extend(set(re.findall(r"[a-z]+", body_of(m["text"]).lower())) for m in new)

    def decide(self) -> list[Neutral]:
        last = self.msgs[-1]
        request = [last]
        if self.retrieve and last["role"] == "user" and body_of(last["text"]).endswith("?"):
            query = {w for w in self.words[-1] if len(w) >= 4} - STOP_WORDS
            df = {w: sum(w in ws for ws in self.words[:-1]) for w in query}
            scores = [(len(query & ws), sum(1 / df[w] for w in query & ws))
                      for ws in self.words[:-1]]
            if scores and max(scores)[0] > 0:
                request = [self.msgs[scores.index(max(scores))], last]
        return request

    def to_openai(self, request: list[Neutral]) -> list[dict[str, Any]]:
        return [{"role": m["role"], "content": m["text"]} for m in request]


def _probe_shares(result: dict[str, Any]) -> dict[str, float | None]:
    return {b: probe_share({"continuity": result}, b) for b in BUCKETS}


def test_a_system_that_keeps_everything_scores_all_probes(session):
    result = run_continuity(FullHistory(echo_summary), session, sample_every=4)
    assert result["compactions"] == 0
    assert _probe_shares(result)["end"] == 1.0
    assert result["probes"]["end"]["asked"] == 4 * len(CATEGORIES)
    assert all(result["milestones"]["end"][c] == 1.0 for c in CATEGORIES)


def test_a_system_that_keeps_nothing_scores_no_probe(session):
    result = run_continuity(Forgetful(), session, sample_every=4)
    shares = _probe_shares(result)
    assert result["compactions"] >= 20 and set(shares) == set(BUCKETS)
    assert all(v == 0.0 for v in shares.values())
    # every probe's call is decided, whatever the sampling
    assert result["probes"]["1"]["asked"] + result["probes"]["end"]["asked"] == \
        len(_questions(session))


def test_retrieval_counts_on_probes_but_not_when_nobody_asks(session):
    result = run_continuity(Forgetful(retrieve=True), session, sample_every=4)
    assert all(v == 1.0 for v in _probe_shares(result).values())
    # held without asking: no better than forgetting (the search runs only when asked)
    forgets = run_continuity(Forgetful(), session, sample_every=4)
    assert result["milestones"] == forgets["milestones"]
    end = result["milestones"]["end"]
    assert sum(end[c] for c in CATEGORIES) / len(CATEGORIES) < 0.05
    # the planted message came back whole, beside the question
    assert result["probes"]["end"]["whole"] == result["probes"]["end"]["asked"]


def test_probe_goals_compare_the_offline_row_with_every_peer(session):
    keeps = run_continuity(Forgetful(retrieve=True), session, sample_every=4)
    forgets = run_continuity(Forgetful(), session, sample_every=4)
    systems = {"contextfold (offline summariser)": {"continuity": keeps},
               "contextfold": {"continuity": forgets},
               "some peer": {"continuity": forgets}}
    goals = {goal: met for goal, met, _ in probe_targets(systems)}
    assert list(goals.values()) == [True, True, True]
    systems["some peer"] = {"continuity": keeps}
    goals = {goal: met for goal, met, _ in probe_targets(systems)}
    assert list(goals.values()) == [True, True, False]
    systems["contextfold (offline summariser)"] = {"continuity": forgets}
    assert [met for _, met, _ in probe_targets(systems)] == [False, False, False]


def test_every_call_point_of_a_probe_follows_its_question(session):
    points = set(call_points(session))
    assert set(probe_points(session)) <= points


def test_continuity_only_runs_only_the_planted_session(tmp_path):
    from bench.peers.run import TIMED_SETTING, _jobs

    names = ["pi (reimpl.)", "contextfold", TIMED_SETTING]
    quality, timing = _jobs(names, [], [], tmp_path, 1, continuity_only=True)
    assert timing == [] and sorted(n for n, _ in quality) == sorted(names)
    assert all("continuity" in job and "quality" not in job for _, job in quality)
    # a full run times the L5-off row beside contextfold (what recall costs per check)
    _, timing = _jobs(names, [], [500], tmp_path, 1)
    assert sorted(n for n, _ in timing) == sorted(["contextfold", TIMED_SETTING])


def test_the_recall_budget_table_sets_each_row_beside_half_its_budget():  # L5, Q5, issue 40
    """The docs' recall-budget table takes its figures from the two rows it names, the
    half budget first, and is left out while either row has not run."""
    import json

    from bench.peers.figures import RECALL_BUDGET_PAIRS, totals
    from bench.peers.report_probes import _recall_budget
    from bench.peers.run import RESULTS

    systems = json.loads(RESULTS.read_text("utf-8"))["systems"]
    half, default = RECALL_BUDGET_PAIRS[0]
    # Two rows known to differ (with and without recall) stand in for the pair.
    pair = {half: systems["contextfold"], default: systems["contextfold (L5 off)"]}
    lines = _recall_budget(pair)
    row = next(line for line in lines if line.startswith(f"| {half} / {default} |"))
    a, b = totals(pair[half]), totals(pair[default])
    assert f"${a['usd_anthropic']:.2f} / ${b['usd_anthropic']:.2f}" in row
    assert f"${a['usd_openai']:.2f} / ${b['usd_openai']:.2f}" in row
    ends = [probe_share(pair[n], "end") for n in (half, default)]
    assert ends[0] != ends[1] and f"{ends[0]:.1%} / {ends[1]:.1%}" in row
    verdict = lines[-2]
    # The stand-in "default" row is cheaper under both rules: no claim that it costs more.
    assert verdict.startswith("Twice the former budget") and "costs more" not in verdict
    assert _recall_budget({half: pair[half]}) == []


def test_rows_measured_at_an_older_recall_share_are_named():  # L5, issue 40
    """A contextfold row not re-run since the recall budget's default changed is named with
    the share it recorded; rows that choose their share, or run without recall, are not."""
    from bench.peers.report import default_recall_share, measured_at_older_recall

    def config(share: float) -> dict[str, str]:
        return {"config": f"CompactionSettings(tail_tokens=12000, auto_recall_share {share:.2f})"}

    default = default_recall_share()
    systems = {"contextfold": config(default), "contextfold (trigger=size)": config(0.03),
               "contextfold (auto_recall_share=0.03)": config(0.03),
               "contextfold (L5 off)": config(0.0)}
    older = measured_at_older_recall(systems, list(systems))
    assert older == ({"contextfold (trigger=size)": 0.03} if default != 0.03 else {})
