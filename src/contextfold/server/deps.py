"""What every router of the service shares: the tenant of a request, the session manager,
and the base of request bodies (unknown fields refused). Its own module so the routers
import it, not one another (`routes` lists sessions with `routes_page`'s fields)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict

from .auth import tenant
from .sessions import SessionManager

Tenant = Annotated[str, Depends(tenant)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


async def manager(request: Request) -> SessionManager:
    """The service's sessions. Async on purpose: FastAPI runs a plain `def` dependency in
    its thread pool, a thread hop on every request for one attribute read (issue 26)."""
    return request.app.state.service.sessions


Manager = Annotated[SessionManager, Depends(manager)]
