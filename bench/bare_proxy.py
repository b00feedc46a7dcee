"""The floor for a proxy's added latency: a bare pass-through (Starlette + httpx2), forwarding
a chat request's body and headers to the upstream and its answer back, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_DROP = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding"}


def bare_app(upstream: str) -> Starlette:
    """An app that relays `/v1/chat/completions` to `upstream` as it came."""
    state: dict[str, httpx2.AsyncClient] = {}

    async def relay(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        reply = await state["client"].post(f"{upstream}/v1/chat/completions",
                                           content=await request.body(), headers=headers)
        return Response(reply.content, status_code=reply.status_code,
                        media_type=reply.headers.get("content-type"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["client"] = httpx2.AsyncClient(timeout=600)
        yield
        await state["client"].aclose()

    return Starlette(routes=[Route("/v1/chat/completions", relay, methods=["POST"])],
                     lifespan=lifespan)


def main(argv: list[str]) -> None:
    """`python -m bench.bare_proxy UPSTREAM PORT`: serve it on 127.0.0.1:PORT (TCP_NODELAY)."""
    import uvicorn

    from contextfold._net import listening_socket

    upstream, port = argv
    sock = listening_socket("127.0.0.1", int(port))
    uvicorn.Server(uvicorn.Config(bare_app(upstream), log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
