"""Identifiers people type in prose: Zotero keys, arXiv ids, ISBNs, PMIDs, issue refs, error codes.

A user writes "Please open Zotero item K7QX4M2P"; an assistant answers "the build fails with
error TS2345". These are what a resumed agent must quote verbatim, and they appear in no tool
call. Each scanner here is precision-minded (property tests feed it ordinary English,
Japanese and code) and a pure function of one text, so callers may memoise it per message.

Scanners yield `(position, ledger entry)` like every identifier scanner (`core.text.scanning`);
`core.text.identifiers` merges them with its own in text order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..values.messages import LedgerEntry
from .scanning import Sighting, entry, in_order

# The alphabet Zotero draws its 8-character object keys from (no 0, 1 or O).
ZOTERO_KEY_ALPHABET = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"
# A key glued to other word characters, a path, a URL fragment or a hyphenated code is not
# a key. ASCII boundaries: Japanese writes a key right against kana ("アイテムK7QX4M2Pを開いて").
_KEY = re.compile(rf"(?<![A-Za-z0-9_/.#@$-])([{ZOTERO_KEY_ALPHABET}]{{8}})(?![A-Za-z0-9_-]|/\w)")
_HAS_DIGIT = re.compile(r"\d")
# An all-letter candidate ("KQXVMBPN", but also "SETTINGS") counts only right after a word
# that says it is a key, itself not shouted: about 11% of real keys have no digit, and
# shouting ("ITEM SETTINGS") has none either.
_KEY_CONTEXT = re.compile(
    r"(zotero|items?|keys?|attachments?|collections?|annotations?|parent|notes?|citekey|"
    r"アイテム|キー|コレクション|添付ファイル)\s*(?:key|id)?\s*(?:is|was|[:#=])?\s*[(\[「]?$",
    re.IGNORECASE,
)
# ... or in a list right after a key ("items K7QX4M2P, KQXVMBPN and PQRSTVWX").
_LIST_GAP = re.compile(r"^\s*(?:,|、|/|and|or|&)\s*(?:and\s*)?$", re.IGNORECASE)
_CONTEXT_CHARS = 24
_VOWELS = frozenset("AEIOUY")

_ARXIV = re.compile(
    r"\barxiv(?:\.org/(?:abs|pdf)/|\s*:\s*|\s+(?:id\s*:?\s*)?)"
    r"(\d{4}\.\d{4,5}(?:v\d+)?|[a-z-]+(?:\.[A-Z]{2})?/\d{7}(?:v\d+)?)\b",
    re.IGNORECASE,
)
_ISBN = re.compile(r"\bISBN(?:-1[03])?\s*:?\s*((?:\d[\s-]?){9}[\dXx](?:[\s-]?\d){0,3})\b")
_PMID = re.compile(r"\bPMID\s*:?\s*(\d{1,8})\b")
_PMCID = re.compile(r"\b(PMC\d{5,8})\b")
_REPO_ISSUE = re.compile(r"(?<![\w/.-])([A-Za-z0-9][\w.-]*/[\w.-]+#\d+)\b")
_ISSUE = re.compile(
    r"\b(issue|PR|pull request|pull|MR|merge request|bug|ticket)\s+#?(\d{1,7})\b", re.IGNORECASE
)
_ERRNO = re.compile(
    r"\b(E(?:NOENT|ACCES|PERM|EXIST|NOTDIR|ISDIR|NOSPC|PIPE|CONNREFUSED|CONNRESET|ADDRINUSE|"
    r"TIMEDOUT|NOTEMPTY|BUSY|AGAIN|MFILE|ROFS|INVAL|NOMEM|HOSTUNREACH|NETUNREACH))\b"
)
# Compiler and linter diagnostics: rustc E0308, TypeScript TS2345, C# CS0103.
_DIAGNOSTIC = re.compile(r"(?<![\w-])((?:TS|CS)\d{4,5}|E0\d{3})(?![\w-])")
# Exception classes: at least one word before "Error" (KeyError, ModuleNotFoundError).
_EXCEPTION = re.compile(r"\b((?:[A-Z][a-z0-9]+)+(?:Error|Exception))\b")
_HTTP_STATUS = re.compile(r"\bHTTP(?:/[\d.]+)?\s+([45]\d\d)\b")


def _zotero_keys(text: str) -> Iterator[Sighting]:
    previous_end = -1
    for m in _KEY.finditer(text):
        key = m.group(1)
        if not _HAS_DIGIT.search(key):
            before = text[max(0, m.start() - _CONTEXT_CHARS): m.start()]
            listed = previous_end >= 0 and _LIST_GAP.match(text[previous_end: m.start()])
            context = _KEY_CONTEXT.search(before)
            named = context is not None and not context.group(1).isupper()
            if _looks_like_word(key) or not (listed or named):
                continue
        elif not any(c.isalpha() for c in key):
            continue  # eight digits are a number, not a key
        previous_end = m.end()
        yield m.start(), entry("zotero_key", key)


def _looks_like_word(token: str) -> bool:
    """An all-caps word with many vowels ("DATABASE", "OPERATOR"), not a random key.

    Eight random letters of Zotero's alphabet hold four vowels or more about one time in
    eighteen; the keys lost this way (about 0.6% of all keys) lose only this prose route:
    tool calls and results still record them. Words with fewer vowels ("SETTINGS") are
    kept out by the context rule instead: a key word must precede them.
    """
    return sum(1 for c in token if c in _VOWELS) >= 4


def _arxiv(text: str) -> Iterator[Sighting]:
    for m in _ARXIV.finditer(text):
        yield m.start(1), entry("arxiv", m.group(1))


def _isbn_valid(digits: str) -> bool:
    if len(digits) == 10:
        total = sum((10 - i) * (10 if c in "Xx" else int(c)) for i, c in enumerate(digits))
        return total % 11 == 0
    if len(digits) == 13 and digits.isdigit():
        total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(digits))
        return total % 10 == 0
    return False


def _isbns(text: str) -> Iterator[Sighting]:
    if "ISBN" not in text:  # what the pattern starts with: most texts are not scanned
        return
    for m in _ISBN.finditer(text):
        typed = m.group(1).strip()
        digits = re.sub(r"[\s-]", "", typed)
        if not _isbn_valid(digits):
            # An ISBN-10 followed by other digits: try the first ten alone.
            if len(digits) > 10 and _isbn_valid(digits[:10]):
                typed = digits[:10]
            else:
                continue
        yield m.start(1), entry("isbn", typed)


def _pubmed(text: str) -> Iterator[Sighting]:
    if "PM" not in text:  # both patterns hold it ("PMID", "PMC")
        return
    for m in _PMID.finditer(text):
        yield m.start(1), entry("pmid", m.group(1))
    for m in _PMCID.finditer(text):
        yield m.start(1), entry("pmid", m.group(1))


def _issues(text: str) -> Iterator[Sighting]:
    for m in _REPO_ISSUE.finditer(text) if "#" in text else ():
        yield m.start(1), entry("issue", m.group(1))
    for m in _ISSUE.finditer(text):
        word = m.group(1)
        word = word.upper() if word.lower() in ("pr", "mr") else word.lower()
        yield m.start(), entry("issue", f"#{m.group(2)}", word)


def _error_codes(text: str) -> Iterator[Sighting]:
    exceptions = "Error" in text or "Exception" in text  # what `_EXCEPTION` ends with
    for pattern in (_ERRNO, _DIAGNOSTIC, _EXCEPTION) if exceptions else (_ERRNO, _DIAGNOSTIC):
        for m in pattern.finditer(text):
            yield m.start(1), entry("error_code", m.group(1))
    if "HTTP" not in text:
        return
    for m in _HTTP_STATUS.finditer(text):
        yield m.start(), entry("error_code", f"HTTP {m.group(1)}")


def prose_scans(text: str) -> list[Iterator[Sighting]]:
    """The scanners of every kind above over `text` (`core.text.scanning.in_order` merges
    them, with others, in text order)."""
    return [scan(text) for scan in (_zotero_keys, _arxiv, _isbns, _pubmed, _issues,
                                    _error_codes)]


def prose_identifiers(text: str) -> list[LedgerEntry]:
    """Every identifier of the kinds above in `text`, in text order (duplicates kept)."""
    return in_order(*prose_scans(text))
