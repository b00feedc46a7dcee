"""contextfold: long agent sessions with a durable history and a projection that always fits.

The public API is re-exported here. Names resolve lazily (PEP 562), so `import contextfold`
or importing the pure core never loads the database driver or the provider SDKs until a name
that needs them is used.

    from contextfold import open_store, Conversation, make_chat_model, capacity_for
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # values
    **dict.fromkeys(
        ["Message", "Node", "Checkpoint", "Usage", "Ledger", "LedgerEntry", "TextPart",
         "ReasoningPart", "ToolCallPart", "ToolResultPart", "ApprovalPart", "FilePart",
         "ZoteroItemPart", "PdfPagePart", "EpubLocationPart", "AnnotationPart",
         "CollectionPart", "TagPart", "text_message", "parse_payload"],
        "contextfold.core.messages"),
    # branches, projection, export
    **dict.fromkeys(["Branch", "DamagedBranch", "build_branch", "check_stability"],
                    "contextfold.core.tree"),
    **dict.fromkeys(["Projection", "project", "checkpoint_text"], "contextfold.core.projection"),
    **dict.fromkeys(["to_openai", "to_anthropic", "ExportResult"], "contextfold.core.export"),
    **dict.fromkeys(["openai_problems", "anthropic_problems"], "contextfold.core.validity"),
    # capacity, budgets, estimates
    **dict.fromkeys(["ModelCapacity", "CompactionSettings", "Budget", "derive_budget"],
                    "contextfold.core.budget"),
    **dict.fromkeys(["ModelCatalog", "UnknownModelError", "capacity_for", "default_catalog"],
                    "contextfold.core.catalog"),
    **dict.fromkeys(["Estimate", "estimate_request", "estimate_message", "estimate_text"],
                    "contextfold.core.estimator"),
    # planning and summarising
    **dict.fromkeys(["Plan", "NoOp"], "contextfold.core.plan"),
    **dict.fromkeys(["plan_compaction", "build_checkpoint"], "contextfold.core.planner"),
    "summarize_extractive": "contextfold.summarize.extractive",
    **dict.fromkeys(["LlmSummarizer", "SummaryOutcome", "make_llm_summarizer"],
                    "contextfold.summarize.llm"),
    "Summary": "contextfold.summarize.summary",
    # the one sizing policy (SPEC P1-P3, P5) and its driver
    **dict.fromkeys(["Fits", "Compact", "Blocked", "decide"], "contextfold.core.fit"),
    **dict.fromkeys(["fit_request", "SessionFit"], "contextfold.runtime.fitting"),
    # edges
    **dict.fromkeys(["open_store", "SessionStore", "SqlSessionStore", "SessionInfo",
                     "CommitResult", "StoreError", "SessionNotFoundError",
                     "ReadOnlySessionError", "SessionBusyError"], "contextfold.store"),
    "MemoryStore": "contextfold.store.memory",
    **dict.fromkeys(["make_chat_model", "ChatModel", "ChatRequest", "ChatResponse",
                     "ContextOverflowError", "ProviderError"], "contextfold.providers"),
    **dict.fromkeys(["Conversation", "CompactionOutcome", "compact_session", "BusyError",
                     "DraftTooLargeError", "RequestTooLargeError", "Event", "EventKind"],
                    "contextfold.runtime"),
    **dict.fromkeys(["import_file", "export_session", "ImportResult", "ImportFormatError"],
                    "contextfold.formats"),
    **dict.fromkeys(["replay_messages", "ReplayReport", "ManagedSession"], "contextfold.replay"),
    # pins (SPEC N) and observation masking (SPEC V)
    **dict.fromkeys(["Pin", "PinEvent"], "contextfold.core.messages"),
    **dict.fromkeys(["PinRefusedError", "pins_text"], "contextfold.core.pins"),
    **dict.fromkeys(["MaskedNode", "apply_mask"], "contextfold.core.masking"),
    # measuring a summariser (`contextfold eval`)
    **dict.fromkeys(["run_eval", "EvalResult"], "contextfold.evaluate"),
    # recall (SPEC L)
    **dict.fromkeys(["Recall", "RECALL_TOOLS"], "contextfold.runtime.recall"),
    "RecallHit": "contextfold.store.values",
    # the one error vocabulary
    **dict.fromkeys(["ContextfoldError", "KINDS"], "contextfold.errors"),
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
