"""A benchmarked server in its own process: start, wait until it answers, its CPU, stop.

The proxy bench runs every system it compares (the scripted upstream, the bare pass-through,
LiteLLM, `contextfold proxy` with one or several workers) as a process of its own, so the
clients' threads never share an interpreter with a server, and a server's CPU is its own
process tree's (`cpu_seconds`: the kernel's nanosecond run time of every thread of the
process and its children, not the 10 ms ticks of `/proc/PID/stat`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Any

import httpx2


def free_port() -> int:
    """A loopback port free right now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children.get(current, [])
    return out


class ServerProcess:
    """`cmd` listening on `port`; `ready()` waits until a chat request through it succeeds."""

    def __init__(self, name: str, cmd: list[str], port: int, *, log: Path,
                 env: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name, self.port, self.log = name, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.headers = headers or {"authorization": "Bearer sk-bench"}
        self._out: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, cwd=cwd)
        self._pids: list[int] = []

    def ready(self, model: str = "bench-model", timeout: float = 180,
              health: str | None = None) -> ServerProcess:
        """Wait for one small chat request to succeed (every worker started, caches warm);
        with `health` (a path, e.g. `/healthz` of `contextfold serve`, which has no chat
        endpoint), for a GET of it to answer 200 instead."""
        deadline = time.monotonic() + timeout
        body = {"model": model, "messages": [{"role": "user", "content": "ready?"}],
                "max_tokens": 8}
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): "
                                   f"{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx2.HTTPError):
                r = httpx2.get(f"{self.url}{health}", timeout=30) if health else httpx2.post(
                    f"{self.url}/v1/chat/completions", json=body, headers=self.headers,
                    timeout=30)
                if r.status_code == 200:
                    self._pids = _tree(self.proc.pid)
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not answer in {timeout:.0f} s: "
                                   f"{self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    def cpu_seconds(self) -> float:
        """CPU run time so far of every thread of the process tree (as of `ready`)."""
        total = 0
        for pid in self._pids:
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    with contextlib.suppress(OSError):
                        total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
