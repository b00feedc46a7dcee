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

Who wrote it and what it looks like (`injected`, `split_typed`) are in `user_typed`; this
module reads statements from the typed prose, ranks them and clips them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.text.constraints import is_constraint, sentences
from .user_typed import (  # noqa: F401  (re-exported; moved out in issue 39)
    _ANSI,
    _CJK,
    _COMMAND_ARGS,
    _COMMAND_NAME,
    _FENCE,
    _INJECTED_BLOCK,
    _INJECTED_START,
    _INLINE_FENCE,
    _OUTPUT_LINE,
    _PATH_ONLY,
    _SLASH_ONLY,
    _WORD,
    Split,
    _indented,
    _letters_ratio,
    _prose,
    _unwrap,
    injected,
    output_like,
    split_typed,
)

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
