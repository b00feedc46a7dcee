"""The sessions' models on this server: which model (the resolver), where its key may go
(`EndpointPolicy`), which models tenants may use (`--allow-model`), and the summariser.

Every open, refresh, switch and fork of a session comes here (`ServerModels.open`), so a
session is always checked against the configuration the server runs with now. A client's
choice (create, switch) that cannot be served is refused with a 4xx naming what is wrong
(`ServerModels.choose`); a stored session whose model cannot be served any more (no key for
its provider, the provider or URL no longer allowed, the SDK missing) still opens: it shows,
compacts (with the server's summariser) and replays, and says why it cannot send
(`Opened.problem`, answered as 409 `model_unavailable` on a send).
"""

from __future__ import annotations

import fnmatch
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..core.models.catalog import UnknownModelError
from ..core.sizing.resolver import (
    OFFLINE_PREFIX,
    InvalidWindowError,
    ModelResolver,
    ResolvedModel,
    WindowTooSmallError,
)
from ..providers.base import ChatModel, ChatRequest, ChatResponse, StreamEvent
from ..providers.endpoints import EndpointPolicy, EndpointRefusedError
from .config import ServiceConfig
from .errors import ApiError


@dataclass(frozen=True)
class Opened:
    """A session's model on this server: the chat model (a stand-in that refuses to send
    when `problem` is set), its resolution, and why it cannot be served (None: it can)."""

    chat: ChatModel
    resolved: ResolvedModel
    problem: str | None = None
    refused_url: bool = False  # the problem is a base_url not allowed for this model (Y8)

    @property
    def available(self) -> bool:
        return self.problem is None


class UnavailableModel:
    """A stand-in for a model this server cannot serve: the session opens (it shows,
    compacts, replays) and every request to the model is refused with the reason."""

    def __init__(self, model: str, problem: str) -> None:
        self._model = model
        self.problem = problem

    @property
    def model(self) -> str:
        return self._model

    def refusal(self) -> ApiError:
        return ApiError(409, "model_unavailable", f"this server cannot send to {self._model}: "
                        f"{self.problem}; switch the session's model (POST …/model)",
                        model_problem=self.problem)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        raise self.refusal()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        raise self.refusal()
        yield  # pragma: no cover - an async generator that refuses at once


class ServerModels:
    """One worker's models: the resolver, the key binding and the model allowlist."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.resolver = ModelResolver(default_model=config.model)
        self.endpoints = EndpointPolicy(dict(config.provider_urls),
                                        tuple(config.allow_base_urls))

    @property
    def default_model(self) -> str:
        return self.resolver.default()[0]

    def allowed(self, name: str) -> bool:
        """Whether `--allow-model` lets tenants use `name` (no patterns: every model)."""
        patterns = self.config.allow_models
        if not patterns:
            return True
        names = {name, name.lower()}
        if not name.startswith(OFFLINE_PREFIX):
            from ..providers.factory import resolve_provider

            # Equivalent names match alike: "anthropic/*" allows a bare "claude-...", and a
            # bare "gpt-4o" allows "openai/gpt-4o" (the same provider, the same key).
            try:
                info, sent = resolve_provider(name)
                names.add(f"{info.name}/{sent}")
                if resolve_provider(sent)[0] == info:
                    names.add(sent)
            except ValueError:
                pass
        return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)

    # ------------------------------------------------------------------ resolving

    def resolve(self, model: str | None, window: int | None,
                recorded: str | None = None) -> ResolvedModel:
        """The model of a session's settings (`model`: explicit; None: the recorded one,
        else the server's default); its window: the session's, else `--context-window`.
        Raises `ApiError` 400 for a model nobody can size."""
        try:
            return self.resolver.resolve(model, recorded=recorded,
                                         context_window=window or self.config.context_window)
        except UnknownModelError as exc:
            raise ApiError(400, "unknown_model", exc.explain("context_window")) from None
        except InvalidWindowError as exc:
            raise ApiError(400, "bad_request", exc.explain("context_window")) from None

    def check_window(self, resolved: ResolvedModel) -> None:
        """400 naming the smallest window that works, for a window a live session cannot
        compact in (SPEC B1-B3; a few turns at a time, as the chat)."""
        from ..runtime.sizing import check_live_window

        try:
            check_live_window(self.resolver, resolved)
        except WindowTooSmallError as exc:
            raise ApiError(400, "bad_request", exc.explain("context_window"),
                           smallest_window=exc.smallest) from None

    # ------------------------------------------------------------------ making

    def choose(self, model: str | None, window: int | None, base_url: str | None,
               recorded: str | None = None) -> Opened:
        """A client's choice (create, switch model): the model made, or a 400 naming what
        is wrong (unknown, not allowed, window too small, unservable here)."""
        resolved = self.resolve(model, window, recorded)
        if not self.allowed(resolved.name):
            raise ApiError(400, "model_not_allowed", self._not_allowed(resolved.name))
        self.check_window(resolved)
        opened = self._make(resolved, base_url)
        if opened.problem is not None:
            # A base_url no one allowed for this model keeps its documented type.
            type_ = "base_url_not_allowed" if opened.refused_url else "model_unavailable"
            raise ApiError(400, type_, f"cannot use model {resolved.name!r}: "
                           f"{opened.problem}", model_problem=opened.problem)
        return opened

    def open(self, model: str | None, window: int | None, base_url: str | None,
             recorded: str | None = None) -> Opened:
        """A stored session's model: made if this server can serve it now, else a stand-in
        saying why (the session still shows, compacts and replays)."""
        try:
            resolved = self.resolve(model, window, recorded)
        except ApiError as exc:  # its model is unknown here now (an override was removed)
            resolved = self.resolve(None, window)
            return Opened(UnavailableModel(model or resolved.name, exc.message),
                          resolved, exc.message)
        if not self.allowed(resolved.name):
            problem = self._not_allowed(resolved.name)
            return Opened(UnavailableModel(resolved.name, problem), resolved, problem)
        return self._make(resolved, base_url)

    def _make(self, resolved: ResolvedModel, base_url: str | None) -> Opened:
        name = resolved.name
        if name.startswith(OFFLINE_PREFIX):
            from ..providers.offline import OfflineModel

            return Opened(OfflineModel(name, delay=self.config.offline_delay), resolved)
        try:
            chat = self.endpoints.chat_model(name, base_url=base_url)
        except (ValueError, ImportError, LookupError) as exc:  # refused endpoint, no provider
            return self._unavailable(resolved, exc)
        except Exception as exc:  # a missing key (ProviderAuthError) and the like
            from ..providers.errors import ProviderError

            if not isinstance(exc, ProviderError):
                raise
            return self._unavailable(resolved, exc)
        return Opened(chat, resolved)

    def _unavailable(self, resolved: ResolvedModel, exc: BaseException) -> Opened:
        problem = _one_line(str(exc))
        refused = isinstance(exc, EndpointRefusedError) and exc.reason != "needs_binding"
        return Opened(UnavailableModel(resolved.name, problem), resolved, problem, refused)

    def _not_allowed(self, name: str) -> str:
        return (f"model {name!r} is not on this server's model allowlist (--allow-model "
                f"{' '.join(self.config.allow_models)})")

    # ------------------------------------------------------------------ summariser

    def summarizer(self) -> Any:
        """The summariser `--summarizer-model` names (None: the offline one), sized like the
        sessions' models, its key bound like theirs (`summarizer_for`)."""
        from ..providers.factory import sdk_base_url
        from ..summarize.factory import summarizer_for

        config = self.config
        if not config.summarizer_model:
            return None
        url = config.summarizer_base_url
        if url is not None:
            url = sdk_base_url(url, config.summarizer_model, config.summarizer_provider)
        return summarizer_for(config.summarizer_model, self.resolver,
                              chat=self.resolve(None, None), base_url=url,
                              provider=config.summarizer_provider, endpoints=self.endpoints)


def refuse_unavailable(opened: Opened) -> None:
    """Raise the 409 of a session whose model cannot be served here (before any write)."""
    if isinstance(opened.chat, UnavailableModel):
        raise opened.chat.refusal()


def _one_line(text: str) -> str:
    """Provider setup errors name variables, never values; keep them to one line."""
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
