"""The peers benchmark's own logic, without the peers venv: markers, fake summariser,
recorder, converters, synthetic session, report targets (bench/peers, issue 6)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from bench.peers.common import (
    Neutral,
    Recorder,
    Tokenizer,
    body_of,
    call_points,
    echo_summary,
    echoed,
    mark,
    markers,
    neutral,
    ranges,
    replay,
)
from bench.peers.reference import FullHistory, neutral_to_openai
from bench.peers.report import targets
from bench.peers.run import growth
from bench.peers.runner import estimator_figure
from bench.peers.synth import research_session
from bench.peers.workloads import intervals, to_neutral
from hypothesis import given
from hypothesis import strategies as st

from contextfold.core.messages import (
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    text_message,
)


@pytest.fixture(scope="module")
def tokens() -> Tokenizer:
    return Tokenizer()


# --------------------------------------------------------------------------- markers


def test_markers_find_head_and_tail_and_body_survives():  # R1
    text = mark(7, "hello [[m8]] world")
    heads, tails = markers(text)
    assert heads == {7, 8} and tails == {7}
    assert body_of(mark(3, "plain body")) == "plain body"
    assert markers(mark(4, "")) == ({4}, {4})


@given(st.sets(st.integers(min_value=0, max_value=5000), max_size=60))
def test_echo_ranges_round_trip(indices: set[int]):  # S4: coverage carried forward
    assert echoed(ranges(indices)) == indices


def test_echo_summary_is_short_and_carries_previous_coverage():  # S4
    prompt = "\n".join(mark(i, "x" * 50) for i in range(1000)) + " ~m2000-m2999~"
    summary = echo_summary(prompt)
    assert echoed(summary) == set(range(1000)) | set(range(2000, 3000))
    assert len(summary) < 100  # ranges, not one entry per message
    assert "[[m" not in summary  # echoed coverage is never mistaken for a raw message


# --------------------------------------------------------------------------- recorder


def _turns(n: int) -> list[Neutral]:
    msgs: list[Neutral] = []
    for t in range(n):
        msgs.append(neutral(len(msgs), "user", f"question {t}"))
        msgs.append(neutral(len(msgs), "assistant", "", calls=[{"id": f"c{t}", "name": "s",
                                                               "args": {"q": t}}]))
        msgs.append(neutral(len(msgs), "tool", f"result {t}", call_id=f"c{t}"))
        msgs.append(neutral(len(msgs), "assistant", f"answer {t}"))
    return msgs


class _KeepLast(FullHistory):
    """Sends only the last `keep` messages; optionally shows the dropped ones first."""

    def __init__(self, summarize, keep: int, show: bool) -> None:
        super().__init__(summarize)
        self.summarize, self.keep, self.show = summarize, keep, show

    def decide(self) -> list[Neutral]:
        dropped, kept = self.messages[:-self.keep], self.messages[-self.keep:]
        if self.show and dropped:
            self.summarize("\n".join(m["text"] for m in dropped))
        return kept


def test_full_history_is_valid_and_loses_nothing(tokens):  # K1, T3
    rec = Recorder(tokens)
    msgs = _turns(5)
    replay(FullHistory(rec.summarize), msgs, rec)
    r = rec.result()
    assert r["calls"] == len(call_points(msgs)) == 10
    assert r["invalid_requests"] == 0 and r["evicted_messages"] == 0 and r["lost_share"] == 0


def test_dropping_without_summary_is_lost_and_orphans_are_invalid(tokens):  # K1, K5
    rec = Recorder(tokens)
    replay(_KeepLast(rec.summarize, keep=2, show=False), _turns(4), rec)
    r = rec.result()
    assert r["lost_messages"] == r["evicted_messages"] > 0
    # keeping the last 2 of [..., call, result] sends a tool result without its call
    assert r["invalid_requests"] > 0
    assert any("tool result" in e or "not 'user'" in e for e in r["invalid_examples"])


def test_dropping_after_showing_the_summariser_is_not_lost(tokens):  # K5, S4
    rec = Recorder(tokens)
    replay(_KeepLast(rec.summarize, keep=2, show=True), _turns(4), rec)
    r = rec.result()
    assert r["evicted_messages"] > 0 and r["lost_messages"] == 0
    assert r["summarizer_calls"] > 0 and r["summarizer_input_tokens"] > 0


def test_request_size_is_exact_o200k_and_over_limit_counted(tokens):  # B1, E5
    rec = Recorder(tokens, safe_limit=50)
    msgs = [neutral(0, "user", "word " * 200), neutral(1, "assistant", "ok")]
    replay(FullHistory(rec.summarize), msgs, rec)
    r = rec.result()
    assert r["peak_request_tokens"] > tokens.count(msgs[0]["text"])
    assert r["requests_over_safe_limit"] == 1


def test_sparse_checks_time_only_the_tail():  # A4 (harness only)
    msgs = _turns(30)
    timings = replay(FullHistory(echo_summary), msgs, timed_from_call=50, dense_from_call=45,
                     check_every=10)
    assert [k for k, _ in timings] == call_points(msgs)[50:]


# --------------------------------------------------------------------------- synthetic session


def test_synthetic_session_is_deterministic_exact_and_valid(tokens):  # K1
    a, b = research_session(600), research_session(600)
    assert a == b and len(a) == 600
    assert any(len(m["calls"]) > 1 for m in a)  # parallel tool calls
    assert {m["tool_name"] for m in a if m["role"] == "tool"} >= {"zotero_search",
                                                                  "read_pdf_page"}
    rec = Recorder(tokens)
    replay(FullHistory(rec.summarize), a, rec)
    assert rec.result()["invalid_requests"] == 0
    with pytest.raises(ValueError, match="n_messages"):
        research_session(1)


# --------------------------------------------------------------------------- converters


def _assistant_calls(*ids: str, status: str = "complete", usage: Usage | None = None) -> Message:
    calls = tuple(ToolCallPart(id=i, name="bash", input={"cmd": i}) for i in ids)
    parts = (TextPart(text="working"), *calls)
    return Message(role="assistant", parts=parts, status=status, usage=usage)


def test_to_neutral_splits_results_and_drops_void_calls_and_orphans():  # K1, D1
    msgs = [
        text_message("user", "go"),
        _assistant_calls("a", "b"),
        Message(role="tool", parts=(ToolResultPart(call_id="a", output="A"),
                                    ToolResultPart(call_id="b", output="B", is_error=True))),
        _assistant_calls("x", status="aborted"),  # void: never answered
        Message(role="tool", parts=(ToolResultPart(call_id="zz", output="orphan"),)),
        text_message("assistant", "done"),
    ]
    out, cleaned = to_neutral(msgs)
    assert cleaned == {"void_calls": 1, "orphan_results": 1}
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "assistant",
                                        "assistant"]
    assert [m["i"] for m in out] == list(range(len(out)))
    assert out[3]["is_error"] and out[3]["tool_name"] == "bash"
    assert out[4]["calls"] == []
    assert all(markers(m["text"]) == ({m["i"]}, {m["i"]}) for m in out)
    from bench.peers.common import openai_problems

    assert openai_problems(neutral_to_openai(out)) == []


def test_intervals_use_usage_growth_minus_previous_output():  # E1, E3
    u1 = Usage(input=100, cache_read=900, output=50, model="m")
    u2 = Usage(input=10, cache_read=1500, output=20, model="m")
    msgs = [text_message("user", "go"), _assistant_calls("a", usage=u1),
            Message(role="tool", parts=(ToolResultPart(call_id="a", output="x" * 900),)),
            text_message("assistant", "done", usage=u2)]
    out, _ = to_neutral(msgs)
    assert intervals(out) == [{"start": 2, "end": 3, "real": 1510 - 1000 - 50, "model": "m"}]


def test_estimator_figure_counts_under_estimates(tokens):  # E4
    msgs = [neutral(0, "user", "q"), neutral(1, "assistant", "a"),
            neutral(2, "user", "hello world " * 40), neutral(3, "assistant", "b")]
    workload = {"messages": msgs, "intervals": [{"start": 2, "end": 3, "real": 100}]}

    def low(chunk: Sequence[Neutral], model: str) -> int:
        return 1

    def high(chunk: Sequence[Neutral], model: str) -> int:
        return 10_000

    assert estimator_figure(low, workload, tokens)["under_count_rate_vs_usage"] == 1.0
    assert estimator_figure(low, workload, tokens)["under_count_rate_vs_o200k"] == 1.0
    assert estimator_figure(high, workload, tokens)["under_count_rate_vs_usage"] == 0.0
    assert estimator_figure(high, {"messages": msgs}, tokens) is None


# --------------------------------------------------------------------------- report


def _quality(invalid: int = 0, lost: int = 0, peak: int = 1000, stokens: int = 500) -> dict:
    return {"calls": 10, "invalid_requests": invalid, "messages": 40, "lost_messages": lost,
            "lost_share": lost / 40, "peak_request_tokens": peak,
            "requests_over_safe_limit": int(peak > 2000), "summarizer_input_tokens": stokens,
            "summarizer_calls": 1, "invalid_examples": [],
            "check_seconds": {"median_ms": 1.0, "p99_ms": 2.0}}


def test_targets_are_computed_from_results_not_asserted():  # K1, B1
    timing = [{"size": 500, "median_ms": 2.0}, {"size": 20_000, "median_ms": 2.5}]
    results = {"settings": {"safe_limit": 2000}, "systems": {
        "contextfold": {"quality": {"w": _quality(stokens=400)}, "timing": timing,
                        "growth": growth(timing)},
        "peer": {"quality": {"w": _quality(stokens=300)}, "timing": [], "growth": {}},
        "lossy": {"quality": {"w": _quality(lost=5, stokens=10)}, "timing": [], "growth": {}},
    }}
    met = {name: ok for name, ok, _ in targets(results)}
    assert met["0 invalid requests on every transcript"] is True
    assert met["check cost growth 20,000 vs 500 messages <= 1.5"] is True
    # the lossy peer does not count; the lossless one sends fewer tokens, so this target fails
    assert met["fewer summariser input tokens than every lossless peer"] is False
    results["systems"]["contextfold"]["quality"]["w"] = _quality(invalid=1, peak=3000)
    met = {name: ok for name, ok, _ in targets(results)}
    assert met["0 invalid requests on every transcript"] is False
    assert met["peak request <= safe limit"] is False
    json.dumps(results)  # the results stay plain JSON
