"""Bounded, streamed reads (issue 10) → bench/results/read_memory.json.

Writes a 200 MB Pi session (2,000 entries of 100 kB) and imports it with `import_file` in a
fresh process, recording peak RSS and wall time; the file is also refused below its size
(`max_bytes`) without being read. Run: `.venv/bin/python -m bench.read_memory`.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "read_memory.json"
ENTRIES = 2_000
ENTRY_CHARS = 100_000

MEASURE = """
import resource, sys, time
from contextfold.formats import import_file
started = time.perf_counter()
result = import_file(sys.argv[1], max_bytes=int(sys.argv[2]))
print(len(result.nodes), time.perf_counter() - started,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_session(path: Path) -> int:
    blob = "x" * ENTRY_CHARS
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"type": "session", "version": 3, "id": "big", "cwd": "/w",
                              "timestamp": "2025-01-01T00:00:00Z"}) + "\n")
        parent = None
        for i in range(ENTRIES):
            entry_id = f"{i:08x}"
            message = ({"role": "user", "content": f"question {i} {blob}"} if i % 2 == 0 else
                       {"role": "assistant", "stopReason": "stop",
                        "content": [{"type": "text", "text": f"answer {i} {blob}"}]})
            out.write(json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                  "timestamp": "2025-01-01T00:00:01Z", "message": message})
                      + "\n")
            parent = entry_id
    return path.stat().st_size


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        size = write_session(path)
        out = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(size)],
                             capture_output=True, text=True, check=True)
        nodes, seconds, rss_kb = out.stdout.split()
        started = time.perf_counter()
        refused = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(size - 1)],
                                 capture_output=True, text=True)
        refuse_seconds = time.perf_counter() - started
    report = {
        "benchmark": "read_memory",
        "path": "contextfold.formats.import_file (what `contextfold import` parses with)",
        "file_bytes": size,
        "nodes": int(nodes),
        "import_seconds": round(float(seconds), 2),
        "peak_rss_bytes": int(rss_kb) * 1024,
        "peak_rss_over_file_size": round(int(rss_kb) * 1024 / size, 2),
        "over_limit_refused": "over the import limit" in refused.stderr,
        "over_limit_process_seconds": round(refuse_seconds, 2),
        "python": platform.python_version(),
    }
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
