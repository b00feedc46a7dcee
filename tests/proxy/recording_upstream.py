"""An upstream for the proxy's guard tests that records every request as it arrived (method,
path as sent on the wire, headers) and answers chat completions and Messages with a fixed
short reply, so a test can assert on what the proxy did or did not forward."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Seen:
    method: str
    raw_path: str
    headers: dict[str, str]


@dataclass
class RecordingUpstream:
    """Start with `start()`; `url` is its base; `seen` what reached it."""

    seen: list[Seen] = field(default_factory=list)
    # When set, every chat answer is these bytes instead of the short reply (a hostile or
    # broken upstream).
    reply_bytes: bytes | None = None

    def __post_init__(self) -> None:
        async def any_path(request: Request) -> Response:
            raw = request.scope.get("raw_path") or request.url.path.encode()
            self.seen.append(Seen(request.method, raw.decode("latin-1"),
                                  dict(request.headers)))
            await request.body()
            if self.reply_bytes is not None:
                return Response(self.reply_bytes, media_type="application/json")
            if request.url.path.endswith("/messages"):
                return JSONResponse(_anthropic_reply())
            if request.url.path.endswith("/chat/completions"):
                return JSONResponse(_openai_reply())
            return JSONResponse({"path": request.url.path})

        app = Starlette(routes=[Route("/{path:path}", any_path,
                                      methods=["GET", "POST", "PUT", "DELETE", "PATCH"])])
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RecordingUpstream:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording upstream did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def _openai_reply() -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "local-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}


def _anthropic_reply() -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "local-model",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 1}}
