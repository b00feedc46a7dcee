"""The language the user writes in (SPEC G1), for the LLM summary's content.

A checkpoint is read by the user as well as by the model: a Japanese-speaking researcher
should get a Japanese summary, with the canonical headings kept so validation and parsing
still work. Detection is deterministic and deliberately coarse: the script of the user's
recent messages (kana → Japanese, Hangul → Korean, Han alone → Chinese, Cyrillic, Greek,
Arabic, Hebrew, Thai, Devanagari), and for Latin script a few very common words per
language. When it cannot tell, it says so (None) and the prompt asks the model to follow
the user's language itself.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from ..core.values.messages import Node
from ..core.values.tree import message_nodes

_RECENT_MESSAGES = 12  # the user's latest messages decide: people switch languages
_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Japanese", re.compile(r"[\u3040-\u30ff]")),
    ("Korean", re.compile(r"[\uac00-\ud7af]")),
    ("Chinese", re.compile(r"[\u4e00-\u9fff]")),
    ("Russian", re.compile(r"[\u0400-\u04ff]")),
    ("Greek", re.compile(r"[\u0370-\u03ff]")),
    ("Arabic", re.compile(r"[\u0600-\u06ff]")),
    ("Hebrew", re.compile(r"[\u0590-\u05ff]")),
    ("Thai", re.compile(r"[\u0e00-\u0e7f]")),
    ("Hindi", re.compile(r"[\u0900-\u097f]")),
)
_LATIN = re.compile(r"[A-Za-zÀ-ÿ]")
_WORD = re.compile(r"[a-zà-ÿ']+")
_COMMON_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(words.split()) for lang, words in {
        "English": "the and of to is in that it for with this you please what",
        "French": "le la les des est et une un pour que dans avec merci vous",
        "German": "der die das und ist nicht ein eine mit für bitte ich sie",
        "Spanish": "el los las y es una por para que con del gracias",
        "Italian": "il gli della che è per una con non sono grazie",
        "Portuguese": "o os as e é um uma para com não obrigado você",
        "Dutch": "de het een en is niet van dat voor met alstublieft",
    }.items()
}
# A non-Latin character carries about as much as a short Latin word: a Japanese request
# with an English file name in it is still Japanese.
_SCRIPT_WEIGHT = 3


def text_language(text: str) -> str | None:
    """The language of one text, or None when it is too short or mixed to tell."""
    counts = {name: len(pattern.findall(text)) for name, pattern in _SCRIPTS}
    if counts["Japanese"]:
        # Kanji in a text with kana are Japanese, not Chinese.
        counts["Japanese"] += counts.pop("Chinese")
    best = max(counts, key=lambda name: counts[name])
    if counts[best] and counts[best] * _SCRIPT_WEIGHT >= len(_LATIN.findall(text)):
        return best
    words = _WORD.findall(text.lower())
    scores = {lang: sum(1 for w in words if w in common)
              for lang, common in _COMMON_WORDS.items()}
    top = max(scores.values())
    leaders = [lang for lang, score in scores.items() if score == top]
    return leaders[0] if top and len(leaders) == 1 else None


def user_language(nodes: Iterable[Node]) -> str | None:
    """The language of the user's latest messages in `nodes` (a majority of them)."""
    texts = [msg.text for _, msg in message_nodes(nodes)
             if msg.role == "user" and msg.text.strip()][-_RECENT_MESSAGES:]
    votes = Counter(lang for lang in map(text_language, texts) if lang is not None)
    if not votes:
        return None
    ranked = votes.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        # A tie: the language of the latest message that has one.
        latest = next(lang for lang in map(text_language, reversed(texts)) if lang)
        return latest
    return ranked[0][0]
