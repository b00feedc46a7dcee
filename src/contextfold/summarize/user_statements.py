"""What the user decided and asked next, read from their prose (any of EN, JA, ZH).

A user states a decision in passing ("we decided to use method X because Y", "let's go with
B", "方法Xを使うことに決めました", "我们决定用方法X") and sets the next step the same way
("next step: compare A against B", "次は A と B を比較します", "下一步：比较 A 和 B").
Those sentences are the ones a resumed agent can least afford to lose, and they are the
user's words: the offline summary lists them verbatim, marked `(user)`, and the retention
check (S6) requires them in every checkpoint. A correction ("actually, use Y", "no, use
Y", "いや、Yにします", "不对，用Y") replaces the decision it corrects.

Also here: the noise a careful note-taker leaves out (politeness, filler, formatting
demonstrations) and clipping that never cuts an identifier. Pure text functions.
"""

from __future__ import annotations

import re

from ..core.text.constraints import constraint_sentences, sentences
from ..core.values.held import TEXT_MEMO_BYTES, held_memo

_DECIDED = re.compile(
    r"\b(?:we|i|the team)\s+(?:have\s+|'ve\s+|finally\s+)?(?:decided|agreed|settled on|chose)\b"
    r"|\b(?:we've|i've)\s+(?:decided|agreed|settled on|chosen)\b"
    r"|\blet'?s go with\b|\b(?:we|i)(?:'ll| will| are going to|'re going to) go with\b"
    r"|\b(?:we're|we are) going with\b|^\s*decision\s*[:：]|\bthe decision is\b"
    r"|\bwe(?:'ll| will) use\b.*\bbecause\b"
    r"|決めました|決定しました|決定です|ことにしました|ことにします|で行きます|でいきます|採用します"
    r"|我们决定|我決定|我决定|决定用|决定使用|决定采用|就用|定下来",
    re.IGNORECASE,
)
_NEXT = re.compile(
    r"\bnext steps?\b|^\s*(?:then|after that|afterwards|finally)\b[,:]?\s+\w|\btodo\b|\bto-do\b"
    r"|\bthe plan is\b|\b(?:we|i) still need to\b"
    r"|次は|次に|その後|それから|TODO"
    r"|下一步|接下来|然后|之后再|待办",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"^\s*(?:actually|correction|scratch that|wait|sorry,? i meant|i meant)\b"
    r"|^\s*no[,.!]?\s+(?:use|go with|let's|we|i|make|do|not)\b"
    r"|^\s*(?:instead|rather)[,:]\s"
    r"|^\s*(?:いや|やっぱり|訂正|ではなく|じゃなくて)"
    r"|^\s*(?:不对|不是|更正|改成|改为|改用)",
    re.IGNORECASE,
)
# The words a correction opens with, anywhere in a message: a cheap first test.
_CORRECTION_ANYWHERE = re.compile(
    r"\b(?:actually|correction|scratch that|wait|i meant|no|instead|rather)\b"
    r"|いや|やっぱり|訂正|ではなく|じゃなくて|不对|不是|更正|改成|改为|改用",
    re.IGNORECASE,
)
# A sentence is a question when it ends with one: a question is not a decision.
_QUESTION = ("?", "？")

# Politeness and filler: never progress, never a finding.
_FILLER = re.compile(
    r"^\s*(?:sorry|apologies|my apologies|i apologi[sz]e|thanks?|thank you|you're welcome|"
    r"great|perfect|sure|certainly|of course|absolutely|no problem|happy to help|"
    r"glad to help|hope this helps|let me know|feel free|good question|okay|ok|got it|"
    r"understood|noted|done)\b[^.!?]{0,60}[.!?]*\s*$"
    r"|^\s*(?:すみません|申し訳|ありがとう|了解|承知)"
    r"|^\s*(?:抱歉|对不起|谢谢|好的|明白)",
    re.IGNORECASE,
)
_STRIKE = re.compile(r"~~.*?~~", re.DOTALL)
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?>")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(\S(?:.*?\S)?)\1")


def _statement(sentence: str) -> bool:
    return not sentence.rstrip().endswith(_QUESTION)


def is_decision(sentence: str) -> bool:
    """Whether the user states a decision in `sentence` (not a question about one)."""
    return _statement(sentence) and bool(_DECIDED.search(sentence))


def is_next_step(sentence: str) -> bool:
    """Whether the user sets a next step in `sentence` ("next step: …", "次は…", "下一步…")."""
    return _statement(sentence) and bool(_NEXT.search(sentence)) and not is_decision(sentence)


def is_correction(sentence: str) -> bool:
    """Whether `sentence` corrects something said before ("actually…", "no, use…")."""
    return bool(_CORRECTION.search(sentence))


# Large enough for every user message of a 100,000-message history: the summary reads them
# all before the check reads them again (issue 26).
@held_memo(TEXT_MEMO_BYTES)
def user_statements(text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(decisions, next steps, corrections): the sentences of a user message of each kind,
    verbatim, in order. A correction is also a decision (it states what stands now).

    Cached: the offline summary and the retention check (S6) read the same messages."""
    # One scan of the whole message first: most messages state none of these.
    if not (_DECIDED.search(text) or _NEXT.search(text) or _CORRECTION_ANYWHERE.search(text)):
        return (), (), ()
    decisions: list[str] = []
    steps: list[str] = []
    corrections: list[str] = []
    for sentence in sentences(text):
        if is_correction(sentence) and _statement(sentence):
            corrections.append(sentence)
        elif is_decision(sentence):
            decisions.append(sentence)
        elif is_next_step(sentence):
            steps.append(sentence)
    return tuple(decisions), tuple(steps), tuple(corrections)


_CODE = re.compile(r"```.*?(?:```|$)", re.DOTALL)


def without_code(text: str) -> str:
    """`text` with its code blocks replaced by "[code]": a goal is read, not run."""
    return _CODE.sub(" [code] ", text)


@held_memo(TEXT_MEMO_BYTES)
def user_constraints(text: str) -> tuple[str, ...]:
    """The constraint sentences of a user message (`core.text.constraints`), cached like
    `user_statements`: the offline summary and the retention check read the same texts."""
    return tuple(constraint_sentences(text))


def clean_prose(sentence: str) -> str:
    """`sentence` as a note-taker would copy it: struck-through text left out, HTML tags
    and emphasis markers removed, whitespace collapsed."""
    text = _STRIKE.sub("", sentence)
    text = _TAG.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    return " ".join(text.split())


def is_noise(sentence: str) -> bool:
    """Politeness, filler or a formatting demonstration: never listed as progress."""
    cleaned = clean_prose(sentence)
    if not cleaned or _FILLER.match(cleaned):
        return True
    words = re.findall(r"\w+", cleaned)
    if not words:
        return True
    # What was mostly markup ("~~Strikethrough~~ and <u>underlined</u>") says nothing.
    return len(cleaned) < 0.6 * len(" ".join(sentence.split())) and len(words) < 6


# An identifier-like token: a DOI, URL, path, Zotero key or anything with / . : _ - inside.
_IDENTIFIER_TOKEN = re.compile(r"\S*[/:._\-#@]\S*|\b[A-Z0-9]{8}\b")


def clip_words(text: str, limit: int) -> str:
    """`text` on one line, cut to at most about `limit` characters at a sentence or word
    boundary, never inside an identifier (a token with / . : _ - in it is kept whole or
    left out whole); "…" marks the cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    # A sentence end in the second half is the cleanest cut.
    ends = [m.end() for m in re.finditer(r"[.!?。！？](?=\s|$)", head)]
    if ends and ends[-1] > limit // 2 and not _inside_identifier(text, ends[-1] - 1):
        return text[:ends[-1]].rstrip() + " …"
    cut = head.rfind(" ")
    if cut <= 0:
        return head.rstrip() + "…"
    return text[:cut].rstrip(" ,;:") + " …"


def _inside_identifier(text: str, i: int) -> bool:
    start = text.rfind(" ", 0, i) + 1
    end = text.find(" ", i)
    token = text[start:end if end >= 0 else len(text)]
    return token[-1:] != "." and bool(_IDENTIFIER_TOKEN.fullmatch(token))
