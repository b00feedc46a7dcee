"""What of a user message the user typed (SPEC S8): a message an agent injected in the user
role (`injected`) and the wrappers it adds inside a typed one are told apart, and typed prose is
split from pasted output, logs, stack traces, JSON and code (`split_typed`). Pure text functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.values.held import TEXT_MEMO_BYTES, held_memo

# A whole message an agent wrote in the user role: never the user's statement.
_INJECTED_START = re.compile(
    r"^\s*(?:<(?:task-notification|local-command-stdout|local-command-stderr|"
    r"local-command-caveat|system-reminder|bash-stdout|bash-stderr|bash-input|"
    r"user-prompt-submit-hook|command-message)\b"
    r"|Caveat: The messages below were generated"
    r"|Base directory for this skill:"
    r"|This session is being continued from a previous conversation"
    r"|\[Request interrupted by user"
    r"|Ran `[^`\n]*`\n(?:```|\(no output\)))",
    re.IGNORECASE,
)
# Wrappers an agent puts around or inside what the user typed: removed with their content.
_INJECTED_BLOCK = re.compile(
    r"<(system-reminder|local-command-caveat|local-command-stdout|local-command-stderr|"
    r"task-notification|bash-stdout|bash-stderr|command-message|command-name|"
    r"user-prompt-submit-hook)\b[^>]*>.*?(?:</\1\s*>|$)",
    re.IGNORECASE | re.DOTALL,
)
# A slash command as Claude Code records it: only its arguments were typed by the user.
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.IGNORECASE | re.DOTALL)
_COMMAND_NAME = re.compile(r"<command-name>\s*(/?[\w:-]+)", re.IGNORECASE)
_SLASH_ONLY = re.compile(r"^\s*/[\w:-]*\s*$")


def injected(text: str) -> bool:
    """Whether a user-role message was written by the agent, not typed by the user."""
    return bool(_INJECTED_START.match(text)) or bool(_SLASH_ONLY.match(text))


def _unwrap(text: str) -> str:
    """What the user typed of a message: agent wrappers cut out, a slash command reduced
    to the arguments the user gave it."""
    if _COMMAND_NAME.search(text):
        args = _COMMAND_ARGS.search(text)
        return args.group(1).strip() if args else ""
    return _INJECTED_BLOCK.sub("\n", text)


# --------------------------------------------------------------------------- typed / pasted

_FENCE = re.compile(r"^\s*(```|~~~)")
# A fenced block that opens after text on the same line ("port this: ```python …```").
_INLINE_FENCE = re.compile(r"(?<=\S)[ \t]*```.*?(?:```|\Z)", re.DOTALL)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\[\d{1,2}m")
# Each is a line a person reads rather than writes: output, traces, logs, diffs, code.
_OUTPUT_LINE = re.compile(
    r"^\s*(?:[$%#❯➜›»]\s|PS [A-Z]:\\|>>>\s|\.\.\.\s|>\s|\|)"  # prompts, quotes, tables
    r"|^\s*at\s+\S.*(?:\(|:\d+)"  # JS/Java stack frames
    r'|^\s*File "[^"]+", line \d+|^\s*Traceback \(most recent call last\)'
    r"|^\s*[\w.]*(?:Error|Exception|Warning)(?:\[\w+\])?:\s"  # TypeError: …, Error: …
    r"|^\s*(?:error|warning|note|hint)(?:\[\w+\])?:\s|\berror TS\d+:"
    r"|^\s*(?:npm|yarn|pnpm)\s+(?:ERR|WARN|error)"
    r"|^\s*\[?(?:INFO|DEBUG|WARN|WARNING|ERROR|TRACE|FATAL)\]?[\s:]"
    r"|^\s*\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|^\s*\d{2}:\d{2}:\d{2}[.,\s]"
    r"|^\s*(?:\+\+\+|---|@@|diff --git|index [0-9a-f]{7,})\s"
    r"|^\s*[+-]\s*\d+\s+[-+]?\s"  # a diff view's numbered lines ("+314 - Tips …")
    r"|^\s*(?:import|from|def|class|function|const|let|var|return|public|private|"
    r"#include|package|fn|impl|struct|export|async)\s+\S.*[({:=;]\s*$"
    r"|[;{}]\s*$|^\s*[}\])]+[;,]?\s*$|=>\s*\{?\s*$"
    r'|^\s*["\'][\w\-. ]+["\']\s*:\s'  # JSON / YAML members
    r"|[\u2500-\u257f\u2580-\u259f\u2800-\u28ff]"  # box drawing, blocks, braille spinners
    r"|^\s*\[[\w.:-]+\]\s+[A-Z]"  # a tagged log line ("[theme] Detected …")
    r"|\S {3,}\S|\S {3,}$",  # columns, or a line padded to a terminal's width
)
# A line that is only a path (a file dragged into the terminal, a screenshot's location).
_PATH_ONLY = re.compile(
    r"""^\s*['"]?(?:~|\.{1,2}|[A-Za-z]:)?[\\/][^\s'"]*(?:\s[^\s'"/]+)*['"]?\s*$""")
_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def _letters_ratio(line: str) -> float:
    visible = [c for c in line if not c.isspace()]
    if not visible:
        return 1.0
    return sum(c.isalpha() for c in visible) / len(visible)


def output_like(line: str) -> bool:
    """Whether one line reads as pasted output, a log, a trace or code rather than prose."""
    stripped = line.strip()
    if not stripped:
        return False
    if _ANSI.search(line) or _OUTPUT_LINE.search(line) or _PATH_ONLY.match(line):
        return True
    if _CJK.search(stripped):
        return False  # CJK prose: few spaces and many symbols are normal
    # A long unbroken token (minified code, base64, a hash dump).
    if len(stripped) > 120 and stripped.count(" ") < len(stripped) / 40:
        return True
    # Mostly symbols and digits: a value table, a hex dump, a command line.
    return len(stripped) > 12 and _letters_ratio(stripped) < 0.45


def _prose(line: str) -> bool:
    """A line that reads as a sentence: three words or more, mostly letters (or CJK)."""
    if _CJK.search(line):
        return True
    return len(_WORD.findall(line)) >= 3 and _letters_ratio(line) >= 0.6


def _indented(line: str) -> bool:
    return line.startswith(("    ", "\t"))


@dataclass(frozen=True)
class Split:
    """A user message split by structure: what was typed and what was pasted."""

    typed: str  # the typed prose, paragraphs joined by newlines
    pasted: tuple[str, ...]  # each pasted block, verbatim


@held_memo(TEXT_MEMO_BYTES)
def split_typed(text: str) -> Split:
    """`text` (a user message) split into the prose the user typed and the blocks pasted.

    Fenced blocks are pasted; an indented block after a blank line is pasted; a paragraph
    is pasted when most of its lines read as output, else each output line in it is.
    Agent wrappers are removed first (`_unwrap`). Cached: the summary and the retention
    check read the same messages.
    """
    text = _unwrap(text)
    pasted: list[str] = []

    def inline(m: re.Match[str]) -> str:  # a block opened inside a sentence
        pasted.append(m.group(0))
        return " [code] "

    text = _INLINE_FENCE.sub(inline, text)
    paragraphs: list[list[str]] = [[]]
    fence: list[str] | None = None
    for line in text.splitlines():
        if fence is not None:
            fence.append(line)
            if _FENCE.match(line):
                pasted.append("\n".join(fence))
                fence = None
            continue
        if _FENCE.match(line):
            fence = [line]
            paragraphs.append([])
            continue
        if not line.strip():
            paragraphs.append([])
            continue
        paragraphs[-1].append(line)
    if fence is not None:  # an unclosed fence runs to the end
        pasted.append("\n".join(fence))
    typed: list[str] = []
    for para in paragraphs:
        if not para:
            continue
        flags = [output_like(line) for line in para]
        indented = all(_indented(line) for line in para) and len(para) > 1
        # A paragraph with a third of its lines output is a paste (its other lines are
        # wrapped output, a screen's labels); two lines need one of each to be mixed.
        share = 3 if len(para) > 2 else 2
        repeated = len({line.strip() for line in para}) < len(para)  # a log repeats itself
        if indented or repeated or (len(para) > 1 and sum(flags) * share > len(para)):
            # A lead-in typed right above the paste ("and this one from the script:") is
            # the user's: the prose lines before the first output line stay typed.
            lead = 0
            while lead < len(para) - 1 and not flags[lead] and _prose(para[lead]) \
                    and not indented:
                lead += 1
            if lead:
                typed.append(" ".join(" ".join(line.split()) for line in para[:lead]))
            pasted.append("\n".join(para[lead:]))
            continue
        if any(flags):  # mixed: only lines that read as sentences stay typed
            flags = [flag or not _prose(line) for line, flag in zip(para, flags, strict=True)]
        kept = [line for line, flag in zip(para, flags, strict=True) if not flag]
        gone = [line for line, flag in zip(para, flags, strict=True) if flag]
        if gone:
            pasted.append("\n".join(gone))
        if kept:
            typed.append(" ".join(" ".join(line.split()) for line in kept))
    return Split("\n".join(typed).strip(), tuple(pasted))
