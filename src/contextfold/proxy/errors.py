"""The proxy's answer to an error: each protocol's own error body, chosen by the error's kind.

A request the mirror cannot fit gets the protocol's context-length error (SPEC Y3, worded
from the error's numbers by `wire.too_large`), so an agent reacts as it would to its
provider. Every other kind gets the status of `contextfold.errors.http_status` and the
protocol's error body (`wire.bad_request`'s shape) with the type that protocol's servers use
for that status, so each SDK raises its usual exception. An `internal` error is logged and
answered 500 without detail; an exception that is not ours is not answered here at all.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import ContextfoldError, http_status
from . import wire

log = logging.getLogger("contextfold.proxy")


def refusal(protocol: wire.Protocol, error: ContextfoldError | ValueError
            ) -> tuple[int, dict[str, Any]]:
    """The status and body the proxy answers `error` with. A `ValueError` of another library
    (the request body is not JSON) is the client's bad input."""
    kind = error.kind if isinstance(error, ContextfoldError) else "bad_input"
    if kind == "too_large":
        return wire.too_large(protocol, error)  # type: ignore[arg-type]
    status = http_status(kind)
    if kind == "internal":  # a bug, or an unexpected cause: the log has it, the body not
        log.error("unexpected error", exc_info=error)
        message = "internal error (see the proxy's log)"
    else:
        message = proxy_message(error)
    body = wire.bad_request(protocol, message)
    body["error"]["type"] = error_type(protocol, status)
    return status, body


def proxy_message(error: BaseException) -> str:
    """The error's sentence for the proxy's client, in the proxy's terms (its flags)."""
    if not isinstance(error, ContextfoldError):
        return str(error)
    model = getattr(error, "model", None)
    if error.code == "unknown_model" and model:
        return (f"contextfold proxy does not know the context window of model {model!r}: "
                f"start it with --model-window {model}=TOKENS (or '*=TOKENS' for every model)")
    return error.public_message()


def error_type(protocol: wire.Protocol, status: int) -> str:
    """The `error.type` the protocol's own servers answer with this status."""
    if status < 500:
        return "not_found_error" if status == 404 and protocol == "anthropic" else \
            "invalid_request_error"
    if protocol != "anthropic":  # OpenAI's, Chat Completions and Responses alike
        return "server_error"
    return "overloaded_error" if status == 503 else "api_error"


__all__ = ["error_type", "proxy_message", "refusal"]
