"""Grounded attribution (SPEC S7): a summary line marked as the user's must be the user's.

A summariser can invent an instruction and mark it `(user)`; after the compaction the agent
executes it as if the user had said it. So every bullet the summary attributes to the user
is traced to a user message of the folded span, the previous checkpoint's user lines or
the compaction's instructions; every `(tool)` bullet to a tool call or result (or the
previous checkpoint's tool lines). A line that cannot be traced is re-marked `(inferred)`
and reported.

Matching is fuzzy and language-neutral: text is NFKC-normalised and case-folded; words of
alphabetic scripts and digits are tokens, runs of CJK characters give character bigrams
(Japanese and Chinese have no spaces). A line is grounded when at least `THRESHOLD` of
its tokens occur in one single source (not in the union of all of them: common words from
many messages must not assemble an instruction nobody gave). Pure functions.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..core.values.held import TEXT_MEMO_BYTES, held_memo
from ..core.values.messages import Node
from ..core.values.tool_calls import call_text
from ..core.values.tree import message_nodes

THRESHOLD = 0.6  # share of a line's tokens one source must hold
_MIN_TOKENS = 2  # shorter lines ("(user) ok") say nothing to check
_LINE = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s*)?)\((user|tool)\)\s*(.*)$")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
# What the offline summariser writes around a user's words; not the words themselves.
_FRAMES = re.compile(
    r"^(?:Later request:|Finish:|Instructions for this summary:|Denied:|ran\b)\s*"
    r"|\s*\((?:×\d+|no final answer yet)\)$|\s*\[earlier [^\]]*\]$", re.IGNORECASE)
_STOP = frozenset((
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "at", "by", "from",
    "is", "are", "be", "was", "were", "it", "this", "that", "these", "those", "as", "into"))


@held_memo(TEXT_MEMO_BYTES)
def tokens(text: str) -> frozenset[str]:
    """The tokens `text` is compared by: NFKC, case-folded words and CJK bigrams."""
    out: set[str] = set()
    for tok in _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold()):
        if _IS_CJK.match(tok):
            out.update(tok[i:i + 2] for i in range(max(1, len(tok) - 1)))
        elif tok not in _STOP:
            out.add(tok)
    return frozenset(out)


def supported(line: str, sources: Sequence[frozenset[str]]) -> bool:
    """Whether one source holds at least `THRESHOLD` of `line`'s tokens."""
    want = tokens(line)
    if len(want) < _MIN_TOKENS:
        return True
    need = THRESHOLD * len(want)
    return any(len(want & src) >= need for src in sources)


@dataclass(frozen=True)
class Sources:
    """What a summary's attributions are traced to."""

    user: tuple[frozenset[str], ...]
    tool: tuple[frozenset[str], ...]


def _marked_lines(text: str | None, mark: str) -> Iterable[str]:
    for line in (text or "").splitlines():
        m = _LINE.match(line)
        if m and m.group(2) == mark:
            yield m.group(3)


def sources_of(nodes: Sequence[Node], previous_summary: str | None,
               instructions: str | None) -> Sources:
    """The user's and the tools' texts of the folded span and the previous checkpoint."""
    user: list[frozenset[str]] = []
    tool: list[frozenset[str]] = []
    for _, msg in message_nodes(nodes):
        if msg.role == "user" and msg.text.strip():
            user.append(tokens(msg.text))
        for call in msg.tool_calls:
            tool.append(tokens(f"{call_text(call)} {call.input}"))
        for result in msg.tool_results:
            tool.append(tokens(result.output or ""))
        for part in msg.parts:
            if part.type not in ("text", "reasoning", "tool_call", "tool_result"):
                tool.append(tokens(part.model_dump_json()))
    user += [tokens(line) for line in _marked_lines(previous_summary, "user")]
    tool += [tokens(line) for line in _marked_lines(previous_summary, "tool")]
    if instructions:
        user.append(tokens(instructions))
    return Sources(tuple(user), tuple(tool))


@dataclass(frozen=True)
class Ungrounded:
    """One line re-marked as inferred: what it claimed to be, and its text."""

    claimed: str  # "user" or "tool"
    text: str

    def to_json(self) -> dict[str, str]:
        return {"claimed": self.claimed, "text": self.text}


def ground_summary(text: str, sources: Sources) -> tuple[str, list[Ungrounded]]:
    """`text` with every `(user)` / `(tool)` bullet no source supports re-marked
    `(inferred)`, and the list of those lines."""
    out: list[str] = []
    found: list[Ungrounded] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            out.append(line)
            continue
        lead, mark, body = m.groups()
        core = _FRAMES.sub("", body).strip()
        pool = sources.user if mark == "user" else sources.tool
        if mark == "user" and core and not supported(core, pool):
            # A denial or a command the user ran is traced to the tool call it names.
            if not (body.startswith(("Denied:", "ran ")) and supported(core, sources.tool)):
                found.append(Ungrounded(mark, body))
                out.append(f"{lead}(inferred) {body}")
                continue
        elif mark == "tool" and core and not supported(core, pool):
            found.append(Ungrounded(mark, body))
            out.append(f"{lead}(inferred) {body}")
            continue
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), found
