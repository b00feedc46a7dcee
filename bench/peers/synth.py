"""A deterministic synthetic research-agent session built from real Zotero records.

The shape follows the research agent of the seed document: a user asks about a topic, the
assistant fans out parallel tool calls (library search, item metadata, PDF pages, annotations),
each result is a real Zotero Web API record (or page text built from one), and the assistant
answers. The same seed and length always give the same session, so every system sees the same
workload and a longer session is a strict extension of a shorter one.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, Neutral, neutral

ZOTERO_DIR = REPO_ROOT / "tests" / "fixtures" / "zotero"

_TOPICS = (
    "earthquake early warning", "urban economic development", "citation practices",
    "open-access publishing", "digital humanities methods", "community archives",
    "research data management", "film as historical evidence",
)
_TOOLS = ("zotero_search", "zotero_get_item", "read_pdf_page", "zotero_annotations")


@lru_cache(maxsize=1)
def _records(directory: str = str(ZOTERO_DIR)) -> tuple[dict[str, Any], ...]:
    path = Path(directory) / "items_doc.json"
    items = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path}: expected a JSON list of Zotero items")
    return tuple(items)


def _title(item: dict[str, Any]) -> str:
    return str(item.get("data", {}).get("title") or item.get("key", "untitled"))


def _page_text(item: dict[str, Any], page: int, rng: random.Random) -> str:
    data = item.get("data", {})
    words = " ".join(
        str(v) for v in data.values() if isinstance(v, str) and v and not v.startswith("http")
    ).split() or ["(empty)"]
    body = " ".join(rng.choice(words) for _ in range(rng.randint(250, 700)))
    return f"Page {page} of {_title(item)} ({item.get('key')}):\n{body}"


def _result(tool: str, item: dict[str, Any], rng: random.Random, records: tuple) -> str:
    if tool == "zotero_search":
        hits = rng.sample(records, k=rng.randint(2, 5))
        return json.dumps([h["data"] for h in hits], ensure_ascii=False)
    if tool == "zotero_get_item":
        return json.dumps(item, ensure_ascii=False)
    if tool == "read_pdf_page":
        return _page_text(item, rng.randint(1, 40), rng)
    key = item.get("key", "ITEM")
    notes = [
        {
            "key": f"A{rng.randrange(16**7):07X}",
            "annotationType": "highlight",
            "annotationText": _page_text(item, 1, rng)[:rng.randint(80, 300)],
            "annotationComment": rng.choice(["key claim", "method", "contradicts earlier", ""]),
            "annotationPageLabel": str(rng.randint(1, 40)),
            "parentItem": key,
        }
        for _ in range(rng.randint(1, 4))
    ]
    return json.dumps(notes, ensure_ascii=False)


def _args(tool: str, item: dict[str, Any], topic: str, rng: random.Random) -> dict[str, Any]:
    if tool == "zotero_search":
        return {"query": topic, "limit": 5}
    if tool == "read_pdf_page":
        return {"item_key": item.get("key"), "page": rng.randint(1, 40)}
    return {"item_key": item.get("key")}


def research_session(n_messages: int, seed: int = 6) -> list[Neutral]:
    """A research session of exactly `n_messages` messages (the last turn may be cut short).

    Turns hold 1-3 rounds of 1-4 parallel tool calls, so the assistant-to-message ratio is
    close to a real agent's. Raises ValueError for a length below 2.
    """
    if n_messages < 2:
        raise ValueError(f"n_messages must be at least 2, got {n_messages}")
    rng = random.Random(seed)
    records = _records()
    msgs: list[Neutral] = []
    turn = 0
    while len(msgs) < n_messages:
        topic = rng.choice(_TOPICS)
        item = rng.choice(records)
        msgs.append(neutral(len(msgs), "user", f"Turn {turn}: what does my library say about "
                            f"{topic}? Start from '{_title(item)}' ({item.get('key')})."))
        for _ in range(rng.randint(1, 3)):
            calls = []
            for _ in range(rng.randint(1, 4)):
                tool = rng.choice(_TOOLS)
                target = rng.choice(records)
                calls.append({"id": f"call_{turn}_{len(msgs)}_{len(calls)}", "name": tool,
                              "args": _args(tool, target, topic, rng), "_item": target})
            msgs.append(neutral(len(msgs), "assistant", f"Checking {len(calls)} sources.",
                                calls=[{k: v for k, v in c.items() if k != "_item"}
                                       for c in calls]))
            for c in calls:
                msgs.append(neutral(len(msgs), "tool", _result(c["name"], c["_item"], rng,
                                                                records),
                                    call_id=c["id"], tool_name=c["name"],
                                    is_error=rng.random() < 0.03))
        msgs.append(neutral(len(msgs), "assistant", f"On {topic}: '{_title(item)}' "
                            f"({item.get('key')}) is the most relevant; "
                            + " ".join(rng.choice(_TOPICS) for _ in range(rng.randint(10, 60)))))
        turn += 1
    return _cut(msgs[:n_messages])


def _cut(msgs: list[Neutral]) -> list[Neutral]:
    """Drop calls whose results fell past the cut, so the session ends in a stable state."""
    answered = {m["call_id"] for m in msgs if m["role"] == "tool"}
    for m in msgs:
        if m["calls"]:
            m["calls"] = [c for c in m["calls"] if c["id"] in answered]
    return msgs


def session_prefix(msgs: list[Neutral], n_messages: int) -> list[Neutral]:
    """`research_session(n_messages, seed)` from a longer session of the same seed (a longer
    session is a strict extension of a shorter one): generated once, sliced per size."""
    if n_messages > len(msgs):
        raise ValueError(f"the session has {len(msgs)} messages, fewer than {n_messages}")
    return _cut([{**m, "calls": list(m["calls"])} for m in msgs[:n_messages]])
