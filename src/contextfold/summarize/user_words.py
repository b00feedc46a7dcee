"""The user's own words (SPEC S8): what a person typed, told apart from what they pasted.

A user message carries more than the user's words. Agents put their own notices in the
user role (Claude Code's `<task-notification>`, `<local-command-stdout>`, `<system-reminder>`,
skill texts; Pi's records of a command the user ran), and people paste terminal output,
logs, stack traces, JSON and code into what they type. A checkpoint that lists those as
"what the user said" misleads the next model; one that drops a rule because it is phrased
without the words a detector knows breaks the user's trust. So the decision is made by
structure, not by cue words:

* **who wrote it** — a message an agent injected in the user role is no statement at all
  (`injected`); wrappers an agent adds inside a typed message are cut out;
* **what it looks like** — fenced or indented blocks, and paragraphs whose lines read as
  output (prompts, stack frames, log lines, diffs, JSON, code, box drawing, long unbroken
  tokens) are pasted material (`split_typed`); the rest is typed prose;
* **whether it says anything** — an acknowledgement ("ok", "continue", "はい", "好的") sets
  nothing; every other typed text is a statement, in any language and phrasing.

Cue words survive only as a ranking aid (`directive_score`): when the user's share of the
checkpoint is full (S9), the statements that read most like instructions to the agent and
the newest ones are kept first. A rule no pattern knows is still a statement, still carried
while there is room, and named by its node when there is none. Pure text functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..core.constraints import is_constraint, sentences

# --------------------------------------------------------------------------- injected

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


@lru_cache(maxsize=1 << 15)
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


# --------------------------------------------------------------------------- statements

# A reply that sets nothing: acknowledgement, go-ahead, filler (compared whole, after
# punctuation and case are dropped). Only these are left out; everything else typed is a
# statement.
_ACKS = frozenset(line.strip() for line in """
ok
okay
k
yes
yeah
yep
yup
sure
continue
go
go on
go ahead
proceed
do it
next
thanks
thank you
ty
thx
nice
great
cool
perfect
good
fine
lgtm
done
wtf
w t f
hmm
hm
right
alright
correct
exactly
agreed
no
nope
wait
keep going
carry on
please continue
sounds good
はい
うん
ええ
了解
了解です
続けて
続けてください
お願いします
ありがとう
いいね
好的
好
是的
对
继续
谢谢
可以
行
嗯
没问题
""".splitlines() if line.strip())
_ACK_STRIP = re.compile(r"[\s.,!?。！？、，~…:;]+")


def trivial(typed: str) -> bool:
    """Whether typed text sets nothing: empty, an acknowledgement, or no word at all."""
    folded = _ACK_STRIP.sub(" ", typed.casefold()).strip()
    if not folded or folded in _ACKS:
        return True
    return not (_WORD.search(typed) or _CJK.search(typed) or re.search(r"\w{3,}", typed))


@dataclass(frozen=True)
class Statement:
    """One user message's typed words, as the checkpoint carries them (S8).

    text     the typed prose, whitespace collapsed to single spaces within a paragraph
             and " / " between paragraphs (a checkpoint item is one line)
    node_id  the message's node (named when the statement is clipped or not carried)
    index    the message's position among the statements of the span, oldest first
    score    the ranking aid: higher is kept longer when the user's share is full
    """

    text: str
    node_id: str | None
    index: int
    score: float


# Ranking aid, never a gate: sentences that read as an instruction to the agent.
_DIRECTIVE = re.compile(
    r"\b(?:you|your|we|let'?s|i want|i'd like|i would like|i prefer|i need|prefer|"
    r"instead|rather|only|just|without|unless|except|every|each|any|all|no|not|n't|"
    r"stop|keep|use|skip|avoid|leave|put|write|make|give|show|send|run|add|remove|"
    r"check|ask|tell|say|answer|reply|respond|format|stick|limit|cap|mention|cite|"
    r"from now on|going forward|whenever|before|after|first|later|default|by default)\b"
    r"|ください|ないで|なさい|こと[。！]?$|ように|ほしい|たい|ましょう|ないように|だけ|のみ|必ず|常に|"
    r"禁止|請|请|不要|别|別|要|用|只|每次|以后|以後|一律|务必|務必|尽量|必须|必須|不准|禁止",
    re.IGNORECASE,
)
_REQUEST_QUESTION = re.compile(
    r"^\s*(?:can|could|would|will|won't|wouldn't)\s+(?:you|we)\b|^\s*(?:why not|how about)\b"
    r"|てくれ|てもらえ|ていただけ|能不能|可以.*吗|可不可以",
    re.IGNORECASE,
)


def directive_score(typed: str) -> float:
    """How much `typed` reads as an instruction to the agent (0 to 3): a ranking aid for
    when the user's share is full, never a reason to leave a statement out."""
    score = 0.0
    said = sentences(typed) or [typed]
    for sentence in said:
        question = sentence.rstrip().endswith(("?", "？"))
        if question and not _REQUEST_QUESTION.search(sentence):
            continue
        if is_constraint(sentence):
            score = max(score, 3.0)
        elif _DIRECTIVE.search(sentence):
            score = max(score, 2.0)
        else:
            score = max(score, 1.0)
    return score


def one_line_statement(typed: str) -> str:
    """A statement as one checkpoint line: paragraphs joined by " / "."""
    return " / ".join(p for p in (" ".join(x.split()) for x in typed.split("\n")) if p)


def statement_of(text: str) -> str | None:
    """The statement a user message makes (its typed words on one line), or None when
    the agent injected it, it is all pasted material, or it sets nothing."""
    if injected(text):
        return None
    typed = split_typed(text).typed
    if trivial(typed):
        return None
    return one_line_statement(typed)


def collect_statements(messages: Sequence[tuple[str | None, str]]) -> list[Statement]:
    """The statements of `(node id, user message text)` pairs, oldest first, scored.

    The score: the directive aid (0–3) plus recency (0–1), so among statements alike the
    newest is kept first."""
    found = [(node_id, s) for node_id, text in messages
             if (s := statement_of(text)) is not None]
    n = max(1, len(found))
    return [Statement(s, node_id, i, directive_score(s) + (i + 1) / n)
            for i, (node_id, s) in enumerate(found)]


_PASTED_ERROR = re.compile(
    r"\b\w*(?:Error|Exception)\b|\bERR!|\berror\b|\bfatal\b|\bpanic\b|\bfailed\b|"
    r"\bdenied\b|\bnot found\b|\bno such file\b|エラー|失敗|错误|失败", re.IGNORECASE)


def pasted_errors(text: str, limit: int = 200) -> list[str]:
    """The error each block the user pasted names (what it is: an error the user saw), for
    Critical Context — never attributed to the user as a statement. A Python traceback
    names its error last; other output names it first."""
    out = []
    for block in split_typed(text).pasted:
        lines = [line.strip() for line in block.splitlines()
                 if line.strip() and not _FENCE.match(line)]
        named = [line for line in lines if _PASTED_ERROR.search(line)]
        if not named:
            continue
        line = named[-1] if any(line.startswith("Traceback") for line in lines) else named[0]
        out.append(line if len(line) <= limit else line[: limit - 1] + "…")
    return out


# The mark a statement clipped for size carries, with where its whole text is.
CLIP_MARK = " … [clipped; the whole message is at node {node}] … "
_CLIP_MARK = re.compile(r" … \[clipped; the whole message is at node ([^\]\s]+)\] … ")


def _telling(sentence: str) -> float:
    """How much a clip wants a sentence from the middle of a long statement: 3 for one that
    reads as a rule, a decision, a next step or a correction, 2 for one that reads as an
    instruction to the agent, less otherwise (the ranking aid, never a gate)."""
    from .user_statements import is_correction, is_decision, is_next_step

    if (is_constraint(sentence) or is_decision(sentence) or is_next_step(sentence)
            or is_correction(sentence)):
        return 3.0
    return directive_score(sentence)


_PARAGRAPH = " / "  # how `one_line_statement` joins a message's paragraphs
_SHORT_PARAGRAPH = 320


def _units(middle: str) -> list[tuple[str, float]]:
    """The pieces of a statement's middle a clip may keep, each with how much it wants
    them: a short whole paragraph (not cut by the head or tail) as one piece, else its
    sentences."""
    paragraphs = middle.split(_PARAGRAPH)
    out: list[tuple[str, float]] = []
    for n, para in enumerate(paragraphs):
        whole = 0 < n < len(paragraphs) - 1  # the first and last are cut by head or tail
        if whole and len(para) <= _SHORT_PARAGRAPH and len(paragraphs) > 2:
            out.append((para, max(2.5, _telling(para))))
            continue
        out += [(sentence, _telling(sentence)) for sentence in sentences(para)]
    return out


def clip_statement(text: str, limit: int, node_id: str | None) -> str:
    """`text` within about `limit` characters: its head and its tail kept verbatim (a rule
    stated last survives as well as one stated first), and from the middle the sentences
    that read as a rule, decision or next step, as room allows; the cut marked with the
    node that holds the whole message (SPEC S8). Cut at word boundaries; short texts are
    returned unchanged."""
    if len(text) <= limit:
        return text
    mark = CLIP_MARK.format(node=node_id or "unknown")
    room = max(2, limit - len(mark))
    ends = max(2, room // 2)
    head_chars, tail_chars = (ends * 3) // 5, ends - (ends * 3) // 5
    spare = room - ends
    lo, hi = head_chars, len(text) - tail_chars
    # The middle's most telling pieces first (shown in their order): a sentence that reads
    # as a rule, a short paragraph standing on its own (an aside addressed to the agent,
    # by its place in the message), a sentence that reads as an instruction.
    inside = _units(text[lo:hi])
    ranked = sorted(range(len(inside)), key=lambda i: (-inside[i][1], i))
    chosen: set[int] = set()
    for i in ranked:
        if inside[i][1] < 2:
            break
        if len(inside[i][0]) + 5 <= spare:
            chosen.add(i)
            spare -= len(inside[i][0]) + 5
    middle = [inside[i][0] for i in sorted(chosen)]
    # What the middle does not use goes to the head and the tail.
    head_chars += (spare * 3) // 5
    tail_chars += spare - (spare * 3) // 5
    head = text[:head_chars]
    if " " in head[head_chars // 2:]:
        head = head[:head.rfind(" ")]
    tail = text[len(text) - tail_chars:]
    if " " in tail[:tail_chars // 2]:
        tail = tail[tail.find(" ") + 1:]
    inner = "".join(f"{m} … " for m in middle)
    return head.rstrip() + mark + inner + tail.lstrip()


def clipped_node(item: str) -> str | None:
    """The node id a clipped statement names, or None when it is whole."""
    m = _CLIP_MARK.search(item)
    return m.group(1) if m else None
