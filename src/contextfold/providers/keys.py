"""Where API keys come from, and the rule that they go nowhere else.

A key is read from the explicit argument or the provider's environment variable and handed
straight to the SDK client. contextfold never logs it, never stores it (not in sessions, not
in checkpoints, not on adapter attributes) and never puts it in an error message or repr.
"""

from __future__ import annotations

import os

from .errors import ProviderAuthError

# Local servers (Ollama, vLLM, llama.cpp, LM Studio) ignore the key, but the SDK wants one.
UNUSED_KEY = "not-needed"


def resolve_api_key(
    api_key: str | None, *, env_var: str | None, provider: str, label: str, required: bool
) -> str:
    """The key to use: the explicit one, else `$env_var`; raise if required and absent."""
    if api_key is not None and not api_key.strip():
        raise ProviderAuthError(
            f"The api_key given for {label} is empty: pass a real key or leave api_key unset "
            f"to read {env_var or 'no environment variable'}.",
            provider=provider, env_var=env_var)
    key = api_key or (os.environ.get(env_var) if env_var else None)
    if key:
        return key
    if required:
        where = f"set {env_var} or pass api_key=..." if env_var else "pass api_key=..."
        raise ProviderAuthError(f"No API key for {label}: {where}.", provider=provider,
                                env_var=env_var)
    return UNUSED_KEY
