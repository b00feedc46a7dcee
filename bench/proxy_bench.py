"""What `contextfold proxy` adds per request: latency (p50/p99) and throughput through the proxy
against the same upstream alone, on loopback, at 2k- and 200k-token histories.

The upstream is a minimal OpenAI-compatible server (a fixed reply, usage from the body size)
so the figures are the proxy's own cost: parsing, the content-hash lookup, storing the new
messages and the reply, sizing, building the forwarded body and relaying the answer. Each
client behaves like an agent: it resends its whole history plus one new message every time.
The window is large enough that nothing is compacted (compaction cost is measured elsewhere).

    python -m bench.proxy_bench            # -> bench/results/proxy.json
    python -m bench.proxy_bench --hashing  # only its "hashing" row (no servers)

The "hashing" row is the content-hash chain of a long resent list (SPEC Y1, a real Claude Code
session's messages), which the proxy computes on every request: in full, and with the
mirror's memo of the previous list.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextfold._net import listening_socket
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread

RESULTS = Path(__file__).resolve().parent / "results" / "proxy.json"
REPLY = "ok, noted."
SIZES = {"2k": 2_000, "200k": 200_000}
REQUESTS = {"2k": 40, "200k": 12}
CONCURRENT = 4


async def _chat(request: Request) -> JSONResponse:
    body = await request.body()
    prompt = len(body) // 4
    return JSONResponse({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
        "model": "bench-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": REPLY}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 4,
                  "total_tokens": prompt + 4}})


class Upstream:
    def __init__(self) -> None:
        self.sock = listening_socket()  # TCP_NODELAY: else Nagle adds ~40 ms (issue 26)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Upstream:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def history(tokens: int, tag: str) -> list[dict[str, Any]]:
    """A conversation of about `tokens` tokens (4 characters a token), tool-free."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    turn = 0
    while sum(len(m["content"]) for m in msgs) < tokens * 4:
        msgs.append({"role": "user", "content": f"[{tag}] step {turn}: " +
                     "please look at the module and tell me what it does. " * 30})
        msgs.append({"role": "assistant", "content": REPLY})
        turn += 1
    msgs.append({"role": "user", "content": f"[{tag}] next"})
    return msgs


def run_client(base: str, size: str, tag: str, n: int) -> list[float]:
    """One agent: `n` requests, each its whole history plus a new message; latencies (s)."""
    msgs = history(SIZES[size], tag)
    out = []
    with httpx2.Client(timeout=600) as client:
        for i in range(n):
            started = time.perf_counter()
            r = client.post(f"{base}/v1/chat/completions", headers={
                "authorization": "Bearer sk-bench"}, json={
                "model": "bench-model", "messages": msgs, "max_tokens": 64})
            out.append(time.perf_counter() - started)
            r.raise_for_status()
            msgs = [*msgs, {"role": "assistant", "content": r.json()["choices"][0]["message"][
                "content"]}, {"role": "user", "content": f"[{tag}] and then {i}?"}]
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(base: str, size: str, label: str) -> dict[str, Any]:
    n = REQUESTS[size]
    lat = run_client(base, size, f"{label}-seq", n)
    steady = lat[1:]  # the first request of a proxied session stores the whole history
    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENT) as pool:
        runs = list(pool.map(lambda k: run_client(base, size, f"{label}-c{k}", n // 2),
                             range(CONCURRENT)))
    wall = time.perf_counter() - started
    done = sum(len(r) for r in runs)
    return {"first_ms": lat[0] * 1000, "p50_ms": statistics.median(steady) * 1000,
            "p99_ms": _pct(steady, 0.99) * 1000, "requests": n,
            "throughput_rps": done / wall, "concurrent_clients": CONCURRENT}


HASHED_MESSAGES = 5_100
# A real Claude Code session (tool calls, file contents): its messages, repeated to length.
TRANSCRIPT = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "claude-code" /
              "258c7280-ae70-4798-800f-63464d01a85d.jsonl")


def hashing() -> dict[str, Any]:
    """Seconds to hash a resent list of `HASHED_MESSAGES` messages (two of them new): every
    message, as before the memo, and through `ChainMemo` primed with the previous list."""
    from contextfold.core.messages import text_message
    from contextfold.formats import import_file
    from contextfold.runtime.content_chain import ChainMemo, chain_hashes

    recorded = [n.message for n in import_file(TRANSCRIPT).nodes if n.message is not None]
    msgs = [recorded[i % len(recorded)] for i in range(HASHED_MESSAGES - 2)]
    resent = [*msgs, text_message("assistant", REPLY), text_message("user", "and then?")]

    def best(run: Any) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return min(times)

    def memoised() -> None:
        memo = ChainMemo()
        memo.hashes("bench", msgs)
        started = time.perf_counter()
        memo.hashes("bench", resent)
        timed.append(time.perf_counter() - started)

    timed: list[float] = []
    full = best(lambda: chain_hashes("bench", resent))
    for _ in range(3):
        memoised()
    return {"messages": len(resent), "full_s": full, "memo_s": min(timed)}


def main() -> int:
    if "--hashing" in sys.argv[1:]:  # refresh that row only, keep the measured latencies
        data = json.loads(RESULTS.read_text(encoding="utf-8"))
        data["hashing"] = hashing()
        RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(data["hashing"]))
        return 0
    rows = []
    with Upstream() as upstream, tempfile.TemporaryDirectory() as tmp:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.url, windows={"*": 1_000_000},
                                        db=f"sqlite:///{Path(tmp) / 'bench.db'}")).start()
        try:
            for size in SIZES:
                direct = measure(upstream.url, size, f"direct-{size}")
                proxied = measure(proxy.url, size, f"proxy-{size}")
                rows.append({"history": size, "history_tokens": SIZES[size],
                             "direct": direct, "proxy": proxied,
                             "added_p50_ms": proxied["p50_ms"] - direct["p50_ms"],
                             "added_p99_ms": proxied["p99_ms"] - direct["p99_ms"]})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            proxy.stop()
    RESULTS.write_text(json.dumps({
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                    "note": "2 shared cores, other jobs running"},
        "store": "SQLite file", "rows": rows, "hashing": hashing()}, indent=2) + "\n",
        encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
