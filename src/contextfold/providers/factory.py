"""`make_chat_model("provider/model")`: pick the adapter, base URL and key variable.

Anthropic gets the Messages adapter; everything else speaks chat completions through the
OpenAI-compatible adapter with the provider's default base URL. A model name without a
known prefix goes to the generic OpenAI-compatible endpoint when a base_url is given (never
with a provider's key), else by its family (claude-* to Anthropic, gpt-*/o* to OpenAI).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

from ..errors import ContextfoldError, MissingExtraError
from .base import ChatModel

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ProviderInfo:
    """How to reach one provider."""

    name: str
    label: str
    protocol: Protocol
    base_url: str | None  # None: the SDK's default (or required from the user, see below)
    env_var: str | None
    key_required: bool
    needs_base_url: bool = False


PROVIDERS: dict[str, ProviderInfo] = {
    p.name: p
    for p in (
        ProviderInfo("openai", "OpenAI", "openai", None, "OPENAI_API_KEY", True),
        ProviderInfo("anthropic", "Anthropic", "anthropic", None, "ANTHROPIC_API_KEY", True),
        ProviderInfo("azure", "Azure OpenAI", "openai", None, "AZURE_OPENAI_API_KEY", True,
                     needs_base_url=True),
        ProviderInfo("openrouter", "OpenRouter", "openai", "https://openrouter.ai/api/v1",
                     "OPENROUTER_API_KEY", True),
        ProviderInfo("deepseek", "DeepSeek", "openai", "https://api.deepseek.com/v1",
                     "DEEPSEEK_API_KEY", True),
        ProviderInfo("groq", "Groq", "openai", "https://api.groq.com/openai/v1",
                     "GROQ_API_KEY", True),
        ProviderInfo("mistral", "Mistral", "openai", "https://api.mistral.ai/v1",
                     "MISTRAL_API_KEY", True),
        ProviderInfo("together", "Together", "openai", "https://api.together.xyz/v1",
                     "TOGETHER_API_KEY", True),
        ProviderInfo("xai", "xAI", "openai", "https://api.x.ai/v1", "XAI_API_KEY", True),
        ProviderInfo("gemini", "Gemini", "openai",
                     "https://generativelanguage.googleapis.com/v1beta/openai/",
                     "GEMINI_API_KEY", True),
        ProviderInfo("ollama", "Ollama", "openai", "http://localhost:11434/v1",
                     "OLLAMA_API_KEY", False),
        ProviderInfo("vllm", "vLLM", "openai", "http://localhost:8000/v1", "VLLM_API_KEY",
                     False),
        ProviderInfo("llamacpp", "llama.cpp server", "openai", "http://localhost:8080/v1",
                     "LLAMACPP_API_KEY", False),
        ProviderInfo("lmstudio", "LM Studio", "openai", "http://localhost:1234/v1",
                     "LMSTUDIO_API_KEY", False),
        # No environment variable here on purpose: an OpenAI key must never be sent to
        # whatever server a bare base_url points at. Pass api_key=... if it needs one.
        ProviderInfo("openai-compatible", "OpenAI-compatible server", "openai", None, None,
                     False, needs_base_url=True),
    )
}
_ALIASES = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "lm-studio": "lmstudio",
            "claude": "anthropic", "azure-openai": "azure", "google": "gemini",
            "compatible": "openai-compatible"}


class UnknownProviderError(ContextfoldError, ValueError):
    """The provider could not be determined from the arguments."""

    kind = "bad_input"
    code = "unknown_model"


# protocol -> (adapter module, adapter class, SDK package)
_ADAPTERS = {"anthropic": (".anthropic_messages", "AnthropicModel", "anthropic"),
             "openai": (".openai_compat", "OpenAICompatModel", "openai")}


def _adapter(protocol: Protocol) -> Any:
    """The adapter class; its SDK is imported only now (it is an optional extra)."""
    module, name, sdk = _ADAPTERS[protocol]
    try:
        return getattr(import_module(module, __package__), name)
    except ModuleNotFoundError as exc:
        if exc.name != sdk:
            raise
        raise MissingExtraError(
            f"talking to a model needs the {sdk!r} SDK, which the base install leaves out: "
            "pip install 'contextfold[providers]'") from exc


def canonical_provider(name: str) -> str | None:
    """The provider's name in `PROVIDERS` for a name or alias ("claude", "llama.cpp"), or None."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in PROVIDERS else None


def resolve_provider(model: str, provider: str | None = None,
                     base_url: str | None = None) -> tuple[ProviderInfo, str]:
    """(provider, model name to send) for a `make_chat_model` call."""
    if not model or not model.strip():
        raise ValueError("make_chat_model needs a model, e.g. 'anthropic/claude-sonnet-4-5'")
    if provider is not None:
        name = canonical_provider(provider)
        if name is None:
            raise UnknownProviderError(
                f"Unknown provider {provider!r}; known: {', '.join(sorted(PROVIDERS))}")
        # "ollama/llama3" with provider="ollama": the prefix is redundant, drop it.
        prefix, _, rest = model.partition("/")
        if rest and canonical_provider(prefix) == name:
            model = rest
        return PROVIDERS[name], model
    prefix, _, rest = model.partition("/")
    if rest and canonical_provider(prefix) is not None:
        return PROVIDERS[canonical_provider(prefix) or ""], rest
    # A bare name on a base URL is that server's (an OpenAI-compatible one), whatever it
    # looks like: a `claude-*` name there must never get the Anthropic key (say
    # provider="anthropic" or "anthropic/claude-..." to mean Anthropic).
    if base_url is not None:
        return PROVIDERS["openai-compatible"], model
    lowered = model.lower()
    if lowered.startswith("claude"):
        return PROVIDERS["anthropic"], model
    if lowered.startswith(("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "text-", "codex")):
        return PROVIDERS["openai"], model
    raise UnknownProviderError(
        f"Cannot tell which provider serves {model!r}: write it as 'provider/model' (e.g. "
        f"'ollama/{model}'), pass provider=..., or pass base_url=... for an OpenAI-compatible "
        f"server. Known providers: {', '.join(sorted(PROVIDERS))}")


def make_chat_model(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    provider: str | None = None,
    **options: Any,
) -> ChatModel:
    """A `ChatModel` for `model` ("provider/model", or a bare name plus `provider=`).

    `options` go to the adapter: `timeout`, `retry` (a `RetryPolicy`), and for
    OpenAI-compatible servers `max_tokens_field` and `stream_usage`.
    The key is `api_key` or the provider's environment variable (e.g. ANTHROPIC_API_KEY);
    local servers (Ollama, vLLM, llama.cpp, LM Studio) need none. `offline/echo` (any
    `offline/` name) is the built-in offline model: no network, no key, no SDK.
    """
    if model.startswith("offline/") and provider is None and base_url is None:
        from .offline import OfflineModel

        return OfflineModel(model)
    info, name = resolve_provider(model, provider, base_url)
    url = base_url or info.base_url
    if info.needs_base_url and not url:
        raise ValueError(f"{info.label} needs base_url=... (the endpoint of your deployment)")
    common = dict(base_url=url, api_key=api_key, provider=info.name, label=info.label,
                  env_var=info.env_var, key_required=info.key_required, **options)
    return _adapter(info.protocol)(name, **common)  # type: ignore[no-any-return]


def sdk_base_url(url: str, model: str, provider: str | None = None) -> str:
    """A server's base URL named with or without `/v1`, the way the SDK of `model`'s
    provider wants it: with it for the OpenAI protocol, without it for Anthropic's (whose SDK
    adds it). For options that name a server the way users write it (`--upstream`)."""
    bare = url.rstrip("/").removesuffix("/v1")
    return protocol_url(bare, resolve_provider(model, provider, bare)[0])


def protocol_url(url: str, info: ProviderInfo) -> str:
    """`url` the way `info`'s SDK wants it: with /v1 for the OpenAI protocol, without it for
    Anthropic's (its SDK adds it)."""
    bare = url.rstrip("/").removesuffix("/v1")
    return bare + "/v1" if info.protocol == "openai" else bare
