"""The fake provider: one ASGI app speaking OpenAI chat completions, the OpenAI Responses API
and Anthropic Messages.

`POST /v1/chat/completions`, `POST /v1/responses` (`responses.py`) and `POST /v1/messages`,
plain JSON or server-sent events, with the providers' real response shapes, usage fields,
error bodies and status codes. Every request body is recorded (with its real token count) so
tests can assert on what the client actually sent. This module holds the request flow;
`state.py` what the fake model remembers and answers, `wire.py` and `responses.py` the
response formats.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import bodies, compaction, responses
from .script import Reply, ServerConfig
from .state import Protocol, RecordedRequest, ServerState, compose_answer, wait
from .summaries import is_summary_request
from .tokens import prompt_tokens
from .wire import anthropic_response, openai_response

__all__ = ["RecordedRequest", "ServerState", "create_app"]

# --------------------------------------------------------------------------- helpers


def _json_error(status: int, body: dict[str, Any] | str, retry_after: float | None) -> Response:
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else None
    if isinstance(body, str):
        return Response(body, status_code=status, headers=headers, media_type="application/json")
    return JSONResponse(body, status_code=status, headers=headers)


# --------------------------------------------------------------------------- shared flow


async def _handle(request: Request, protocol: Protocol,
                  respond: Callable[..., Response]) -> Response:
    state: ServerState = request.app.state.fake
    config = state.config
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        error = (bodies.openai_error("We could not parse the JSON body of your request.",
                                     "invalid_request_error")
                 if protocol != "anthropic"
                 else bodies.anthropic_error("invalid_request_error", "Invalid JSON body"))
        return JSONResponse(error, status_code=400)
    # A Responses body is counted and judged through its chat-shaped view (responses.py).
    view = responses.chat_view(body) if protocol == "responses" else \
        bodies.anthropic_effective(body) if protocol == "anthropic" else body
    total, running = prompt_tokens(view)
    summary = is_summary_request(view)
    entry = RecordedRequest(protocol, body, total, summary, bool(body.get("stream")),
                            key_headers={k: v for k, v in request.headers.items()
                                         if k in ("authorization", "x-api-key")})
    state.record(entry)
    # SPEC Y7: an on-demand compaction is answered from the request, not the script.
    on_demand = compaction.is_on_demand(protocol, body)
    reply = Reply() if on_demand else state.next_reply(summary, protocol, body)

    def finish(response: Response, outcome: str) -> Response:
        entry.status = response.status_code
        entry.outcome = outcome
        return response

    if reply.hang:
        entry.outcome = "hung"
        await wait(state, 3600)
        return finish(Response(status_code=503), "hung")
    if reply.delay:
        await wait(state, reply.delay)
    given = _key_of(request, protocol)
    if config.api_key is not None and given != config.api_key:
        body401 = (bodies.openai_status_body(401, given) if protocol != "anthropic"
                   else bodies.anthropic_status_body(401))
        return finish(JSONResponse(body401, status_code=401), "auth")
    if reply.status is not None:
        error = reply.error_body if reply.error_body is not None else (
            bodies.openai_status_body(reply.status) if protocol != "anthropic"
            else bodies.anthropic_status_body(reply.status))
        return finish(_json_error(reply.status, error, reply.retry_after), "scripted")
    if config.validate and protocol == "anthropic":
        problem = compaction.request_problem(body, request.headers)
        if problem is not None:
            return finish(JSONResponse(problem, status_code=400), "invalid")
    if config.validate:
        problem = (bodies.openai_request_problem(body) if protocol == "openai"
                   else responses.request_problem(body) if protocol == "responses"
                   else bodies.anthropic_request_problem(body))
        if problem is not None:
            return finish(JSONResponse(problem, status_code=400), "invalid")
    overflow = _overflow(config, protocol, view, total)
    if overflow is not None:
        return finish(JSONResponse(overflow[1], status_code=overflow[0]), "overflow")
    if on_demand:
        return finish(compaction.on_demand_response(state, body, total), "compaction")
    cached = reply.cached_tokens
    if cached is None:
        cached = state.cached_prefix(view, running) if config.prompt_cache else 0
    cached = min(cached, total)
    cache_write = min(reply.cache_write or 0, total - cached)
    answer = compose_answer(state, reply, body, summary,
                     "call_fake" if protocol != "anthropic" else "toolu_fake")
    entry.reply_text = answer.text
    return finish(respond(state, reply, body, answer, total, cached, cache_write),
                  "malformed" if reply.malformed else "ok")


def _key_of(request: Request, protocol: Protocol) -> str | None:
    # Anthropic accepts `x-api-key` and (what current SDKs send) `Authorization: Bearer`.
    if protocol == "anthropic" and request.headers.get("x-api-key"):
        return request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


def _overflow(config: ServerConfig, protocol: Protocol, body: dict[str, Any],
              prompt: int) -> tuple[int, dict[str, Any]] | None:
    window = config.context_window
    if window is None:
        return None
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    over_prompt = prompt > window
    over_total = bool(config.count_max_tokens and max_tokens and prompt + max_tokens > window)
    if not (over_prompt or over_total):
        return None
    completion = max_tokens if config.count_max_tokens else None
    if protocol == "responses":
        return responses.overflow(window, prompt)
    if protocol == "openai":
        return bodies.openai_overflow(config.openai_flavor, window, prompt, completion)
    return bodies.anthropic_overflow(window, prompt, completion)


# --------------------------------------------------------------------------- app


async def _chat_completions(request: Request) -> Response:
    return await _handle(request, "openai", openai_response)


async def _responses(request: Request) -> Response:
    return await _handle(request, "responses", responses.responses_response)


async def _messages(request: Request) -> Response:
    return await _handle(request, "anthropic", anthropic_response)


def create_app(state: ServerState) -> Starlette:
    """The ASGI app; `state` is shared with the test that drives it."""
    app = Starlette(routes=[
        Route("/v1/chat/completions", _chat_completions, methods=["POST"]),
        Route("/v1/messages", _messages, methods=["POST"]),
        Route("/v1/responses", _responses, methods=["POST"]),
    ])
    app.state.fake = state
    return app
