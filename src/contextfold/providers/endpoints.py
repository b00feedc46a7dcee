"""Where a server-held provider key may go (SPEC Y8, W2): the provider's own endpoint, or
one the operator bound to that provider.

A face that serves others (`contextfold serve`, the proxy's summariser) holds provider keys
in its environment (`ANTHROPIC_API_KEY`, ...). A client, or a stored session, may name a
`base_url`; the key must never follow it to a host nobody bound to that provider:

* no base URL: the provider's official endpoint, or the URL the operator bound to it
  (`serve --provider-url anthropic=http://gateway:9999`); a provider that has no official
  endpoint (Azure, a bare OpenAI-compatible server) needs a binding;
* a base URL bound to the model's provider, or its official one: used with the server's key;
* a keyless base URL (`serve --allow-base-url`): an OpenAI-compatible server's, reached with no
  server key at all; a model of a keyed provider (`openai/…`, `anthropic/…`) is refused there;
* anything else is refused (`EndpointRefusedError`).

The check runs wherever the chat model is made, so every open, refresh, switch and fork of a
session is checked against the configuration the server runs with now, not the one it was
created under.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import ContextfoldError
from .base import ChatModel
from .factory import (
    PROVIDERS,
    ProviderInfo,
    canonical_provider,
    make_chat_model,
    protocol_url,
    resolve_provider,
)

COMPATIBLE = "openai-compatible"
# The endpoints the SDKs reach when given none (their own defaults).
OFFICIAL_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


class EndpointRefusedError(ContextfoldError, ValueError):
    """A model and base URL a server must not use with its keys; the message says why.

    `reason`: "base_url_not_allowed" (nobody allowed this URL), "keyed_provider" (the URL is
    for keyless servers, the model's provider has a key here), "needs_binding" (the provider
    has no official endpoint and the operator bound none).
    """

    kind = "bad_input"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = reason


def same_url(a: str | None, b: str | None) -> bool:
    """Whether two base URLs name the same endpoint (case of scheme and host, a trailing
    slash and a trailing /v1 do not matter: the SDKs add or drop /v1 by protocol)."""
    if not a or not b:
        return False
    return _key(a) == _key(b)


def _key(url: str) -> str:
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}"


def official_url(info: ProviderInfo) -> str | None:
    """The provider's own endpoint (None for one that has none: Azure, a bare server)."""
    return OFFICIAL_URLS.get(info.name) or (info.base_url if info.name != COMPATIBLE else None)


def parse_bindings(values: Iterable[str]) -> dict[str, str]:
    """`PROVIDER=URL` pairs (`--provider-url`) into a mapping; ValueError naming a bad one."""
    out: dict[str, str] = {}
    for value in values:
        name, _, url = value.partition("=")
        provider = canonical_provider(name)
        if provider is None or not url:
            raise ValueError(f"--provider-url {value!r}: expected PROVIDER=URL with a known "
                             f"provider ({', '.join(sorted(PROVIDERS))}), e.g. "
                             "anthropic=http://127.0.0.1:9999")
        if provider == COMPATIBLE:
            raise ValueError(f"--provider-url {value!r}: an OpenAI-compatible server gets no "
                             "server key; allow its URL with --allow-base-url instead")
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ValueError(f"--provider-url {value!r}: {url!r} is not an http(s) URL")
        out[provider] = url.rstrip("/")
    return out


@dataclass(frozen=True)
class Endpoint:
    """Where one model is reached: its provider, the name sent, the URL, and whether the
    server's key for that provider goes with it."""

    provider: ProviderInfo
    model: str
    base_url: str | None
    server_key: bool


@dataclass(frozen=True)
class EndpointPolicy:
    """The operator's bindings: `bound` provider -> URL (`--provider-url`), `keyless` URLs
    of OpenAI-compatible servers that get no server key (`--allow-base-url`)."""

    bound: Mapping[str, str] = field(default_factory=dict)
    keyless: tuple[str, ...] = ()

    def allows(self, url: str) -> bool:
        """Whether a client may name `url` at all (bound to some provider, or keyless)."""
        return any(same_url(url, u) for u in (*self.bound.values(), *self.keyless))

    def endpoint(self, model: str, base_url: str | None = None,
                 provider: str | None = None) -> Endpoint:
        """Where `model` goes under this policy; `EndpointRefusedError` when nowhere may."""
        info, name = resolve_provider(model, provider, base_url)
        if base_url is None:
            bound = self.bound.get(info.name)
            if bound is not None:
                return Endpoint(info, name, protocol_url(bound, info), True)
            if info.needs_base_url:
                raise EndpointRefusedError(
                    f"{info.label} has no official endpoint and this server bound none: the "
                    f"operator binds one with --provider-url {info.name}=URL", "needs_binding")
            return Endpoint(info, name, info.base_url, True)
        if same_url(base_url, self.bound.get(info.name)) or \
                same_url(base_url, official_url(info)):
            return Endpoint(info, name, base_url, True)
        if any(same_url(base_url, u) for u in self.keyless):
            if info.key_required and info.name != COMPATIBLE:
                raise EndpointRefusedError(
                    f"base_url {base_url} is allowed for keyless OpenAI-compatible servers "
                    f"only, and {model!r} is a {info.label} model: the server's {info.label} "
                    "key is not sent there (name the model without a provider prefix, or the "
                    f"operator binds the URL with --provider-url {info.name}=URL)",
                    "keyed_provider")
            return Endpoint(PROVIDERS[COMPATIBLE], name, base_url, False)
        raise EndpointRefusedError(
            f"base_url {base_url} is not allowed on this server for {info.label}: the "
            "server's provider keys go only to each provider's own endpoint or one the "
            "operator bound to it (--provider-url), and keyless servers must be allowed "
            "(--allow-base-url)", "base_url_not_allowed")

    def chat_model(self, model: str, base_url: str | None = None, provider: str | None = None,
                   **options: Any) -> ChatModel:
        """The chat model `endpoint(...)` allows, made by `make_chat_model`: with the
        server's key only where the policy says so, never a client's."""
        where = self.endpoint(model, base_url, provider)
        if not where.server_key:
            # `openai-compatible` reads no environment variable: no key leaves the server.
            return make_chat_model(where.model, base_url=where.base_url, provider=COMPATIBLE,
                                   **options)
        return make_chat_model(where.model, base_url=where.base_url,
                               provider=where.provider.name, **options)
