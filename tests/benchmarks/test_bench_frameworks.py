"""The "framework + contextfold" rows of the peers benchmark (bench/peers/frameworks*.py)."""

from __future__ import annotations

from bench.peers.common import Recorder, Tokenizer, echo_summary, replay
from bench.peers.frameworks import framework_section
from bench.peers.frameworks_langchain import LangChainContextfold
from bench.peers.synth import research_session


def _quality(invalid: int, lost: int, peak: int) -> dict:
    return {"calls": 10, "invalid": {"tool_pairing": invalid, "openai": invalid,
                                     "anthropic": invalid},
            "messages": 40, "lost_messages": lost, "peak_request_tokens": peak,
            "requests_over_safe_limit": 0, "summarizer_input_tokens": 0,
            "summarizer_output_tokens": 0, "summarizer_calls": 0, "evicted_chars": 0,
            "evicted_chars_shown": 0, "input_tokens": 10_000, "cached_prefix_tokens": 8_000,
            "prefix_breaks": 1, "compactions": 1}


def test_framework_section_puts_builtins_then_ours_with_their_figures():
    systems = {"langchain-summarization": {"quality": {"w": _quality(3, 4, 900)}},
               "langchain + contextfold": {"quality": {"w": _quality(0, 0, 700)}}}
    lines = framework_section(systems)
    rows = [line for line in lines if line.startswith("| LangChain v1")]
    assert rows[0].startswith("| LangChain v1 | langchain-summarization | 3 / 3 / 3 | 10.0% |")
    assert rows[1].startswith("| LangChain v1 | **langchain + contextfold** | 0 / 0 / 0 | 0.0% |")
    assert len(rows) == 2  # built-ins that did not run are left out
    assert framework_section({"langchain-summarization": systems["langchain-summarization"]}) \
        == []


def test_langchain_row_replays_through_the_middleware_without_invalid_requests():
    """The row drives `ContextfoldMiddleware.wrap_model_call`: every recorded request valid,
    and the middleware stored each reply (the next call's list is found as stored)."""
    msgs = research_session(160, seed=3)
    system = LangChainContextfold(echo_summary, msgs)
    recorder = Recorder(Tokenizer())
    replay(system, msgs, recorder)
    result = recorder.result()
    assert result["calls"] > 20
    assert result["invalid"] == {"tool_pairing": 0, "openai": 0, "anthropic": 0}
    session = system.middleware.session_id_for(None)
    assert session is not None and system.middleware._last[session].appended <= 2
    system.close()
