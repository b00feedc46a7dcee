"""JSON array exports read as a stream (issue 41) → bench/results/import_array.json.

Writes one OpenAI chat-completions conversation of varied messages (prose, tool calls with
JSON arguments, tool results, about 1.3 kB a message) at two sizes, 25 MB and 200 MB, each as
a JSON array and as JSONL (one message a line: the same messages, what the importer always
streamed), and reads each with `import_file` (detection, parsing, the node tree; not the
database) in a fresh process, recording peak RSS and wall time. The array is also read the
way it was before (the whole file, then `json.loads`), with the one-value limit raised so
that it is accepted. Run: `.venv/bin/python -m bench.import_array_bench
[--sizes 25,200]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "import_array.json"
WORDS = ("archive", "letter", "chapter", "review", "edition", "reader", "scholar", "detective",
         "serial", "stage", "narrator", "colony", "reception", "footnote", "method", "library",
         "bibliography", "citation")

MEASURE = """
import resource, sys, time
from contextfold.formats import import_file, chat
if sys.argv[3] == "whole":  # the import as it was: the file read whole, then json.loads
    chat.first_byte = lambda _path: b""
started = time.perf_counter()
result = import_file(sys.argv[1], sys.argv[2], max_bytes=1 << 31)
print(len(result.nodes), time.perf_counter() - started,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def messages(target_bytes: int, seed: int = 7) -> list[dict[str, Any]]:
    """A conversation of about `target_bytes` as JSON: user turns, tool calls, results."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    size, i = 2, 0

    def prose(n: int) -> str:
        return " ".join(rng.choice(WORDS) + (str(rng.randint(0, 999)) if rng.random() < 0.2
                                             else "") for _ in range(n))

    while size < target_bytes:
        k = i % 4
        if k == 0:
            m: dict[str, Any] = {"role": "user", "content": prose(rng.randint(20, 200))}
        elif k == 1:
            m = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{i}", "type": "function", "function": {
                    "name": "search", "arguments": json.dumps({"query": prose(6),
                                                               "limit": rng.randint(1, 50)})}}]}
        elif k == 2:
            m = {"role": "tool", "tool_call_id": f"call_{i - 1}",
                 "content": prose(rng.randint(100, 500))}
        else:
            m = {"role": "assistant", "content": prose(rng.randint(30, 300))}
        out.append(m)
        size += len(json.dumps(m)) + 1
        i += 1
    return out


def measure(path: Path, fmt: str, how: str) -> dict[str, Any]:
    env = {"CONTEXTFOLD_MAX_IMPORT_LINE_BYTES": str(1 << 31)} if how == "whole" else {}

    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), fmt, how],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    nodes, seconds, rss_kb = done.stdout.split()
    return {"file": path.suffix.lstrip("."), "read": how, "nodes": int(nodes),
            "seconds": round(float(seconds), 2), "peak_rss_mb": round(int(rss_kb) / 1024, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="25,200", help="MB, comma-separated")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (int(s) for s in args.sizes.split(",")):
            conversation = messages(mb * 1_000_000)
            array, lines = Path(tmp) / f"export-{mb}.json", Path(tmp) / f"export-{mb}.jsonl"
            array.write_text(json.dumps(conversation), encoding="utf-8")
            lines.write_text("\n".join(json.dumps(m) for m in conversation) + "\n",
                             encoding="utf-8")
            row = {"mb": mb, "messages": len(conversation),
                   "array_bytes": array.stat().st_size, "jsonl_bytes": lines.stat().st_size,
                   "runs": [measure(lines, "auto", "stream"), measure(array, "auto", "stream")]}
            row["runs"].append(measure(array, "openai", "whole"))
            runs.append(row)
            print(json.dumps(row))
            array.unlink()
            lines.unlink()
    RESULTS.write_text(json.dumps({"python": platform.python_version(), "sizes": runs},
                                  indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
