"""`create_app(config)`: the FastAPI application of `contextfold serve`.

The store, the event hub and the live sessions are opened in the lifespan (one set per
worker process) and reached by the routes through `app.state.service`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from ..guard.bearer import BearerAuth
from ..guard.rate import RateLimiter
from ..store.protocol import SessionStore
from .auth import tenant
from .config import ServiceConfig
from .errors import install_handlers
from .guards import protect
from .hub import Hub, PgHub
from .sessions import SessionManager

STATIC_DIR = Path(__file__).parent / "static"
log = logging.getLogger("contextfold.server")


@dataclass
class Service:
    """What the routes use: configuration, the (unscoped) store, hub, sessions, limiter,
    and the token check (`--auth`)."""

    config: ServiceConfig
    store: SessionStore
    hub: Hub
    sessions: SessionManager
    limiter: RateLimiter
    bearer: BearerAuth


def _hub_for(store: SessionStore) -> Hub:
    """Events and cancel across workers: PostgreSQL's LISTEN/NOTIFY on a PostgreSQL store,
    else in memory (one worker)."""
    from ..store import SqlSessionStore

    if not isinstance(store, SqlSessionStore) or store.dialect != "postgresql":
        return Hub()
    url = store.engine.url.set(drivername="postgresql")
    return PgHub(url.render_as_string(hide_password=False))


def create_app(config: ServiceConfig | None = None, *,
               store: SessionStore | None = None) -> FastAPI:
    """The ASGI app. `store`: an open store to use (tests); else `config.db` is opened."""
    config = config or ServiceConfig()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from ..store import open_store

        own = store is None
        # A worker serves many sessions at once: more pooled connections than the library's
        # default (5 + 10), within PostgreSQL's default 100 connections for a few workers.
        opened = await open_store(config.db, pool_size=10, max_overflow=20) if own else store
        hub = _hub_for(opened)
        await hub.start()
        sessions = SessionManager(opened, config, hub)
        app.state.service = Service(config, opened, hub, sessions,
                                    RateLimiter(config.rate_limit), BearerAuth(opened))
        try:
            yield
        finally:
            await sessions.close()
            await hub.stop()
            if own:
                await opened.close()

    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN (the package ships no
    # copy), which the page's CSP refuses and a local service should not depend on (Y8).
    app = FastAPI(title="contextfold", version=_version(), lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Durable, branchable LLM sessions whose model context always "
                  "fits. Contract: docs/service.md.")
    install_handlers(app)
    from . import files, routes, routes_page, turns

    app.include_router(routes.router)
    app.include_router(routes_page.router)
    app.include_router(turns.router)
    app.include_router(files.router)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/v1/config", tags=["meta"])
    async def service_config(who: str = Depends(tenant)) -> dict[str, Any]:
        """What a client may rely on: auth, its tenant, the default model, the limits."""
        models = app.state.service.sessions.models
        return {"auth": config.auth, "tenant": who, "default_model": models.default_model,
                "allowed_models": list(config.allow_models) or None,
                "limits": {"max_body_bytes": config.max_body_bytes,
                           "max_import_bytes": config.max_import_bytes,
                           "max_message_chars": config.max_message_chars,
                           "rate_limit_per_minute": config.rate_limit}}

    if (STATIC_DIR / "index.html").is_file():  # the page (i17-web's static files)
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    else:
        @app.get("/", include_in_schema=False)
        async def placeholder() -> HTMLResponse:
            return HTMLResponse("<!doctype html><title>contextfold</title><p>contextfold "
                                "service: the API is under /v1 (see /openapi.json).</p>")
    protect(app, config)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("contextfold")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"
