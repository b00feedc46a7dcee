"""The "framework vs framework + contextfold" section of docs/peers.md (stdlib only).

Each framework's built-in context handling next to the same framework with contextfold's
integration, on the same workloads, in the units of the page's other tables. A framework's
rows: `PAIRS[<its + contextfold row>] = (<its built-in rows>)`; rows not in the results are
left out, so the section shows what was run.
"""

from __future__ import annotations

from typing import Any

from .figures import pct, totals

# framework label -> (the framework + contextfold row, the built-in rows it is read against)
PAIRS: dict[str, tuple[str, tuple[str, ...]]] = {
    "LangChain v1": ("langchain + contextfold", (
        "langchain-summarization", "langchain-summarization (trim_tokens_to_summarize=None)",
        "langchain-trim_messages", "langchain-context-editing (clear_tool_uses)")),
}


def framework_section(systems: dict[str, Any]) -> list[str]:
    """Markdown lines of the section (none when no framework + contextfold row ran)."""
    pairs = [(label, ours, [b for b in builtins if b in systems])
             for label, (ours, builtins) in PAIRS.items() if ours in systems]
    if not pairs:
        return []
    lines = ["## Frameworks with contextfold", "",
             "Each framework's own context handling, then the same framework with "
             "contextfold's integration (docs/integrations.md), on the same transcripts and "
             "model calls. *Invalid*: requests rejected under tool pairing / OpenAI / "
             "Anthropic rules; *lost*: messages that left the context unseen by any summariser.",
             "",
             "| framework | system | invalid (pairing / OpenAI / Anthropic) | lost | shown | "
             "peak request | over safe limit | compactions | price, Anthropic / OpenAI cache "
             "rules |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for label, ours, builtins in pairs:
        for name in [*builtins, ours]:
            t = totals(systems[name])
            shown = pct(t["shown_share"]) if t["evicted_chars"] else "-"
            bold = "**" if name == ours else ""
            lines.append(
                f"| {label} | {bold}{name}{bold} | {t['invalid_tool_pairing']} / "
                f"{t['invalid_openai']} / {t['invalid_anthropic']} | {pct(t['lost_share'])} | "
                f"{shown} | {t['peak']:,} | {t['over']} | {t['compactions']} | "
                f"${t['usd_anthropic']:.2f} / ${t['usd_openai']:.2f} |")
    return [*lines, ""]
