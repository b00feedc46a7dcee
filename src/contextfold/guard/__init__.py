"""What both HTTP faces (`contextfold serve` and `contextfold proxy`) guard the same way
(SPEC Y8, W2, W3): the host names and origins they answer, body size and depth, bearer
tokens and rate limits.

Pure ASGI (no FastAPI, no Starlette): the proxy's install has neither FastAPI nor the
service's dependencies, and one policy must not exist twice. Each face passes its own error
shape (the service's `{"error", "type"}`, the proxy's OpenAI or Anthropic body).
"""
