"""Entry point inside the peers venv: `python -m bench.peers.peer_main JOB.json`.

Imports only the peer packages and this folder's stdlib modules, never contextfold.
"""

from __future__ import annotations

import json
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .runner import Estimator, Factory, run_job

Parts = tuple[dict[str, Factory], dict[str, Estimator], dict[str, Any]]

# Each system's adapter module, imported only for that system's job: importing every
# framework cost each job ~4.5 s of CPU (a quarter of the whole benchmark's CPU).
MODULES = {
    "langchain-summarization": "langchain",
    "langchain-summarization (trim_tokens_to_summarize=None)": "langchain",
    "langchain-trim_messages": "langchain",
    "langchain-context-editing (clear_tool_uses)": "langchain",
    "langmem-summarize_messages": "langmem",
    "google-adk-compaction": "adk",
    "pydantic-ai-harness-summarizing": "pydantic_ai",
    "openai-agents-ToolOutputTrimmer": "openai_agents",
    "openai-agents-compaction-session": "openai_agents",
}


def _langchain() -> Parts:
    from . import peer_langchain
    from .common import TAIL_TOKENS, TRIGGER_TOKENS

    lc = {"packages": {p: version(p) for p in ("langchain", "langchain-core", "langgraph")}}
    factories: dict[str, Factory] = {
        peer_langchain.LangChainSummarization.name:
            lambda s, _m: peer_langchain.LangChainSummarization(s),
        peer_langchain.LangChainTrim.name: lambda s, _m: peer_langchain.LangChainTrim(s),
        peer_langchain.LangChainSummarizationUntrimmed.name:
            lambda s, _m: peer_langchain.LangChainSummarizationUntrimmed(s),
        peer_langchain.LangChainContextEditing.name:
            lambda s, _m: peer_langchain.LangChainContextEditing(s),
    }
    estimators: dict[str, Estimator] = {
        peer_langchain.LangChainSummarization.name: peer_langchain.estimate}
    describe: dict[str, Any] = {
        peer_langchain.LangChainSummarization.name: {
            **lc,
            "config": f"SummarizationMiddleware(model=<offline echo>, trigger=('tokens', "
                      f"{TRIGGER_TOKENS}), keep=('tokens', {TAIL_TOKENS})); defaults otherwise "
                      "(count_tokens_approximately, trim_tokens_to_summarize=4000)",
            "estimator_name": "count_tokens_approximately (4 chars/token, 3.3 for Anthropic "
                              "models; +3 per message)",
        },
        peer_langchain.LangChainTrim.name: {
            **lc,
            "config": f"when count_tokens_approximately > {TRIGGER_TOKENS}: trim_messages("
                      f"max_tokens={TAIL_TOKENS}, strategy='last', start_on='human', "
                      "include_system=True, allow_partial=False); stateless pre-model step",
            "estimator_name": "count_tokens_approximately",
        },
        peer_langchain.LangChainSummarizationUntrimmed.name: {
            **lc,
            "config": f"SummarizationMiddleware(model=<offline echo>, trigger=('tokens', "
                      f"{TRIGGER_TOKENS}), keep=('tokens', {TAIL_TOKENS}), "
                      "trim_tokens_to_summarize=None): the summariser is shown everything cut",
            "estimator_name": "count_tokens_approximately",
        },
        peer_langchain.LangChainContextEditing.name: {
            **lc,
            "config": "ContextEditingMiddleware(edits=[ClearToolUsesEdit()]): defaults = "
                      "Anthropic clear_tool_uses_20250919 (trigger 100,000 tokens, keep 3 "
                      "tool results, clear_at_least 0, placeholder '[cleared]'); never "
                      "summarises",
            "estimator_name": "count_tokens_approximately",
        },
    }
    return factories, estimators, describe


def _langmem() -> Parts:
    from . import peer_langmem
    from .common import TRIGGER_TOKENS

    name = peer_langmem.LangMemSummarize.name
    return {name: lambda s, _m: peer_langmem.LangMemSummarize(s)}, {}, {name: {
        "packages": {p: version(p) for p in ("langmem", "langchain-core")},
        "config": f"summarize_messages(max_tokens={TRIGGER_TOKENS}, max_tokens_before_"
                  f"summary={TRIGGER_TOKENS}, max_summary_tokens="
                  f"{peer_langmem.SUMMARY_TOKENS}, model=<offline echo>) on the full "
                  "history with the RunningSummary kept in state (LangMem has no tail "
                  "setting)",
        "estimator_name": "count_tokens_approximately",
    }}


def _adk() -> Parts:
    from . import peer_adk
    from .common import TAIL_TOKENS, TRIGGER_TOKENS

    def adk(summarize: Any, msgs: Any) -> Any:
        return peer_adk.AdkTokenThreshold(summarize, peer_adk.retention_events(msgs))

    name = peer_adk.AdkTokenThreshold.name
    return {name: adk}, {name: peer_adk.estimate}, {name: {
        "packages": {p: version(p) for p in ("google-adk", "google-genai")},
        "config": f"EventsCompactionConfig(token_threshold={TRIGGER_TOKENS}, "
                  "event_retention_size=N, summarizer=LlmEventSummarizer(<offline echo>)); "
                  f"N = events holding ~{TAIL_TOKENS} tokens at the transcript's mean "
                  "event size; compaction run before every model call, as ADK's "
                  "CompactionRequestProcessor does",
        "estimator_name": "ADK _estimate_prompt_token_count (chars / 4 of request contents)",
    }}


def _pydantic_ai() -> Parts:
    from . import peer_pydantic_ai
    from .common import TAIL_TOKENS, TRIGGER_TOKENS

    name = peer_pydantic_ai.PydanticAiSummarizing.name
    return ({name: lambda s, _m: peer_pydantic_ai.PydanticAiSummarizing(s)},
            {name: peer_pydantic_ai.estimate}, {name: {
                "packages": {p: version(p) for p in ("pydantic-ai-harness", "pydantic-ai-slim")},
                "config": f"SummarizingCompaction(model=FunctionModel(<offline echo>), "
                          f"max_tokens={TRIGGER_TOKENS}, keep_tokens={TAIL_TOKENS}); defaults "
                          "otherwise (tool_return_max_chars=500, preserve_first_user_message, "
                          "incremental)",
                "estimator_name": "pydantic-ai-harness estimate_token_count (4 chars/token)",
            }})


def _openai_agents() -> Parts:
    from . import peer_openai_agents

    oa = {"packages": {"openai-agents": version("openai-agents")}}
    trimmer = peer_openai_agents.ToolOutputTrimmerPeer.name
    session = peer_openai_agents.CompactionSessionPeer.name
    factories: dict[str, Factory] = {
        trimmer: lambda s, _m: peer_openai_agents.ToolOutputTrimmerPeer(s),
        session: lambda s, _m: peer_openai_agents.CompactionSessionPeer(s),
    }
    return factories, {}, {
        trimmer: {
            **oa,
            "config": "RunConfig(call_model_input_filter=ToolOutputTrimmer()): defaults "
                      "recent_turns=2, max_output_chars=500, preview_chars=200; no trigger, "
                      "no summary",
            "estimator_name": "- (counts characters)",
        },
        session: {
            **oa,
            "config": "OpenAIResponsesCompactionSession default trigger (>= 10 candidate "
                      "items after a turn); responses.compact replaced by the offline fake "
                      "(shown every item; output: the user messages + one compaction item)",
            "estimator_name": "- (counts items)",
        },
    }


def _policies() -> Parts:
    from . import policies

    factories: dict[str, Factory] = {}
    for cls in policies.SYSTEMS:
        factories[cls.name] = lambda s, _m, cls=cls: cls(s)
    describe: dict[str, Any] = {}
    for name, (config, source) in policies.POLICIES.items():
        describe[name] = {"packages": {}, "config": config, "source": source,
                          "estimator_name": "exact o200k_base count of the request (stands "
                                            "in for the provider's usage the tool reads)"}
    return factories, {}, describe


_PARTS = {"langchain": _langchain, "langmem": _langmem, "adk": _adk,
          "pydantic_ai": _pydantic_ai, "openai_agents": _openai_agents}


def _factories(system: str) -> Parts:
    """Factories, estimators and descriptions of `system`'s module (the reimplemented
    policies for a name not in MODULES)."""
    return _PARTS[MODULES[system]]() if system in MODULES else _policies()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.peers.peer_main JOB.json", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # experimental-API and deprecation notices from peers
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    factories, estimators, describe = _factories(job["system"])
    run_job(job, factories, estimators, describe)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
