"""`contextfold serve`: sessions over HTTP (docs/service.md is the contract).

    from contextfold.server import ServiceConfig, create_app
    app = create_app(ServiceConfig(db="sqlite:///service.db"))

A FastAPI app, thin over the runtime (`Conversation`) and the store; every store access is
scoped to the caller's tenant (SPEC W1).
"""

from .app import create_app
from .config import ServiceConfig

__all__ = ["ServiceConfig", "create_app"]
