"""`bench/results/peers.json` -> `docs/peers.md` (tables) and `docs/peers.png` (plot).

`python -m bench.peers.report` re-renders both from the last results without re-running.
Everything stated here is computed from the results file, including which targets
contextfold meets and where a peer beats it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .common import REPO_ROOT

DOCS = REPO_ROOT / "docs"
MD = DOCS / "peers.md"
PNG = DOCS / "peers.png"
CF = "contextfold"
REFERENCE = "none (full history)"


def _ok_systems(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in results["systems"].items() if v.get("quality")}


def _order(systems: dict[str, Any]) -> list[str]:
    names = [n for n in systems if n not in (CF, REFERENCE)]
    return ([CF] if CF in systems else []) + sorted(names) + (
        [REFERENCE] if REFERENCE in systems else [])


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def totals(entry: dict[str, Any]) -> dict[str, float]:
    """Figures summed over every transcript of one system."""
    q = entry["quality"].values()
    calls = sum(r["calls"] for r in q) or 1
    msgs = sum(r["messages"] for r in q) or 1
    return {
        "calls": calls,
        "invalid": sum(r["invalid_requests"] for r in q),
        "invalid_share": sum(r["invalid_requests"] for r in q) / calls,
        "lost": sum(r["lost_messages"] for r in q),
        "lost_share": sum(r["lost_messages"] for r in q) / msgs,
        "peak": max(r["peak_request_tokens"] for r in q),
        "over": sum(r["requests_over_safe_limit"] for r in q),
        "summarizer_tokens": sum(r["summarizer_input_tokens"] for r in q),
        "summarizer_calls": sum(r["summarizer_calls"] for r in q),
    }


# --------------------------------------------------------------------------- targets


def targets(results: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """contextfold's targets from the issue: (target, met?, evidence). None = not measured."""
    systems = _ok_systems(results)
    cf = systems.get(CF)
    if cf is None:
        return [("contextfold measured", None, "contextfold did not run: see Errors")]
    t = totals(cf)
    repairs = sum(r.get("contextfold_repairs", 0) for r in cf["quality"].values())
    fallbacks = sum(r.get("contextfold_fallbacks", 0) for r in cf["quality"].values())
    out: list[tuple[str, bool | None, str]] = [
        ("0 invalid requests on every transcript", t["invalid"] == 0,
         f"{t['invalid']} of {t['calls']} requests; exporter repairs: {repairs}; "
         f"summariser fallbacks to extractive: {fallbacks}"),
        ("0% lost content on every transcript", t["lost"] == 0,
         f"{t['lost']} messages lost"),
        ("peak request <= safe limit", t["over"] == 0,
         f"peak {t['peak']:,} vs {results['settings']['safe_limit']:,} tokens"),
    ]
    growth = cf.get("growth", {})
    sizes = sorted(int(s) for s in growth)
    if len(sizes) >= 2:
        ratio = growth[str(sizes[-1])]
        out.append((f"check cost growth {sizes[-1]:,} vs {sizes[0]:,} messages <= 1.5",
                    ratio is not None and ratio <= 1.5, f"x{ratio:.2f}" if ratio else "n/a"))
    else:
        out.append(("check cost growth <= 1.5", None, "timing not run"))
    lossless = [n for n, e in systems.items()
                if n not in (CF, REFERENCE) and totals(e)["lost"] == 0
                and totals(e)["summarizer_calls"] > 0]
    if lossless:
        fewest = min(totals(systems[n])["summarizer_tokens"] for n in lossless)
        out.append(("fewer summariser input tokens than every lossless peer",
                    t["summarizer_tokens"] < fewest,
                    f"{t['summarizer_tokens']:,} vs {fewest:,} (best lossless peer: "
                    f"{', '.join(lossless)})"))
    return out


def losses(results: dict[str, Any]) -> list[str]:
    """Where some peer does better than contextfold, stated plainly."""
    systems = _ok_systems(results)
    if CF not in systems:
        return []
    cf = totals(systems[CF])
    out: list[str] = []
    peers = {n: e for n, e in systems.items() if n not in (CF, REFERENCE)}
    for name, entry in peers.items():
        t = totals(entry)
        if t["summarizer_tokens"] < cf["summarizer_tokens"] and t["summarizer_calls"]:
            out.append(f"{name} sends its summariser fewer tokens ({t['summarizer_tokens']:,} "
                       f"vs {cf['summarizer_tokens']:,}), at the price of "
                       f"{_pct(t['lost_share'])} lost content and {t['invalid']} invalid "
                       "requests.")
        if t["summarizer_calls"] and t["summarizer_calls"] < cf["summarizer_calls"]:
            out.append(f"{name} calls its summariser less often ({t['summarizer_calls']} vs "
                       f"{cf['summarizer_calls']}).")
    cf_timing = {t["size"]: t for t in systems[CF].get("timing", [])}
    for name, entry in peers.items():
        faster = [size for size, t in ((t["size"], t) for t in entry.get("timing", []))
                  if size in cf_timing and t["median_ms"] < cf_timing[size]["median_ms"]]
        if faster:
            sizes = ", ".join(f"{s:,}" for s in sorted(faster))
            out.append(f"{name} has a lower median check cost at {sizes} messages.")
    for wl, r in systems[CF]["quality"].items():
        for name, entry in peers.items():
            other = entry["quality"].get(wl)
            if other and other["peak_request_tokens"] < r["peak_request_tokens"] and \
                    other["invalid_requests"] == 0 and other["lost_messages"] == 0:
                out.append(f"On {wl}, {name} keeps a smaller peak request "
                           f"({other['peak_request_tokens']:,} vs "
                           f"{r['peak_request_tokens']:,} tokens) without losing content.")
    return out


# --------------------------------------------------------------------------- markdown


def markdown(results: dict[str, Any]) -> str:
    systems = _ok_systems(results)
    order = _order(systems)
    s = results["settings"]
    m = results["machine"]
    lines = [
        "# contextfold vs other frameworks' compaction",
        "",
        "Generated by `.venv/bin/python -m bench.peers.run` (do not edit by hand; "
        f"`python -m bench.peers.report` re-renders it from `bench/results/peers.json`). "
        f"Run of {results['generated']}, {results['wall_seconds']} s.",
        "",
        "Every system replays the same transcripts. At every model call of a transcript (every "
        "assistant message) it decides the request it would send, with the same trigger "
        f"({s['trigger_tokens']:,} tokens = 60% of a {s['context_window']:,}-token window, "
        "each by its own estimator) and the same recent tail "
        f"({s['tail_tokens']:,} tokens). Summarisers are replaced by one deterministic "
        "offline fake, so what is measured is each library's own logic: when it compacts, "
        "what it cuts, what it shows its summariser, how long its checks take. No network.",
        "",
        "## Targets for contextfold",
        "",
        "| target | met | evidence |",
        "| --- | --- | --- |",
    ]
    for target, met, evidence in targets(results):
        mark = "n/a" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {target} | {mark} | {evidence} |")
    lines += ["", "## All transcripts together", "",
              "| system | invalid requests | lost content | peak request (tokens) | "
              "requests over safe limit | summariser calls | summariser input (tokens) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in order:
        t = totals(systems[name])
        lines.append(
            f"| {name} | {t['invalid']} / {t['calls']} ({_pct(t['invalid_share'])}) | "
            f"{_pct(t['lost_share'])} | {t['peak']:,} | {t['over']} | "
            f"{t['summarizer_calls']} | {t['summarizer_tokens']:,} |")
    lines += ["", f"Safe limit: {s['safe_limit']:,} tokens (window minus a "
              f"{s['context_window'] - s['safe_limit']:,}-token output reserve). Sizes are "
              f"exact counts with {s['tokenizer']} of the request in chat-completions shape.",
              ""]
    lines += _per_transcript(results, systems, order)
    lines += _timing(systems, order)
    lines += _estimators(systems, order)
    found = losses(results)
    lines += ["## Where contextfold loses", ""]
    lines += [f"- {x}" for x in found] or ["- Nowhere in these figures."]
    lines += ["", *_method(results, systems, order, m)]
    errors = {n: e["errors"] for n, e in results["systems"].items() if e.get("errors")}
    if errors:
        lines += ["## Errors", ""]
        for name, errs in errors.items():
            tail = errs[-1].strip().splitlines()[-1] if errs[-1].strip() else "(no output)"
            lines.append(f"- {name}: `{tail}`")
        lines.append("")
    return "\n".join(lines)


def _per_transcript(results: dict[str, Any], systems: dict[str, Any],
                    order: list[str]) -> list[str]:
    lines = ["## Per transcript", ""]
    for w in results["workloads"]:
        name = w["name"]
        lines += [f"### {name}",
                  "",
                  f"`{w['source']}`: {w['messages']:,} messages, {w['calls']} model calls.",
                  "",
                  "| system | invalid | lost content | peak (tokens) | summariser calls | "
                  "summariser input | median / p99 check (ms) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for sys_name in order:
            r = systems[sys_name]["quality"].get(name)
            if r is None:
                continue
            c = r["check_seconds"]
            lines.append(
                f"| {sys_name} | {r['invalid_requests']} | {_pct(r['lost_share'])} | "
                f"{r['peak_request_tokens']:,} | {r['summarizer_calls']} | "
                f"{r['summarizer_input_tokens']:,} | {c['median_ms']:.2f} / "
                f"{c['p99_ms']:.2f} |")
        examples = [f"{n}: {systems[n]['quality'][name]['invalid_examples'][0]}"
                    for n in order if systems[n]["quality"].get(name, {}).get(
                        "invalid_examples")]
        if examples:
            lines += ["", "First invalid request of each system: "
                      + "; ".join(f"`{e}`" for e in examples) + "."]
        lines.append("")
    return lines


def _timing(systems: dict[str, Any], order: list[str]) -> list[str]:
    timed = [n for n in order if systems[n].get("timing") and n != REFERENCE]
    if not timed:
        return []
    sizes = sorted({t["size"] for n in timed for t in systems[n]["timing"]})
    lines = ["## Check cost as the session grows", "",
             "Time of one per-call decision (maybe compact, then build the request) on the "
             "synthetic research session, over its last calls; growth is the median at each "
             "size over the median at the smallest.", "",
             "| system | " + " | ".join(f"{s:,} msgs median / p99 (ms)" for s in sizes)
             + " | growth |",
             "| --- | " + " | ".join("---:" for _ in sizes) + " | ---: |"]
    for name in timed:
        by = {t["size"]: t for t in systems[name]["timing"]}
        cells = [f"{by[s]['median_ms']:.2f} / {by[s]['p99_ms']:.2f}" if s in by else "-"
                 for s in sizes]
        growth = systems[name].get("growth", {})
        ratio = growth.get(str(sizes[-1])) if growth else None
        mid = growth.get(str(sizes[1])) if growth and len(sizes) > 2 else None
        g = (f"x{mid:.1f} at {sizes[1]:,}, " if mid else "") + (f"x{ratio:.1f}" if ratio else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {g} |")
    return [*lines, ""]


def _estimators(systems: dict[str, Any], order: list[str]) -> list[str]:
    rows = [(n, wl, f) for n in order for wl, f in systems[n].get("estimator", {}).items()]
    if not rows:
        return []
    lines = ["## Estimators vs real token counts", "",
             "For each interval between two model calls of a real transcript, the system's "
             "own estimate of the messages added in between, against the recorded usage delta "
             "(the provider's tokenizer: Claude) and against exact o200k_base counts. An "
             "under-count is what lets a request overflow.", "",
             "| system | transcript | intervals | under-count vs usage | under-count vs "
             "o200k | median estimate / usage |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, wl, f in rows:
        lines.append(f"| {name} | {wl} | {f['intervals']} | "
                     f"{_pct(f['under_count_rate_vs_usage'])} | "
                     f"{_pct(f['under_count_rate_vs_o200k'])} | "
                     f"{f['median_estimate_over_usage']:.2f} |")
    return [*lines, "", "LangChain's `trim_messages` and LangMem use the same "
            "`count_tokens_approximately` as the summarisation middleware.", ""]


def _method(results: dict[str, Any], systems: dict[str, Any], order: list[str],
            m: dict[str, Any]) -> list[str]:
    lines = ["## How each system was configured", "",
             "| system | versions | configuration | estimator |", "| --- | --- | --- | --- |"]
    for name in order:
        e = systems[name]
        pkgs = ", ".join(f"{k} {v}" for k, v in e.get("packages", {}).items()) or "-"
        lines.append(f"| {name} | {pkgs} | {e.get('config', '')} | {e.get('estimator_name', '')} |")
    lines += [
        "",
        "## What each library does when it compacts (from its source, pinned versions)",
        "",
        "- **LangChain `SummarizationMiddleware`** cuts at a token-based cutoff that keeps an "
        "AI message with its tool results, but shows its summariser only the last "
        "`trim_tokens_to_summarize` (default 4,000) tokens of what it cuts, through "
        "`trim_messages(start_on='human')`; when no user message falls in those tokens it "
        "calls no summariser at all and writes \"Previous conversation was too long to "
        "summarize.\" Everything else it cuts is lost.",
        "- **LangChain `trim_messages`** never summarises. With `start_on='human'` it returns "
        "an empty list when the latest user message is older than the tail (a long tool loop).",
        "- **LangMem `summarize_messages`** summarises the oldest messages up to where its "
        "running count crosses `max_tokens_before_summary`; it pulls tool results into the "
        "summary only when the cut lands on the AI message that called them, so a cut inside "
        "a group of parallel results leaves results without their call. The summary is a "
        "system message, so a request can hold no user or assistant message at all. It trims "
        "the summariser's input to `max_tokens` (oldest first).",
        "- **Google ADK** token-threshold compaction re-estimates the prompt by rebuilding the "
        "request contents from every session event (characters / 4), before every model call, "
        "so its check grows with the session. The summary is materialised as a `model` "
        "(assistant) turn, so every request after a compaction opens with an assistant "
        "message. It repairs call/result pairing itself, and shows its summariser only the "
        "first 2,000 characters of each tool call and result.",
        "- **pydantic-ai-harness `SummarizingCompaction`** (the real package and class, "
        "`pydantic-ai-harness` on PyPI) keeps tool calls and returns paired and the first user "
        "message, updates its summary incrementally, and shows its summariser only the first "
        "500 characters of each tool return.",
        "- **contextfold** cuts only at user-turn boundaries, shows its summariser every "
        "newly old message (long tool results clipped head + tail to 1,000 characters, "
        "tool arguments to 800), "
        "chunked to the summariser's window. It counts tokens with the exact `o200k_base` "
        "tokenizer plugged in for this gpt-4o-class model (SPEC E5; without it, its "
        "conservative any-model estimate reads about 1.5x the real count on English and "
        "code, and it compacts about twice as often).",
        "",
        "## How it is measured",
        "",
        "- **Workloads.** The Pi and Claude Code transcripts of `tests/fixtures/` through "
        "contextfold's importers (active branch, recorded compactions left out so the whole "
        "conversation is replayed), plus a synthetic research session with parallel tool calls "
        "built from the Zotero records (`bench/peers/synth.py`). Void calls of aborted replies "
        "and orphan results are removed first, so the workload itself is valid (see the "
        "reference row).",
        "- **Markers.** Each message's text starts with `[[m<i>]]` and ends with `[[/m<i>]]`. "
        "A message has *left the context* when neither marker is in a request any more; it is "
        "*lost* when it left without either marker ever reaching a summariser.",
        "- **Fake summariser.** Each library's own summariser path runs (its prompt, its "
        "trimming) up to the model call; the model is an offline fake that answers with the "
        "ranges of messages it saw (`~m3-m40~`), so rolling summaries stay short.",
        "- **Invalid requests.** Each request is rendered in chat-completions shape one message "
        "for one, without repair, and checked by contextfold's independent oracle "
        "`contextfold.core.validity.openai_problems` (orphan tool result, call without result, "
        "first non-system message not from the user, empty history). contextfold's own "
        "exporter is its real request path; its repairs are counted in the results file.",
        "- **Check cost.** `time.perf_counter` around each per-call decision; the workload's "
        "own bookkeeping (converting the new messages) is not timed. Figures come from a shared "
        "2-core machine; other work on it adds noise, medians are the robust figure.",
        "",
        "## Machine and rerun",
        "",
        f"- {m['cpu']}, {m['cores']} cores, {m['memory']}; {m['os']}; Python {m['python']}.",
        "- Rerun: `.venv/bin/python -m bench.peers.run` from the repository root. It creates "
        "`bench/peers/.venv-peers` from `bench/peers/requirements-peers.txt` when missing "
        "(needs PyPI), runs each peer in that venv and contextfold in the project venv, and "
        "writes `bench/results/peers.json`, this page and `docs/peers.png`. "
        "`--systems`, `--sizes` and `--synth-messages` narrow a run.",
        "",
    ]
    return lines


# --------------------------------------------------------------------------- plot


def plot(results: dict[str, Any], path: Path = PNG) -> Path:
    """Check cost vs history length (lines), invalid requests and lost content (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = _ok_systems(results)
    order = _order(systems)
    fig = plt.figure(figsize=(13, 8.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.15, 1])
    ax = fig.add_subplot(grid[0, :])
    for name in order:
        timing = sorted(systems[name].get("timing", []), key=lambda t: t["size"])
        if timing and name != REFERENCE:
            ax.plot([t["size"] for t in timing], [t["median_ms"] for t in timing],
                    marker="o", linewidth=2.6 if name == CF else 1.5, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("history length (messages)")
    ax.set_ylabel("median per-call decision (ms)")
    ax.set_title("Check cost as the session grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    labels = [n for n in order if n != REFERENCE]
    tot = {n: totals(systems[n]) for n in labels}
    for col, key, title in ((0, "invalid_share", "Invalid requests (% of model calls)"),
                            (1, "lost_share", "Lost content (% of messages)")):
        bx = fig.add_subplot(grid[1, col])
        values = [100 * tot[n][key] for n in labels]
        bars = bx.barh(labels, values,
                       color=["tab:green" if n == CF else "tab:gray" for n in labels])
        bx.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
        bx.invert_yaxis()
        bx.set_title(title)
        bx.set_xlim(0, max([*values, 1.0]) * 1.2)
        bx.tick_params(axis="y", labelsize=8)
    fig.suptitle("contextfold vs peers on the same transcripts "
                 f"({results['generated'][:10]})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_docs(results: dict[str, Any]) -> list[Path]:
    """Write the page and the plot; return their paths."""
    MD.parent.mkdir(parents=True, exist_ok=True)
    MD.write_text(markdown(results), encoding="utf-8")
    return [MD, plot(results)]


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else REPO_ROOT / "bench" / "results" / "peers.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    for written in write_docs(results):
        print(f"wrote {written.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
