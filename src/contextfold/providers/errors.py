"""Provider errors, normalised: one exception family whatever the server or SDK said.

* Context overflow from OpenAI, Anthropic, vLLM, llama.cpp server, Ollama, OpenRouter,
  LM Studio and friends becomes one `ContextOverflowError`, with the numbers parsed out when
  the provider gave them (`requested_tokens`, `limit_tokens`). It is never retried: a request
  that does not fit does not fit twice (SPEC P4 leaves the reaction to the caller).
* Rate limits, 5xx/529, timeouts and dropped connections are `RetryableError`s.
* A rejected or missing key is a `ProviderAuthError` that names the environment variable.

Messages never contain an API key: every text taken from a provider passes `redact` first.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ContextfoldError


class ProviderError(ContextfoldError):
    """Base of every error a provider adapter raises."""

    kind = "provider"

    def __init__(self, message: str, *, provider: str, status: int | None = None,
                 attempts: int = 1) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.attempts = attempts

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, provider={self.provider!r}, " \
               f"status={self.status!r}, attempts={self.attempts})"


class ContextOverflowError(ProviderError):
    """The request did not fit the model's context window (or window minus max_tokens)."""

    code = "context_overflow"

    def __init__(self, message: str, *, provider: str, status: int | None = None,
                 requested_tokens: int | None = None, limit_tokens: int | None = None,
                 prompt_tokens: int | None = None, completion_tokens: int | None = None,
                 provider_message: str = "") -> None:
        super().__init__(message, provider=provider, status=status)
        self.requested_tokens = requested_tokens
        self.limit_tokens = limit_tokens
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.provider_message = provider_message

    @property
    def excess_tokens(self) -> int | None:
        """By how much the request was over, when the provider said."""
        if self.requested_tokens is None or self.limit_tokens is None:
            return None
        return max(0, self.requested_tokens - self.limit_tokens)


class ProviderAuthError(ProviderError):
    """No API key, or the provider rejected it. `env_var` says where a key is read from."""

    def __init__(self, message: str, *, provider: str, status: int | None = None,
                 env_var: str | None = None) -> None:
        super().__init__(message, provider=provider, status=status)
        self.env_var = env_var


class ProviderRequestError(ProviderError):
    """The provider refused the request for another reason (bad parameter, unknown model)."""


class MalformedResponseError(ProviderError):
    """The provider answered, but not with a response the protocol allows."""


class StreamInterruptedError(ProviderError):
    """A stream failed after it had started; `partial` is what arrived (status "error")."""

    def __init__(self, message: str, *, provider: str, partial: Any = None,
                 status: int | None = None) -> None:
        super().__init__(message, provider=provider, status=status)
        self.partial = partial


class RetryableError(ProviderError):
    """A failure worth trying again after a pause. `retry_after` is the server's hint (s)."""

    def __init__(self, message: str, *, provider: str, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, provider=provider, status=status)
        self.retry_after = retry_after


class RateLimitError(RetryableError):
    """HTTP 429."""


class ProviderUnavailableError(RetryableError):
    """HTTP 5xx, or Anthropic's 529 overloaded."""


class ProviderTimeoutError(RetryableError):
    """No (complete) answer within the configured timeout."""


class ProviderConnectionError(RetryableError):
    """The connection could not be made or was dropped."""


# --------------------------------------------------------------------------- redaction

_KEY_SHAPES = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{6,}")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Remove API keys from `text`: the given secrets, and anything shaped like a key."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _KEY_SHAPES.sub("[redacted]", text)


# --------------------------------------------------------------------------- overflow


@dataclass(frozen=True)
class OverflowNumbers:
    """What a context-overflow message says, where it says it."""

    requested: int | None = None
    limit: int | None = None
    prompt: int | None = None
    completion: int | None = None


def _n(text: str) -> int:
    return int(text.replace(",", ""))


_NUM = r"(\d[\d,]*)"

# Each pattern is a real provider's wording (see tests/providers/test_providers_errors.py for the
# bodies they come from); the lambda maps its groups to the numbers.
_OVERFLOW_PATTERNS: tuple[tuple[re.Pattern[str], Any], ...] = (
    # vLLM: prompt + max_tokens over the window.
    (re.compile(rf"is too large: {_NUM}\. This model's maximum context length is {_NUM} "
                rf"tokens and your request has {_NUM} input tokens", re.I),
     lambda c, lim, p: OverflowNumbers(_n(p) + _n(c), _n(lim), _n(p), _n(c))),
    # OpenAI, DeepSeek, old vLLM: "you requested N tokens (P in the messages, C in the ...".
    (re.compile(rf"maximum context length is {_NUM} tokens[.,] however,? you requested "
                rf"(?:about )?{_NUM} tokens \({_NUM} (?:in the messages|in your prompt|of text "
                rf"input)[;,] {_NUM} (?:in|for) the (?:completion|output)", re.I),
     lambda lim, req, p, c: OverflowNumbers(_n(req), _n(lim), _n(p), _n(c))),
    # OpenAI: "However, your messages resulted in N tokens".
    (re.compile(rf"maximum context length is {_NUM} tokens\. However, your messages resulted "
                rf"in {_NUM} tokens", re.I),
     lambda lim, p: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # vLLM (current): "However, your request has N input tokens".
    (re.compile(rf"maximum (?:context|prompt) length is {_NUM} tokens\. However, your request "
                rf"has {_NUM} (?:input|prompt) tokens", re.I),
     lambda lim, p: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # Generic OpenAI-compatible: "maximum context length is N tokens ... requested M tokens".
    (re.compile(rf"maximum context length is {_NUM} tokens.{{0,40}}?requested (?:about )?"
                rf"{_NUM} tokens", re.I | re.S),
     lambda lim, req: OverflowNumbers(_n(req), _n(lim))),
    # Anthropic: prompt alone.
    (re.compile(rf"prompt is too long: {_NUM} tokens > {_NUM} maximum", re.I),
     lambda p, lim: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # Anthropic: prompt + max_tokens.
    (re.compile(rf"exceed context limit: {_NUM} \+ {_NUM} > {_NUM}", re.I),
     lambda p, c, lim: OverflowNumbers(_n(p) + _n(c), _n(lim), _n(p), _n(c))),
    # LM Studio.
    (re.compile(rf"keep the first {_NUM} tokens when context the overflows.*?context length of "
                rf"only {_NUM} tokens", re.I | re.S),
     lambda p, lim: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # Gemini through OpenAI-compatible gateways.
    (re.compile(rf"input token count \({_NUM}\) exceeds the maximum number of tokens allowed "
                rf"\({_NUM}\)", re.I),
     lambda p, lim: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # Mistral.
    (re.compile(rf"Prompt contains {_NUM} tokens.*?too large for model with {_NUM} maximum "
                r"context length", re.I | re.S),
     lambda p, lim: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # xAI.
    (re.compile(rf"maximum prompt length is {_NUM} but the request contains {_NUM} tokens", re.I),
     lambda lim, p: OverflowNumbers(_n(p), _n(lim), _n(p))),
    # Gateways: "Input length 9000 exceeds the context window of 8192 tokens".
    (re.compile(rf"input length {_NUM} exceeds (?:the )?(?:model limit|context window)"
                rf"(?: of {_NUM})?", re.I),
     lambda p, lim=None: OverflowNumbers(_n(p), _n(lim) if lim else None, _n(p))),
)

# Wordings without numbers (or whose numbers come from separate fields).
_OVERFLOW_PHRASES = re.compile(
    r"context[_ ]length[_ ]exceeded|exceed_context_size_error"
    r"|exceeds the available context size|input length exceeds the context length"
    r"|exceeds the context window|input is too long for requested model"
    r"|prompt is too long|exceeded model token limit|maximum context length is \d"
    r"|ContextWindowExceededError|exceeds the maximum number of tokens allowed",
    re.I,
)
_NOT_OVERFLOW = re.compile(r"rate limit|per minute|per min\b|TPM|quota", re.I)


def parse_overflow(message: str, fields: Mapping[str, Any] | None = None) -> OverflowNumbers:
    """The numbers a context-overflow error states (any of them may be missing)."""
    for pattern, build in _OVERFLOW_PATTERNS:
        match = pattern.search(message)
        if match:
            return build(*[g for g in match.groups() if g is not None])
    fields = fields or {}
    prompt, ctx = fields.get("n_prompt_tokens"), fields.get("n_ctx")  # llama.cpp server
    if isinstance(prompt, int) or isinstance(ctx, int):
        p = prompt if isinstance(prompt, int) else None
        return OverflowNumbers(p, ctx if isinstance(ctx, int) else None, p)
    return OverflowNumbers()


def is_context_overflow(status: int | None, message: str,
                        fields: Mapping[str, Any] | None = None) -> bool:
    """Does this error answer say the request is too long for the model's context?"""
    fields = fields or {}
    if status == 429:
        return False  # "tokens per minute" limits mention tokens but are rate limits
    if fields.get("code") == "context_length_exceeded":
        return True
    if fields.get("type") == "exceed_context_size_error":
        return True
    if _NOT_OVERFLOW.search(message):
        return False
    if status is not None and status >= 500:
        # llama.cpp answered overflows with 500 before it had a proper type; only trust the
        # exact wordings there, never loose phrases in an ordinary server error.
        return any(p.search(message) for p, _ in _OVERFLOW_PATTERNS) or bool(
            re.search(r"exceeds the available context size", message, re.I))
    return bool(_OVERFLOW_PHRASES.search(message)) or any(
        p.search(message) for p, _ in _OVERFLOW_PATTERNS)


# --------------------------------------------------------------------------- bodies


def error_fields(body: Any) -> dict[str, Any]:
    """The error object of a provider body: {"message", "type", "code", ...} where present.

    Handles OpenAI's `{"error": {...}}`, Anthropic's `{"type": "error", "error": {...}}`,
    plain `{"error": "text"}` (Ollama, LM Studio), an already unwrapped error dict (the
    openai SDK unwraps), and bare strings.
    """
    if isinstance(body, str):
        return {"message": body}
    if not isinstance(body, Mapping):
        return {"message": "" if body is None else str(body)}
    inner = body.get("error")
    if isinstance(inner, Mapping):
        return dict(inner)
    if isinstance(inner, str):
        return {**{k: v for k, v in body.items() if k != "error"}, "message": inner}
    return dict(body)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (Retry-After, retry-after-ms), if it did."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # a hint we cannot read is no hint: the policy's backoff applies
    return max(0.0, parsed.timestamp() - time.time())


# --------------------------------------------------------------------------- classification


def auth_message(label: str, env_var: str | None, detail: str = "") -> str:
    where = (f"set {env_var} to a valid key or pass api_key=... to make_chat_model()"
             if env_var else "pass api_key=... to make_chat_model() with the server's key")
    detail = f" ({detail})" if detail else ""
    return f"{label} rejected the API key{detail}: {where}."


def from_status(
    *,
    provider: str,
    label: str,
    status: int,
    body: Any,
    headers: Mapping[str, str] | None = None,
    env_var: str | None = None,
    secrets: Iterable[str | None] = (),
) -> ProviderError:
    """Turn an HTTP error answer into the matching `ProviderError`."""
    secrets = tuple(secrets)
    fields = error_fields(body)
    message = redact(str(fields.get("message") or ""), secrets)
    said = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    if is_context_overflow(status, message, fields):
        nums = parse_overflow(message, fields)
        over = (f"{nums.requested} tokens requested, limit {nums.limit}"
                if nums.requested is not None and nums.limit is not None else "size unknown")
        return ContextOverflowError(
            f"The request does not fit {label}'s context window ({over}). Compact the session "
            f"or shorten the new message. Provider said: {said}",
            provider=provider, status=status, requested_tokens=nums.requested,
            limit_tokens=nums.limit, prompt_tokens=nums.prompt,
            completion_tokens=nums.completion, provider_message=message,
        )
    if status in (401, 403):
        return ProviderAuthError(auth_message(label, env_var, said), provider=provider,
                                 status=status, env_var=env_var)
    wait = retry_after_seconds(headers)
    if status == 429:
        return RateLimitError(f"{label} rate limit ({said}); retry later.", provider=provider,
                              status=status, retry_after=wait)
    if status in (408, 409) or status >= 500:
        return ProviderUnavailableError(f"{label} is unavailable ({said}).", provider=provider,
                                        status=status, retry_after=wait)
    return ProviderRequestError(f"{label} refused the request ({said}).", provider=provider,
                                status=status)


def translate_sdk_error(
    exc: BaseException,
    sdk: Any,
    *,
    provider: str,
    label: str,
    env_var: str | None,
    secrets: Iterable[str | None] = (),
) -> ProviderError | None:
    """Map an `openai` / `anthropic` SDK exception (same class names in both) to ours.

    Returns None for exceptions that are not provider failures (e.g. cancellation).
    """
    secrets = tuple(secrets)
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderTimeoutError(f"{label} did not answer in time.", provider=provider)
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderConnectionError(
            f"Could not reach {label}: {redact(str(exc), secrets)}", provider=provider)
    if isinstance(exc, sdk.APIStatusError):
        headers = dict(exc.response.headers) if getattr(exc, "response", None) else None
        return from_status(provider=provider, label=label, status=exc.status_code,
                           body=exc.body if exc.body is not None else exc.message,
                           headers=headers, env_var=env_var, secrets=secrets)
    # ValueError: the SDKs let json.JSONDecodeError through for a body that is not JSON.
    if isinstance(exc, sdk.APIResponseValidationError | ValueError):
        return MalformedResponseError(
            f"{label} sent a response that could not be read: {redact(str(exc), secrets)}",
            provider=provider)
    if isinstance(exc, sdk.APIError):
        return ProviderError(f"{label} failed: {redact(str(exc), secrets)}", provider=provider)
    return None


def chain_for(error: ProviderError, cause: BaseException) -> BaseException | None:
    """The `__cause__` to raise `error` with: none for auth errors, whose SDK exception may
    quote (a masked form of) the key back at us, and none when nothing was translated."""
    if error is cause or isinstance(error, ProviderAuthError):
        return None
    return cause
