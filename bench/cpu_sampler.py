"""The CPU a running server spends per conversation over a soak (issue 38), read from outside.

A soak's latency moves with the machine's load (2 shared cores); the server's own CPU time
per conversation does not, so a request path that grows with the stored history shows there
and nothing else does. Every `EVERY` seconds this reads the server's CPU time (the kernel's
run time of each of its threads, `ServerProcess.cpu_seconds`'s reading) and the count of
conversations the soak's log says it finished, until the process exits:

    python -m bench.cpu_sampler PID SOAK_LOG OUT.json   # a `bench/proxy_soak.py` or
                                                        # `bench/service_soak.py` run's log
    python -m bench.cpu_sampler --attach OUT.json RESULTS.json STORE
        # its first and last tenth into the run of STORE in a soak's results file

(The soaks now read their servers' CPU at every sample themselves, `sample_run`; this is
for a run started without it.)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

EVERY = 20.0  # seconds between two readings
_DONE = re.compile(r"\{'conversations': (\d+),")


def cpu_seconds(pid: int) -> float:
    """CPU run time so far of every thread of `pid`."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def finished(log: Path) -> int:
    """The conversations the soak's last sample line counts (0 before the first)."""
    found = _DONE.findall(log.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def _steps(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first reading after each new count of conversations (the soak's sample lines
    come every 100 conversations; CPU between two such readings is those conversations')."""
    out: list[dict[str, Any]] = []
    for r in readings:
        if r["conversations"] and (not out or r["conversations"] > out[-1]["conversations"]):
            out.append(r)
    return out


def per_conversation(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU milliseconds per conversation between two successive `_steps`."""
    steps = _steps(readings)
    return [{"conversations": b["conversations"], "cpu_ms_per_conversation": round(
        1000 * (b["cpu_s"] - a["cpu_s"]) / (b["conversations"] - a["conversations"]), 2)}
        for a, b in itertools.pairwise(steps)]


def summary(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU per conversation over the first and the last tenth of the watched conversations
    (one span each, so the readings' timing evens out) and their ratio."""
    steps = _steps(readings)
    k = max(1, (len(steps) - 1) // 10)

    def span(a: dict[str, Any], b: dict[str, Any]) -> float:
        return 1000 * (b["cpu_s"] - a["cpu_s"]) / (b["conversations"] - a["conversations"])

    first, last = span(steps[0], steps[k]), span(steps[-1 - k], steps[-1])
    return {"from_conversations": steps[0]["conversations"],
            "to_conversations": steps[-1]["conversations"],
            "cpu_ms_per_conversation_first_decile": round(first, 2),
            "cpu_ms_per_conversation_last_decile": round(last, 2),
            "cpu_ratio_last_first": round(last / first, 3)}


def main(argv: list[str]) -> int:
    if argv[0] == "--attach":
        sampled, results, store = Path(argv[1]), Path(argv[2]), argv[3]
        data = json.loads(results.read_text(encoding="utf-8"))
        data["runs"][store]["cpu_sampled"] = summary(
            json.loads(sampled.read_text(encoding="utf-8"))["readings"])
        results.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return 0
    pid, log, out = int(argv[0]), Path(argv[1]), Path(argv[2])
    readings: list[dict[str, Any]] = []
    while Path(f"/proc/{pid}").exists():
        with contextlib.suppress(OSError, ValueError):
            readings.append({"t": round(time.time(), 1), "cpu_s": round(cpu_seconds(pid), 3),
                             "conversations": finished(log)})
            out.write_text(json.dumps({"pid": pid, "readings": readings,
                                       "per_conversation": per_conversation(readings)},
                                      indent=1) + "\n", encoding="utf-8")
        time.sleep(EVERY)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
