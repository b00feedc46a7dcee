"""What every router of the service shares: the tenant of a request, the session manager,
and the base of request bodies (unknown fields refused). Its own module so the routers
import it, not one another (`routes` lists sessions with `routes_page`'s fields)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, field_validator

from .auth import tenant
from .sessions import SessionManager

Tenant = Annotated[str, Depends(tenant)]


class Body(BaseModel):
    """A request body: unknown fields refused; every text field real text (a lone
    surrogate, which cannot be stored, is the client's error naming the field)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("contains a lone surrogate, which is not text") from None
        return value


async def manager(request: Request) -> SessionManager:
    """The service's sessions. Async on purpose: FastAPI runs a plain `def` dependency in
    its thread pool, a thread hop on every request for one attribute read (issue 26)."""
    return request.app.state.service.sessions


Manager = Annotated[SessionManager, Depends(manager)]
