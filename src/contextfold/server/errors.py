"""Every error as `{"error": "...", "type": "..."}` with a fitting status (docs/service.md).

Runtime and store exceptions are mapped here, once, so the routes just raise. Messages
are the library's own sentences; nothing of a request's headers or the server's keys is
ever put in them.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("contextfold.server")


class ApiError(Exception):
    """An error answered as JSON: `status`, `type`, a sentence, and extra fields."""

    def __init__(self, status: int, type_: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.headers = headers
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "type": self.type, **self.extra}


def not_found(what: str = "session") -> ApiError:
    """The one 404 body for a missing id and another tenant's id alike (SPEC W1)."""
    return ApiError(404, "not_found", f"no such {what}")


def as_api_error(exc: BaseException) -> ApiError:
    """The `ApiError` for a library exception (500 `internal` for anything unexpected)."""
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    from ..core.resolver import UnknownModelError, WindowTooSmallError
    from ..providers.errors import ContextOverflowError, ProviderError
    from ..runtime import (
        BusyError,
        CompactionFailedError,
        DraftTooLargeError,
        RequestTooLargeError,
        SendAbortedError,
        ToolWorkflowError,
    )
    from ..store import (
        InvalidOperationError,
        InvalidPayloadError,
        NodeNotFoundError,
        ReadOnlySessionError,
        SessionBusyError,
        SessionNotFoundError,
        StaleBranchError,
    )

    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, PoolTimeoutError):
        # Every database connection of this worker is busy: a load problem, not a bug.
        return ApiError(503, "overloaded", "the server is overloaded (no database connection "
                        "was free); retry shortly", headers={"Retry-After": "1"})
    if isinstance(exc, SessionNotFoundError):
        return not_found()
    if isinstance(exc, NodeNotFoundError):
        return not_found("node")
    if isinstance(exc, BusyError):
        kind = "compacting" if exc.activity == "a compaction" else "busy"
        return ApiError(409, kind, str(exc), reason=str(exc))
    if isinstance(exc, SessionBusyError):
        return ApiError(409, "compacting", "a compaction of this session is running on "
                        "another worker; wait for it or cancel it",
                        reason="compacting on another worker")
    if isinstance(exc, SendAbortedError):
        draft = exc.draft.text if exc.draft is not None else None
        return ApiError(409, "send_aborted", str(exc), reason=exc.reason, draft=draft)
    if isinstance(exc, DraftTooLargeError | RequestTooLargeError):
        type_ = "draft_too_large" if isinstance(exc, DraftTooLargeError) else \
            "request_too_large"
        return ApiError(413, type_, str(exc), overflow_tokens=exc.overflow_tokens,
                        estimated_tokens=exc.estimated_tokens,
                        safe_input_limit=exc.safe_input_limit)
    if isinstance(exc, ReadOnlySessionError):
        return ApiError(409, "read_only", str(exc))
    if isinstance(exc, StaleBranchError):
        return ApiError(409, "stale", "the session's branch moved while this request ran "
                        "(another writer); read the session again and retry")
    if isinstance(exc, UnknownModelError):
        return ApiError(400, "unknown_model", exc.explain("context_window"))
    if isinstance(exc, WindowTooSmallError):
        return ApiError(400, "bad_request", exc.explain("context_window"),
                        smallest_window=exc.smallest)
    if isinstance(exc, CompactionFailedError):
        known = as_api_error(exc.cause) if exc.cause is not None else None
        if known is not None and known.status in (404, 409, 503):
            return known  # read-only, busy on another worker, ...: the cause's own answer
        return ApiError(422, "compaction_failed", f"{exc}; nothing was written (a window "
                        "too small for this history needs a larger context_window: POST "
                        "…/model)")
    if isinstance(exc, ContextOverflowError):
        return ApiError(502, "context_overflow", str(exc))
    if isinstance(exc, ProviderError):
        return ApiError(502, "provider_error", f"the model provider failed: {exc}")
    if isinstance(exc, InvalidOperationError | InvalidPayloadError | ToolWorkflowError |
                  ValueError):
        return ApiError(400, "bad_request", str(exc))
    return ApiError(500, "internal", "internal error (see the server log)")


def error_response(exc: BaseException) -> JSONResponse:
    err = as_api_error(exc)
    if err.status == 500:
        log.error("unexpected error", exc_info=exc)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def install_handlers(app: FastAPI) -> None:
    """Map every exception to the JSON error shape."""

    async def on_any(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    async def on_http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(
            exc.status_code, "bad_request")
        message = "no such route" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse({"error": message, "type": type_}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def on_validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")}
                  for e in exc.errors()]
        first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return JSONResponse({"error": f"{where}: {first['msg']}", "type": "validation_error",
                             "detail": detail}, status_code=422)

    from ..providers.errors import ProviderError
    from ..runtime import ConversationError
    from ..store import StoreError

    app.add_exception_handler(StarletteHTTPException, on_http)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[arg-type]
    # The expected ones by class (answered quietly); anything else is a 500 with a log line.
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    for known in (ApiError, ConversationError, StoreError, ProviderError, ValueError,
                  PoolTimeoutError):
        app.add_exception_handler(known, on_any)
    app.add_exception_handler(Exception, on_any)
