"""The service's guards (SPEC Y8, W3), wired by `create_app` in one call: the host and origin
policy with the page's headers, and the body limits (`contextfold.guard`, shared with the
proxy), answered in the service's error shape `{"error", "type"}`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ..guard.asgi import Scope
from ..guard.body import BodyLimit
from ..guard.hosts import HostPolicy
from ..guard.web import PAGE_HEADERS, WebGuard
from .config import ServiceConfig

# Raw-body endpoints: a session file as the body, with their own, larger limit.
UPLOAD_PATHS = ("/v1/import", "/v1/replay")


def protect(app: FastAPI, config: ServiceConfig) -> None:
    """Add the guards to `app`: the host/origin check runs first (outermost), then the body
    limit, then FastAPI."""

    def limit_for(scope: Scope) -> int:
        return config.max_import_bytes if scope["path"] in UPLOAD_PATHS else \
            config.max_body_bytes

    app.add_middleware(BodyLimit, limit_for=limit_for, too_large=too_large)  # type: ignore[arg-type]
    app.add_middleware(WebGuard, policy=HostPolicy.of(config.allowed_hosts),  # type: ignore[arg-type]
                       error=error_body, raw_body_paths=UPLOAD_PATHS, headers=PAGE_HEADERS)


def error_body(_scope: Scope, _status: int, type_: str, message: str) -> dict[str, Any]:
    """A guard's refusal in the service's error shape (docs/service.md, Errors)."""
    return {"error": message, "type": type_}


def too_large(_scope: Scope, limit: int) -> dict[str, Any]:
    """The 413 body of a request body over its limit (W3)."""
    return {"error": f"the request body is larger than {limit} bytes",
            "type": "payload_too_large", "limit_bytes": limit}
