"""What `contextfold proxy` adds per request, side by side with a bare pass-through (issue 26).

Three systems in interleaved rounds, each round one request to each (its own agent session,
the same history size): the instant scripted upstream alone ("direct"), a ~30-line Starlette
+ httpx2 pass-through (`bench/bare_proxy.py`, the floor for a Python proxy) and `contextfold
proxy` with a window that needs no compaction (SQLite store). Histories are agent-style and
never repeat (`bench/agent_history.py`: tool calls, standard-library source, test logs),
resent in full plus one new message per request. Added latency is each request's minus the
same round's direct request; the ratio to bare is per round (median, quartiles). Then the
per-request cost by messages resent (100, 1,000, 5,000). Every listening socket has
TCP_NODELAY (the old "direct" 44 ms p50 was Nagle's algorithm on the bench's own socket).

    python -m bench.proxy_bench            # -> bench/results/proxy.json (about 3 minutes)
    python -m bench.proxy_bench --quick    # a few rounds, nothing written
    python -m bench.proxy_bench --hashing  # only its "hashing" row (no servers)
    python -m bench.proxy_bench --import   # only the CLI import times the first request meets

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
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.agent_history import TOOLS, history
from bench.bare_proxy import bare_app
from contextfold._net import listening_socket
from contextfold.proxy import ProxyConfig
from contextfold.proxy.serve import ProxyThread

RESULTS = Path(__file__).resolve().parent / "results" / "proxy.json"
REPLY = "ok, noted."
SIZES = {"2k": 2_000, "50k": 50_000, "200k": 200_000}
ROUNDS = {"2k": 30, "50k": 20, "200k": 14}
SCALING = (100, 1_000, 5_000)  # messages resent per request (the per-request cost row)
SCALING_ROUNDS = 8
PAUSE = 0.03  # s idle after each answer: the server's after-answer work lands in its request


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


class Server:
    """An ASGI app on a loopback port in a daemon thread (its socket with TCP_NODELAY)."""

    def __init__(self, app: Any) -> None:
        self.sock = listening_socket()  # TCP_NODELAY: else Nagle adds ~40 ms (issue 26)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class Upstream(Server):
    """The instant scripted upstream: a fixed reply, usage from the body size."""

    def __init__(self) -> None:
        super().__init__(Starlette(routes=[Route("/v1/chat/completions", _chat,
                                                 methods=["POST"])]))


class Agent:
    """One agent session against one base URL: each `step` resends the whole history plus
    one new message, and keeps the reply (latency in seconds)."""

    def __init__(self, base: str, msgs: list[dict[str, Any]], tag: str) -> None:
        self.base, self.msgs, self.tag, self.n = base, msgs, tag, 0
        self.client = httpx2.Client(timeout=600)

    def step(self) -> tuple[float, float]:
        """One request: its latency and the process CPU it cost (client, servers and the
        store's threads; measured until a short idle pause after the answer, so work the
        server does after answering, like recording the reply, counts too)."""
        cpu = time.process_time()
        started = time.perf_counter()
        r = self.client.post(f"{self.base}/v1/chat/completions", headers={
            "authorization": "Bearer sk-bench"}, json={
            "model": "bench-model", "messages": self.msgs, "tools": TOOLS, "max_tokens": 64})
        took = time.perf_counter() - started
        r.raise_for_status()
        self.msgs = [*self.msgs, r.json()["choices"][0]["message"],
                     {"role": "user", "content": f"[{self.tag}] and then {self.n}?"}]
        self.n += 1
        time.sleep(PAUSE)
        return took, time.process_time() - cpu


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


SYSTEMS = ("direct", "bare", "contextfold")


def interleaved(bases: dict[str, str], make: Any, rounds: int, label: str) -> dict[str, Any]:
    """`rounds` rounds, each one request per system (same history size, its own session);
    latencies, added ms over direct and the ratio of contextfold's added to bare's, per round
    (the first request of each session, which stores the whole history, apart)."""
    agents = {name: Agent(base, make(f"{label}-{name}"), f"{label}-{name}")
              for name, base in bases.items()}
    first = {name: a.step()[0] * 1000 for name, a in agents.items()}
    lat: dict[str, list[float]] = {name: [] for name in agents}
    cpu: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(rounds):
        for name, agent in agents.items():
            took, used = agent.step()
            lat[name].append(took * 1000)
            cpu[name].append(used * 1000)
    for a in agents.values():
        a.client.close()
    out: dict[str, Any] = {"rounds": rounds, "messages": len(agents["direct"].msgs),
                           "first_ms": first}
    for name, values in lat.items():
        out[name] = {"p50_ms": statistics.median(values), "p99_ms": _pct(values, 0.99),
                     "cpu_p50_ms": statistics.median(cpu[name])}
    for name in ("bare", "contextfold"):
        if name in lat:
            added = [x - d for x, d in zip(lat[name], lat["direct"], strict=True)]
            out[name]["added_p50_ms"] = statistics.median(added)
            out[name]["added_p99_ms"] = _pct(added, 0.99)
            added_cpu = [x - d for x, d in zip(cpu[name], cpu["direct"], strict=True)]
            out[name]["added_cpu_p50_ms"] = statistics.median(added_cpu)
    if "bare" in lat:
        # Per round on wall clock; a bare added below 0.5 ms (scheduling noise on a shared
        # machine can make it negative) counts as 0.5 ms so one round cannot blow the ratio up.
        ratios = [(c - d) / max(b - d, 0.5) for c, b, d in
                  zip(lat["contextfold"], lat["bare"], lat["direct"], strict=True)]
        out["ratio_to_bare"] = {"p50": statistics.median(ratios), "p25": _pct(ratios, 0.25),
                                "p75": _pct(ratios, 0.75),
                                "of_p50s": out["contextfold"]["added_p50_ms"]
                                / max(out["bare"]["added_p50_ms"], 0.5),
                                "of_cpu_p50s": out["contextfold"]["added_cpu_p50_ms"]
                                / max(out["bare"]["added_cpu_p50_ms"], 0.5)}
    out["per_round_ms"] = {name: [round(x, 2) for x in values] for name, values in lat.items()}
    out["per_round_cpu_ms"] = {name: [round(x, 2) for x in values]
                               for name, values in cpu.items()}
    print(json.dumps({label: out}), flush=True)
    return out


def _n_messages(n: int, tag: str) -> list[dict[str, Any]]:
    """An agent history of exactly `n` messages after the system prompt, ending on a user
    message (small tool results, so 5,000 messages stay within the window)."""
    msgs = history(n * 120, tag, chunk=300)
    body = msgs[1:n]
    while body and body[-1]["role"] != "user":
        body.pop()
    return [msgs[0], *body]


def run_all(quick: bool = False) -> dict[str, Any]:
    """Every row: the sizes side by side, then the per-request cost by messages resent."""
    rows: dict[str, Any] = {}
    scaling: dict[str, Any] = {}
    with Upstream() as upstream, tempfile.TemporaryDirectory() as tmp, \
            Server(bare_app(upstream.url)) as bare:
        proxy = ProxyThread(ProxyConfig(upstream=upstream.url, windows={"*": 2_000_000},
                                        db=f"sqlite:///{Path(tmp) / 'bench.db'}")).start()
        try:
            bases = {"direct": upstream.url, "bare": bare.url, "contextfold": proxy.url}
            for size, tokens in SIZES.items():
                rounds = 4 if quick else ROUNDS[size]
                rows[size] = interleaved(bases, lambda tag, t=tokens: history(t, tag),
                                         rounds, size)
                rows[size]["history_tokens"] = tokens
            for n in SCALING:
                scaling[str(n)] = interleaved(
                    {"direct": upstream.url, "contextfold": proxy.url},
                    lambda tag, n=n: _n_messages(n, tag), 3 if quick else SCALING_ROUNDS,
                    f"msgs{n}")
        finally:
            proxy.stop()
    base = scaling[str(SCALING[0])]["contextfold"]["added_cpu_p50_ms"]
    top = scaling[str(SCALING[-1])]["contextfold"]["added_cpu_p50_ms"]
    return {"rows": rows, "scaling": scaling,
            "scaling_ratio": top / max(base, 0.01),
            "goals": {"added_p50_le_3x_bare": all(r["ratio_to_bare"]["of_p50s"] <= 3
                                                  for r in rows.values()),
                      "added_cpu_p50_le_3x_bare": all(r["ratio_to_bare"]["of_cpu_p50s"] <= 3
                                                      for r in rows.values()),
                      "cost_5000_le_1_5x_100": top / max(base, 0.01) <= 1.5}}


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


def import_times() -> dict[str, Any]:
    """Wall seconds of `contextfold import` (its own process, a new SQLite file, best of 3)
    of histories like the first requests': the goal is a first request no slower."""
    import subprocess

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key, msgs in (("200k", history(SIZES["200k"], "import")),
                          ("5000", _n_messages(5000, "import"))):
            path = Path(tmp) / f"{key}.json"
            path.write_text(json.dumps(msgs), encoding="utf-8")
            times = []
            for i in range(3):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "contextfold", "import", str(path),
                                "--format", "openai", "--db", f"sqlite:///{tmp}/{key}{i}.db"],
                               check=True, capture_output=True)
                times.append(time.perf_counter() - started)
            out[key] = {"messages": len(msgs), "import_s": round(min(times), 3)}
    return out


def main() -> int:
    if "--hashing" in sys.argv[1:]:  # refresh that row only, keep the measured latencies
        data = json.loads(RESULTS.read_text(encoding="utf-8"))
        data["hashing"] = hashing()
        RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(data["hashing"]))
        return 0
    if "--import" in sys.argv[1:]:  # the same for the import row
        data = json.loads(RESULTS.read_text(encoding="utf-8"))
        data["import"] = import_times()
        RESULTS.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(data["import"]))
        return 0
    started = time.perf_counter()
    data = run_all(quick="--quick" in sys.argv[1:])
    data.update({"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                             "note": "2 shared cores, other jobs running"},
                 "store": "SQLite file", "hashing": hashing(), "import": import_times(),
                 "seconds": round(time.perf_counter() - started, 1)})
    out = RESULTS
    if "--out" in sys.argv[1:]:  # e.g. a run of an older checkout, kept beside
        out = Path(sys.argv[sys.argv.index("--out") + 1])
    if "--quick" not in sys.argv[1:]:
        out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
