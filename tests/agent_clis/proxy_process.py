"""Start `contextfold proxy` as the user would, as a subprocess on a free loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx

from .clis import ROOT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningProxy:
    """A running proxy: its address, database and log file."""

    port: int
    db_url: str
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def contextfold_cli() -> list[str]:
    """The `contextfold` command of this checkout's environment."""
    script = Path(sys.executable).parent / "contextfold"
    return [str(script)] if script.exists() else [sys.executable, "-m", "contextfold.cli"]


@contextmanager
def running_proxy(upstream: str, protocol: str, model: str, window: int,
                  scratch: Path) -> Iterator[RunningProxy]:
    """`contextfold proxy --upstream … --protocol … --model-window MODEL=N --db … --port …`."""
    port = free_port()
    running = RunningProxy(port, f"sqlite:///{scratch / 'proxy.db'}", scratch / "proxy.log")
    argv = [*contextfold_cli(), "proxy", "--upstream", upstream, "--protocol", protocol,
            "--model-window", f"{model}={window}", "--db", running.db_url,
            "--port", str(port)]
    with running.log.open("w") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        try:
            _wait_ready(process, running)
            yield running
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_ready(process: subprocess.Popen[bytes], running: RunningProxy) -> None:
    deadline = time.monotonic() + 120  # a loaded CI machine starts Python slowly
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the proxy exited {process.returncode}:\n{running.log_text()}")
        try:
            httpx.get(f"{running.base_url}/v1/models", timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"the proxy did not answer within 120 s:\n{running.log_text()}")
