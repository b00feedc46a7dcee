"""One error vocabulary: everything contextfold raises on purpose is a `ContextfoldError`.

An error's `kind` says what its caller can do about it, from a small closed set (`KINDS`);
its `code` names the condition exactly (a stable word, the service's `type`); `facts()` holds
the numbers and reasons a face may show; `public_message()` is its sentence for a client on
another machine. The faces map kinds, never classes: the command line
to exit codes (`cli/app.py`), the service to HTTP statuses (`http_status`, through
`server/errors.py`), the proxy to each protocol's own error answer. A new error class needs
a kind and nothing else: every face already knows how to answer it.

Each class keeps its Python base classes (`LookupError`, `ValueError`, `ImportError`, ...)
next to `ContextfoldError`, so no caller's `except` changed meaning.

This module imports nothing of contextfold, so every layer, the pure core too, may use it.

Every error class, its kind and its module (`+` the Python bases it keeps); a test
(tests/test_errors.py) holds this drawing equal to the classes defined:

    ContextfoldError                      internal    errors
    ├── BadInput                          bad_input   cli.app
    ├── CatalogConfigError                bad_input   core.models.catalog + ValueError
    ├── UnknownModelError                 bad_input   core.models.catalog + LookupError
    ├── PriceConfigError                  bad_input   core.money.prices + ValueError
    ├── EmptyQueryError                   bad_input   core.recall.recall_text + ValueError
    ├── ChunkBudgetTooSmall               bad_input   core.render.serialize + ValueError
    ├── OverheadTooLargeError             bad_input   core.sizing.fit + ValueError
    ├── InvalidWindowError                bad_input   core.sizing.resolver + ValueError
    ├── WindowTooSmallError               bad_input   core.sizing.resolver + ValueError
    ├── BranchError                       read_only   core.values.tree + ValueError
    ├── PinRefusedError                   bad_input   core.view.pins + ValueError
    ├── MissingExtraError                 unavailable errors + ImportError
    ├── EvalInputError                    bad_input   evaluate.runner + ValueError
    ├── ImportFormatError                 bad_input   formats.errors + ValueError
    ├── JsonTooDeepError                  bad_input   guard.body + ValueError
    ├── ToolFailed                        bad_input   mcp.tools + Exception
    ├── NoConversationError               not_found   mcp.which + LookupError
    ├── EndpointRefusedError              bad_input   providers.endpoints + ValueError
    ├── ProviderError                     provider    providers.errors
    │   ├── ContextOverflowError          provider    providers.errors
    │   ├── MalformedResponseError        provider    providers.errors
    │   ├── ProviderAuthError             provider    providers.errors
    │   ├── ProviderRequestError          provider    providers.errors
    │   ├── RetryableError                provider    providers.errors
    │   │   ├── ProviderConnectionError   provider    providers.errors
    │   │   ├── ProviderTimeoutError      provider    providers.errors
    │   │   ├── ProviderUnavailableError  provider    providers.errors
    │   │   └── RateLimitError            provider    providers.errors
    │   └── StreamInterruptedError        provider    providers.errors
    ├── UnknownProviderError              bad_input   providers.factory + ValueError
    ├── WireError                         bad_input   proxy.wire + ValueError
    ├── EditedSummaryError                bad_input   runtime.compaction + ValueError
    ├── StalePreviewError                 conflict    runtime.compaction
    ├── ConversationError                 internal    runtime.errors
    │   ├── BusyError                     busy        runtime.errors
    │   ├── CompactionFailedError         internal    runtime.errors
    │   ├── RequestTooLargeError          too_large   runtime.errors
    │   │   └── DraftTooLargeError        too_large   runtime.errors
    │   ├── SendAbortedError              conflict    runtime.errors
    │   └── ToolWorkflowError             bad_input   runtime.errors
    ├── RecallInputError                  bad_input   runtime.recall + ValueError
    ├── ServeError                        bad_input   server.run + ValueError
    ├── StoreError                        internal    store.errors
    │   ├── ConfigurationError            bad_input   store.errors
    │   ├── InvalidOperationError         bad_input   store.errors + ValueError
    │   │   ├── DuplicateNodeError        bad_input   store.errors
    │   │   ├── InvalidPayloadError       bad_input   store.errors
    │   │   └── AmbiguousIdError          bad_input   store.refs
    │   ├── NodeNotFoundError             not_found   store.errors + LookupError
    │   ├── ReadOnlySessionError          read_only   store.errors
    │   ├── SessionBusyError              busy        store.errors
    │   ├── SessionNotFoundError          not_found   store.errors + LookupError
    │   ├── StaleBranchError              conflict    store.errors
    │   └── TokenNotFoundError            not_found   store.sql.tenancy
    ├── SummaryBudgetTooSmall             bad_input   summarize.extractive_fit + ValueError
    └── SummaryInvalid                    internal    summarize.validate + ValueError

The faces' maps by kind are in docs/architecture.md ("Errors").
"""

from __future__ import annotations

from typing import Any, Literal, get_args

Kind = Literal["bad_input", "not_found", "busy", "conflict", "read_only", "too_large",
               "provider", "unavailable", "internal"]
"""What the caller can do about an error:

* `bad_input` — the request itself is wrong (a payload, a flag, a file, a model name, a
  window too small to work in): fix it and ask again.
* `not_found` — the session, node or token named does not exist (for this tenant, SPEC W1).
* `busy` — something else runs on this session now (a compaction, another turn, another
  worker's lease, SPEC U4): wait for it or cancel it, then ask again.
* `conflict` — the session moved under the request (another writer, a cancelled or failed
  compaction a send waited for, SPEC U3, C2): read it again and retry.
* `read_only` — the session's stored history is damaged (SPEC D2): read it, fork a healthy
  node; it is never written.
* `too_large` — the request cannot fit the model even after compaction (SPEC P3): shorten it
  by the numbers given, or use a larger model. Nothing was sent.
* `provider` — the model provider failed or refused the request.
* `unavailable` — a part this needs is missing or overloaded here (an optional extra not
  installed, no free database connection): not the request's fault; retry or install.
* `internal` — none of the above: a bug, or a failure with an unexpected cause.
"""

KINDS: tuple[Kind, ...] = get_args(Kind)

# The `code` of a class that names no condition of its own: one plain word per kind. The
# service answers it as its `type` (docs/service.md lists them).
DEFAULT_CODES: dict[Kind, str] = {
    "bad_input": "bad_request", "not_found": "not_found", "busy": "busy",
    "conflict": "conflict", "read_only": "read_only", "too_large": "request_too_large",
    "provider": "provider_error", "unavailable": "unavailable", "internal": "internal",
}

# The HTTP status of each kind: the service's (docs/service.md), and the proxy's for every
# kind but `too_large`, which each protocol answers with its own context-length error.
HTTP_STATUSES: dict[Kind, int] = {
    "bad_input": 400, "not_found": 404, "busy": 409, "conflict": 409, "read_only": 409,
    "too_large": 413, "provider": 502, "unavailable": 503, "internal": 500,
}


class ContextfoldError(Exception):
    """Base of every error contextfold raises on purpose.

    A subclass sets `kind` (one of `KINDS`) and, when the condition has a name of its own,
    `code`; an instance may refine both (e.g. `CompactionFailedError` takes its cause's).
    """

    kind: Kind = "internal"
    code: str = DEFAULT_CODES["internal"]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind not in KINDS:
            raise TypeError(f"{cls.__name__}.kind is {cls.kind!r}, not one of {KINDS}")
        if "kind" in cls.__dict__ and "code" not in cls.__dict__:
            cls.code = DEFAULT_CODES[cls.kind]  # a new kind without a name of its own

    def facts(self) -> dict[str, Any]:
        """JSON-safe facts a face may add to its answer (numbers, reasons); none by default."""
        return {}

    def public_message(self) -> str:
        """The sentence for a client on another machine (the service's, the proxy's answers):
        the message itself, unless that names what only this machine's user may see or can
        act on (a database file, a process, a command to type)."""
        return str(self)


def kind_of(error: BaseException) -> Kind:
    """The kind of any exception: its own for a `ContextfoldError`, else `internal`."""
    return error.kind if isinstance(error, ContextfoldError) else "internal"


def code_of(error: BaseException) -> str:
    """The code of any exception: its own for a `ContextfoldError`, else `internal`."""
    return error.code if isinstance(error, ContextfoldError) else DEFAULT_CODES["internal"]


def http_status(kind: Kind) -> int:
    """The HTTP status an answer of this kind gets (the service's; the proxy's but for
    `too_large`, which a wire protocol answers with its own context-length error)."""
    return HTTP_STATUSES[kind]


__all__ = ["DEFAULT_CODES", "HTTP_STATUSES", "KINDS", "ContextfoldError", "Kind", "code_of",
           "http_status", "kind_of"]


class MissingExtraError(ContextfoldError, ImportError):
    """An optional extra is not installed (a provider's SDK, the service's or the proxy's web
    stack, the MCP SDK): not the request's fault. The message names the extra and the exact
    `pip install` line."""

    kind = "unavailable"

    @classmethod
    def needed_by(cls, module: str, what: str, extra: str) -> MissingExtraError:
        """The error a module raises when its framework is not installed: `module needs what:
        pip install 'contextfold[extra]'` (each module passes its own `__name__`)."""
        return cls(f"{module} needs {what}: pip install 'contextfold[{extra}]'")

