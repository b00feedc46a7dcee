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


def per_conversation(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """CPU milliseconds per conversation between readings whose conversation counts
    differ (a sample line comes every 100 conversations)."""
    out, last = [], None
    for r in readings:
        if last is not None and r["conversations"] > last["conversations"]:
            out.append({"conversations": r["conversations"], "cpu_ms_per_conversation": round(
                1000 * (r["cpu_s"] - last["cpu_s"]) / (r["conversations"] - last["conversations"]),
                2)})
        if last is None or r["conversations"] > last["conversations"]:
            last = r
    return out


def summary(per: list[dict[str, Any]]) -> dict[str, Any]:
    """The first and last tenth of `per_conversation`'s figures and their ratio."""
    values = [p["cpu_ms_per_conversation"] for p in per]
    k = max(1, len(values) // 10)
    first, last = sum(values[:k]) / k, sum(values[-k:]) / k
    return {"from_conversations": per[0]["conversations"],
            "to_conversations": per[-1]["conversations"], "readings": len(values),
            "cpu_ms_per_conversation_first_decile": round(first, 2),
            "cpu_ms_per_conversation_last_decile": round(last, 2),
            "cpu_ratio_last_first": round(last / first, 3)}


def main(argv: list[str]) -> int:
    if argv[0] == "--attach":
        sampled, results, store = Path(argv[1]), Path(argv[2]), argv[3]
        data = json.loads(results.read_text(encoding="utf-8"))
        data["runs"][store]["cpu_sampled"] = summary(
            json.loads(sampled.read_text(encoding="utf-8"))["per_conversation"])
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
