"""contextfold: long agent sessions with a durable history and a projection that always fits.

The public API is re-exported here. Names resolve lazily (PEP 562), so `import contextfold`
or importing the pure core never loads the database driver or the provider SDKs until a name
that needs them is used.

    from contextfold import open_store, Conversation, make_chat_model, capacity_for
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    # The names `__getattr__` below resolves on use, spelt out for type checkers and IDEs
    # (never run: nothing is imported early). `X as X` marks a re-export (PEP 484), and
    # tests/test_public_api.py holds this block equal to _EXPORTS.
    # isort: off
    from contextfold.core.models.budget import (
        Budget as Budget, CompactionSettings as CompactionSettings, ModelCapacity as ModelCapacity,
        derive_budget as derive_budget,
    )
    from contextfold.core.models.catalog import (
        ModelCatalog as ModelCatalog, UnknownModelError as UnknownModelError,
        capacity_for as capacity_for, default_catalog as default_catalog,
    )
    from contextfold.core.sizing.estimator import (
        Estimate as Estimate, estimate_message as estimate_message,
        estimate_request as estimate_request, estimate_text as estimate_text,
    )
    from contextfold.core.render.export import (
        ExportResult as ExportResult, to_anthropic as to_anthropic, to_openai as to_openai,
    )
    from contextfold.core.sizing.fit import (
        Blocked as Blocked, Compact as Compact, Fits as Fits, decide as decide,
    )
    from contextfold.core.view.masking import MaskedNode as MaskedNode, apply_mask as apply_mask
    from contextfold.core.values.messages import (
        AnnotationPart as AnnotationPart, ApprovalPart as ApprovalPart, Checkpoint as Checkpoint,
        CollectionPart as CollectionPart, EpubLocationPart as EpubLocationPart,
        FilePart as FilePart, Ledger as Ledger, LedgerEntry as LedgerEntry, Message as Message,
        Node as Node, PdfPagePart as PdfPagePart, Pin as Pin, PinEvent as PinEvent,
        ReasoningPart as ReasoningPart, TagPart as TagPart, TextPart as TextPart,
        ToolCallPart as ToolCallPart, ToolResultPart as ToolResultPart, Usage as Usage,
        ZoteroItemPart as ZoteroItemPart, parse_payload as parse_payload,
        text_message as text_message,
    )
    from contextfold.core.view.pins import (
        PinRefusedError as PinRefusedError, pins_text as pins_text,
    )
    from contextfold.core.planning.plan import NoOp as NoOp, Plan as Plan
    from contextfold.core.planning.planner import (
        build_checkpoint as build_checkpoint, plan_compaction as plan_compaction,
    )
    from contextfold.core.view.projection import (
        Projection as Projection, checkpoint_text as checkpoint_text, project as project,
    )
    from contextfold.core.values.tree import (
        Branch as Branch, DamagedBranch as DamagedBranch, build_branch as build_branch,
        check_stability as check_stability,
    )
    from contextfold.core.render.validity import (
        anthropic_problems as anthropic_problems, openai_problems as openai_problems,
    )
    from contextfold.errors import KINDS as KINDS, ContextfoldError as ContextfoldError
    from contextfold.evaluate import EvalResult as EvalResult, run_eval as run_eval
    from contextfold.formats import (
        ImportFormatError as ImportFormatError, ImportResult as ImportResult,
        export_session as export_session, import_file as import_file,
    )
    from contextfold.providers import (
        ChatModel as ChatModel, ChatRequest as ChatRequest, ChatResponse as ChatResponse,
        ContextOverflowError as ContextOverflowError, ProviderError as ProviderError,
        make_chat_model as make_chat_model,
    )
    from contextfold.replay import (
        ManagedSession as ManagedSession, ReplayReport as ReplayReport,
        replay_messages as replay_messages,
    )
    from contextfold.runtime import (
        BusyError as BusyError, CompactionOutcome as CompactionOutcome,
        CompactionRequest as CompactionRequest,
        Conversation as Conversation, DraftTooLargeError as DraftTooLargeError, Event as Event,
        EventKind as EventKind, RequestTooLargeError as RequestTooLargeError,
        compact_session as compact_session,
    )
    from contextfold.runtime.fitting import SessionFit as SessionFit, fit_request as fit_request
    from contextfold.runtime.recall import RECALL_TOOLS as RECALL_TOOLS, Recall as Recall
    from contextfold.store import (
        CommitResult as CommitResult, ReadOnlySessionError as ReadOnlySessionError,
        SessionBusyError as SessionBusyError, SessionInfo as SessionInfo,
        SessionNotFoundError as SessionNotFoundError, SessionStore as SessionStore,
        SqlSessionStore as SqlSessionStore, StoreError as StoreError, open_store as open_store,
    )
    from contextfold.store.memory import MemoryStore as MemoryStore
    from contextfold.store.values import RecallHit as RecallHit
    from contextfold.summarize.extractive import summarize_extractive as summarize_extractive
    from contextfold.summarize.llm import (
        LlmSummarizer as LlmSummarizer, SummaryOutcome as SummaryOutcome,
        make_llm_summarizer as make_llm_summarizer,
    )
    from contextfold.summarize.summary import Summary as Summary
    # isort: on

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # values
    **dict.fromkeys(
        ["Message", "Node", "Checkpoint", "Usage", "Ledger", "LedgerEntry", "TextPart",
         "ReasoningPart", "ToolCallPart", "ToolResultPart", "ApprovalPart", "FilePart",
         "ZoteroItemPart", "PdfPagePart", "EpubLocationPart", "AnnotationPart",
         "CollectionPart", "TagPart", "text_message", "parse_payload"],
        "contextfold.core.values.messages"),
    # branches, projection, export
    **dict.fromkeys(["Branch", "DamagedBranch", "build_branch", "check_stability"],
                    "contextfold.core.values.tree"),
    **dict.fromkeys(["Projection", "project", "checkpoint_text"],
                    "contextfold.core.view.projection"),
    **dict.fromkeys(["to_openai", "to_anthropic", "ExportResult"],
                    "contextfold.core.render.export"),
    **dict.fromkeys(["openai_problems", "anthropic_problems"], "contextfold.core.render.validity"),
    # capacity, budgets, estimates
    **dict.fromkeys(["ModelCapacity", "CompactionSettings", "Budget", "derive_budget"],
                    "contextfold.core.models.budget"),
    **dict.fromkeys(["ModelCatalog", "UnknownModelError", "capacity_for", "default_catalog"],
                    "contextfold.core.models.catalog"),
    **dict.fromkeys(["Estimate", "estimate_request", "estimate_message", "estimate_text"],
                    "contextfold.core.sizing.estimator"),
    # planning and summarising
    **dict.fromkeys(["Plan", "NoOp"], "contextfold.core.planning.plan"),
    **dict.fromkeys(["plan_compaction", "build_checkpoint"], "contextfold.core.planning.planner"),
    "summarize_extractive": "contextfold.summarize.extractive",
    **dict.fromkeys(["LlmSummarizer", "SummaryOutcome", "make_llm_summarizer"],
                    "contextfold.summarize.llm"),
    "Summary": "contextfold.summarize.summary",
    # the one sizing policy (SPEC P1-P3, P5) and its driver
    **dict.fromkeys(["Fits", "Compact", "Blocked", "decide"], "contextfold.core.sizing.fit"),
    **dict.fromkeys(["fit_request", "SessionFit"], "contextfold.runtime.fitting"),
    # edges
    **dict.fromkeys(["open_store", "SessionStore", "SqlSessionStore", "SessionInfo",
                     "CommitResult", "StoreError", "SessionNotFoundError",
                     "ReadOnlySessionError", "SessionBusyError"], "contextfold.store"),
    "MemoryStore": "contextfold.store.memory",
    **dict.fromkeys(["make_chat_model", "ChatModel", "ChatRequest", "ChatResponse",
                     "ContextOverflowError", "ProviderError"], "contextfold.providers"),
    **dict.fromkeys(["Conversation", "CompactionOutcome", "CompactionRequest",
                     "compact_session", "BusyError",
                     "DraftTooLargeError", "RequestTooLargeError", "Event", "EventKind"],
                    "contextfold.runtime"),
    **dict.fromkeys(["import_file", "export_session", "ImportResult", "ImportFormatError"],
                    "contextfold.formats"),
    **dict.fromkeys(["replay_messages", "ReplayReport", "ManagedSession"], "contextfold.replay"),
    # pins (SPEC N) and observation masking (SPEC V)
    **dict.fromkeys(["Pin", "PinEvent"], "contextfold.core.values.messages"),
    **dict.fromkeys(["PinRefusedError", "pins_text"], "contextfold.core.view.pins"),
    **dict.fromkeys(["MaskedNode", "apply_mask"], "contextfold.core.view.masking"),
    # measuring a summariser (`contextfold eval`)
    **dict.fromkeys(["run_eval", "EvalResult"], "contextfold.evaluate"),
    # recall (SPEC L)
    **dict.fromkeys(["Recall", "RECALL_TOOLS"], "contextfold.runtime.recall"),
    "RecallHit": "contextfold.store.values",
    # the one error vocabulary
    **dict.fromkeys(["ContextfoldError", "KINDS"], "contextfold.errors"),
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll]
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
