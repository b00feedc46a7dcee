"""Every error as `{"error": "...", "type": "..."}` with a fitting status (docs/service.md).

Every library exception is answered here by its kind (`contextfold.errors`), so the routes
just raise. Messages are the library's sentences for a remote client (`public_message`),
a request too large is worded from its numbers; nothing of a request's headers or the
server's keys is ever put in them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import ContextfoldError, http_status

if TYPE_CHECKING:
    from ..runtime.errors import RequestTooLargeError

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


INTERNAL = "internal error (see the server log)"  # a bug's detail is for the log only


def as_api_error(exc: BaseException) -> ApiError:
    """The `ApiError` for a library exception (500 `internal` for anything unexpected).

    By kind (`contextfold.errors.http_status`), never by class: the status is the kind's,
    the `type` the error's code, the extra fields its facts.
    """
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, PoolTimeoutError):
        # Every database connection of this worker is busy: a load problem, not a bug.
        return ApiError(503, "overloaded", "the server is overloaded (no database connection "
                        "was free); retry shortly", headers={"Retry-After": "1"})
    if not isinstance(exc, ContextfoldError):
        if isinstance(exc, ValueError):  # another library's verdict on what the client sent
            return ApiError(400, "bad_request", str(exc))
        return ApiError(500, "internal", INTERNAL)
    if exc.kind == "internal":
        return ApiError(500, "internal", INTERNAL)
    return ApiError(http_status(exc.kind), exc.code, service_message(exc), **exc.facts())


def service_message(error: ContextfoldError) -> str:
    """The error's sentence for a client of the service."""
    if error.kind == "too_large":
        return too_large_message(error)  # type: ignore[arg-type]
    if error.kind == "provider" and error.code == "provider_error":
        return f"the model provider failed: {error.public_message()}"
    return error.public_message()


def too_large_message(error: RequestTooLargeError) -> str:
    """A request that cannot fit even after compaction (SPEC P3), from its numbers; the
    body carries them too (`overflow_tokens`, `estimated_tokens`, `safe_input_limit`)."""
    unsent = "sent or saved" if error.code == "draft_too_large" else "sent"
    window = getattr(error, "context_window", None)
    # The safe limit is not the window: it leaves room for the reply and a margin.
    of_window = f"; its window is {window}" if window else ""
    return (f"about {error.estimated_tokens} tokens do not fit the safe input limit of "
            f"{error.model or 'the model'} ({error.safe_input_limit}{of_window}), even after "
            "compaction, "
            f"and nothing was {unsent}: shorten the message by at least {error.overflow_tokens} "
            "tokens or switch the session to a larger-window model")


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

    app.add_exception_handler(StarletteHTTPException, on_http)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, on_validation)  # type: ignore[arg-type]
    # The expected ones by class (answered quietly); anything else is a 500 with a log line.
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    for known in (ApiError, ContextfoldError, ValueError, PoolTimeoutError):
        app.add_exception_handler(known, on_any)
    app.add_exception_handler(Exception, on_any)
