"""The fake model's summariser mode.

A summarisation request is recognised the way SPEC S1 defines it: the system prompt (or,
for clients that put it there, the first message) casts the model as a "context
summarisation assistant". The answer is a checkpoint in the profile the request asks for
(research or coding, SPEC S2), with every section in order. In "echo" style it quotes
identifiers and the latest request text it was given, so tests can check that what was sent
is what came back.
"""

from __future__ import annotations

import re
from typing import Any

from .script import SummaryStyle
from .tokens import _content_text

SUMMARISER_ROLE = "context summarisation assistant"

RESEARCH_SECTIONS = (
    "Research Goal",
    "User Requirements and Constraints",
    "Research Progress",
    "Findings and Evidence",
    "Key Zotero Resources",
    "Decisions",
    "Next Steps",
    "Critical Context",
)
CODING_SECTIONS = (
    "Goal",
    "Constraints & Preferences",
    "Progress",
    "Key Decisions",
    "Next Steps",
    "Critical Context",
)

_IDENTIFIERS = re.compile(
    r"10\.\d{4,9}/[^\s\"'<>]+"  # DOI
    r"|\b[A-Z0-9]{8}\b"  # Zotero item / attachment / annotation key
    r"|(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w+"  # file path
)


def request_text(body: dict[str, Any]) -> str:
    """All text of a request: system prompt and every message."""
    parts = [_content_text(body.get("system"))]
    parts += [_content_text(m.get("content")) for m in body.get("messages") or []]
    return "\n".join(p for p in parts if p)


def is_summary_request(body: dict[str, Any]) -> bool:
    """True when the request asks for a checkpoint summary (SPEC S1)."""
    head = _content_text(body.get("system"))
    messages = body.get("messages") or []
    if messages:
        head += "\n" + _content_text(messages[0].get("content"))
    return SUMMARISER_ROLE in head.lower()


def requested_sections(text: str) -> tuple[str, ...]:
    """The profile the request asks for: research unless it names the coding sections."""
    if "Research Goal" in text:
        return RESEARCH_SECTIONS
    if "Constraints & Preferences" in text:
        return CODING_SECTIONS
    return RESEARCH_SECTIONS


def make_summary(body: dict[str, Any], style: SummaryStyle) -> str:
    """A well-formed checkpoint for this request."""
    text = request_text(body)
    sections = requested_sections(text)
    if style == "canned":
        quoted: list[str] = []
        identifiers: list[str] = []
    else:
        identifiers = list(dict.fromkeys(_IDENTIFIERS.findall(text)))[:40]
        last = _content_text((body.get("messages") or [{}])[-1].get("content"))
        quoted = [line.strip() for line in last.splitlines() if line.strip()][-3:]
    lines: list[str] = []
    for name in sections:
        lines.append(f"## {name}")
        if name in ("Research Progress", "Progress"):
            lines += ["### Done", "- (user) The work so far was reviewed.",
                      "### In Progress", "- (inferred) Continuing the current task.",
                      "### Blocked", "- (none)"]
        elif name == "Critical Context":
            lines += [f"- (tool) {q[:200]}" for q in quoted] or ["- (none)"]
        elif name in ("Key Zotero Resources", "Findings and Evidence") and identifiers:
            lines += [f"- (tool) {ident}" for ident in identifiers]
        else:
            lines.append("- (user) As stated in the conversation.")
        lines.append("")
    return "\n".join(lines).strip()
