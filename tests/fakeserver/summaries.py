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

from contextfold.summarize.prompts import (
    CODING_SECTIONS,
    CRITICAL,
    PREFIX_TASK_MARK,
    PROGRESS_SECTION,
    PROGRESS_SUBSECTIONS,
    RESEARCH_SECTIONS,
)

from .script import SummaryStyle
from .tokens import _content_text

# The section names are the library's own (one list, so the fake cannot drift from the
# prompts); only how the fake *recognises* a summary request is written here, from SPEC S1.
SUMMARISER_ROLE = "context summarisation assistant"

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
        # SPEC Q3: a summarising request after the session's own prefix says so at its end.
        if PREFIX_TASK_MARK in _content_text(messages[-1].get("content")):
            return True
    return SUMMARISER_ROLE in head.lower()


_HEADING = re.compile(r"^##\s+(.+?)\s*$", re.M)
_SUBHEADING = re.compile(r"^###\s+(.+?)\s*$", re.M)


def requested_sections(text: str) -> tuple[str, ...]:
    """The sections the request asks for, as a model that follows instructions reads them.

    The headings of the format the prompt gives (after its last "Format:" line, or anywhere
    if it has none); without any, the profile the request names (research by default).
    """
    at = text.rfind("\nFormat:")
    skeleton = text[at:] if at >= 0 else text
    named = list(dict.fromkeys(m.strip() for m in _HEADING.findall(skeleton)))
    if named:
        return tuple(named)
    # A section name that only one profile has ("Goal" alone would also match "Research Goal").
    if RESEARCH_SECTIONS[0] in text:
        return RESEARCH_SECTIONS
    if CODING_SECTIONS[1] in text:
        return CODING_SECTIONS
    return RESEARCH_SECTIONS


def _subsections(text: str) -> tuple[str, ...]:
    at = text.rfind("\nFormat:")
    found = tuple(dict.fromkeys(_SUBHEADING.findall(text[at:] if at >= 0 else "")))
    return found or PROGRESS_SUBSECTIONS


def _render(sections: tuple[str, ...], subs: tuple[str, ...], quoted: list[str],
            identifiers: list[str]) -> str:
    lines: list[str] = []
    for name in sections:
        lines.append(f"## {name}")
        if name in PROGRESS_SECTION.values():
            for sub in subs:
                lines += [f"### {sub}", f"- (inferred) {sub.lower()}: as the conversation shows."]
        elif name == CRITICAL:
            lines += [f"- (tool) {q}" for q in quoted] or ["- (none)"]
        elif name in ("Key Zotero Resources", "Findings and Evidence", "Files Read") and (
                identifiers):
            lines += [f"- (tool) {ident}" for ident in identifiers]
        else:
            lines.append("- (user) As stated in the conversation.")
        lines.append("")
    return "\n".join(lines).strip()


def make_summary(body: dict[str, Any], style: SummaryStyle) -> str:
    """A well-formed checkpoint for this request, kept within the size it asks for.

    Like a careful model, it stays under `max_tokens` even by a pessimistic count (two
    characters per token): quotes and identifiers are dropped until it does.
    """
    text = request_text(body)
    sections, subs = requested_sections(text), _subsections(text)
    quoted: list[str] = []
    identifiers: list[str] = []
    if style == "echo":
        identifiers = list(dict.fromkeys(_IDENTIFIERS.findall(text)))[:20]
        last = _content_text((body.get("messages") or [{}])[-1].get("content"))
        body_text = last.split("</conversation>")[0]
        quoted = [line.strip()[:120] for line in body_text.splitlines() if line.strip()][-3:]
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    summary = _render(sections, subs, quoted, identifiers)
    while max_tokens and len(summary) > 1.6 * max_tokens and (quoted or identifiers):
        if identifiers:
            identifiers.pop()
        else:
            quoted.pop(0)
        summary = _render(sections, subs, quoted, identifiers)
    return summary
