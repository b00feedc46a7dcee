"""Entry point in the project venv: `python -m bench.peers.cf_main JOB.json`.

Runs contextfold, and the no-compaction reference, under the same runner as the peers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .common import TAIL_TOKENS, TRIGGER_TOKENS, Neutral
from .reference import FullHistory
from .runner import Estimator, Factory, run_job

CONTEXTFOLD = "contextfold"
# Framework + contextfold rows: name -> module with `factory` and `describe` (imported only
# when that row runs, as it needs the framework).
FRAMEWORK_ROWS = {"langchain + contextfold": ".frameworks_langchain"}
# contextfold with another setting, rows of their own beside the default (never compared as
# peers): the size trigger (what the cost trigger, the default, was chosen against) and a
# smaller recent tail, the setting the price moves with most (docs/peers.md); the offline
# summariser (the default when a user names no model, and the fallback) and automatic recall
# off (SPEC L5, `auto_recall_share=0`), so the fair continuity bench shows what each adds.
# Name -> CompactionSettings fields, and `summarizer: "offline"` for the offline summariser.
OFFLINE = "offline"
VARIANT_ROWS: dict[str, dict[str, Any]] = {
    "contextfold (trigger=size)": {"trigger": "size"},
    # The tail contextfold ships (`core/models/budget.py`); the `contextfold` row holds the shared
    # 20,000.
    "contextfold (tail_tokens=12000)": {"tail_tokens": 12_000},
    "contextfold (tail_tokens=8000)": {"tail_tokens": 8_000},
    "contextfold (tail_tokens=4000)": {"tail_tokens": 4_000},
    "contextfold (offline summariser)": {"summarizer": OFFLINE},
    "contextfold (L5 off)": {"auto_recall_share": 0.0},
    "contextfold (offline summariser, L5 off)": {"summarizer": OFFLINE,
                                                 "auto_recall_share": 0.0},
    # SPEC L5 with Q5: half the recall budget (0.03, the default before issue 40; the
    # blocks of a checkpoint's turns share it), beside the default and the shipped tail, so
    # the end battery shows what the default's budget buys.
    "contextfold (auto_recall_share=0.03)": {"auto_recall_share": 0.03},
    "contextfold (tail_tokens=12000, auto_recall_share=0.03)": {"tail_tokens": 12_000,
                                                                "auto_recall_share": 0.03},
}


def _contextfold_estimate(msgs: Sequence[Neutral], model: str) -> int:
    """contextfold's estimate, with the tokenizer family its catalog gives `model`."""
    from contextfold.core.models.catalog import tokenizer_family
    from contextfold.core.sizing.estimator import estimate_message

    from .cf_system import CAPACITY, to_message

    capacity = CAPACITY.model_copy(update={"family": tokenizer_family(model or "unknown")})
    return sum(estimate_message(to_message(m), capacity) for m in msgs)


def _contextfold(summarize: Any, msgs: Sequence[Neutral]) -> Any:
    # Imported here so the reference row still runs while a contextfold module is missing.
    from .cf_system import Contextfold

    return Contextfold(summarize)


def _contextfold_with(settings: dict[str, Any]) -> Factory:
    """contextfold with other settings (ones a user can choose)."""

    change = {k: v for k, v in settings.items() if k != "summarizer"}
    offline = settings.get("summarizer") == OFFLINE

    def make(summarize: Any, msgs: Sequence[Neutral]) -> Any:
        from .cf_system import Contextfold, budget_with

        return Contextfold(summarize, budget_with(**change), offline=offline)

    return make


def _framework(module: str) -> Factory:
    """The factory of a framework + contextfold row, importing its module when it runs."""

    def make(summarize: Any, msgs: Sequence[Neutral]) -> Any:
        return import_module(module, __package__).factory(summarize, msgs)

    return make


def _factories(system: str) -> tuple[dict[str, Factory], dict[str, Estimator], dict[str, Any]]:
    factories: dict[str, Factory] = {
        CONTEXTFOLD: _contextfold,
        FullHistory.name: lambda s, _m: FullHistory(s),
        **{name: _framework(module) for name, module in FRAMEWORK_ROWS.items()},
        **{name: _contextfold_with(change) for name, change in VARIANT_ROWS.items()},
    }
    estimators: dict[str, Estimator] = {CONTEXTFOLD: _contextfold_estimate}
    describe: dict[str, Any] = {FullHistory.name: {
        "packages": {}, "config": "every message in every request", "estimator_name": "-"}}
    if system == CONTEXTFOLD:
        describe[CONTEXTFOLD] = _describe_contextfold()
    if system in VARIANT_ROWS:
        describe[system] = _describe_contextfold(VARIANT_ROWS[system])
    if system in FRAMEWORK_ROWS:
        describe[system] = import_module(FRAMEWORK_ROWS[system], __package__).describe()
    return factories, estimators, describe


def _describe_contextfold(change: dict[str, Any] | None = None) -> dict[str, Any]:
    from .cf_system import BUDGET, budget_with

    offline = (change or {}).get("summarizer") == OFFLINE
    change = {k: v for k, v in (change or {}).items() if k != "summarizer"}
    budget = budget_with(**change) if change else BUDGET
    tail_tokens = change.get("tail_tokens", TAIL_TOKENS)
    summarizer = ("contextfold's offline summariser (ManagedSession(summarizer=None): the "
                  "default when no model is named, and the fallback); the shared fake is "
                  "never called" if offline else
                  "summarize.llm.LlmSummarizer over an offline echo ChatModel, as the "
                  "session's own model (session_prefix=True, SPEC Q3)")
    return {
        "packages": {"contextfold": version("contextfold")},
        "config": f"capacity_for('gpt-4o') (catalog: 128000 window, 16384 output, family "
                  f"'gpt'); "
                  f"CompactionSettings(tail_tokens={tail_tokens}, auto_threshold_fraction="
                  f"{TRIGGER_TOKENS}/{budget.safe_input_limit}, trigger "
                  f"'{budget.trigger}', auto_recall_share "
                  f"{budget.recall_budget / budget.safe_input_limit:.2f}) -> auto threshold "
                  f"{budget.auto_threshold}, tail budget {budget.tail_budget}, recall budget "
                  f"{budget.recall_budget}; the engine of "
                  "`contextfold replay` (ManagedSession as replay_messages builds it: auto "
                  "after a turn, preflight before a user message and before a request), "
                  f"no exact tokenizer; summariser: {summarizer}",
        "estimator_name": "contextfold.core.sizing.estimator (catalog family 'gpt', no tokenizer: "
                          "the estimate a user of the model gets)",
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.peers.cf_main JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    factories, estimators, describe = _factories(job["system"])
    run_job(job, factories, estimators, describe)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
