"""Text for recall (SPEC L1): one tokenisation for the index and the query, on every backend.

The store indexes every message in a database full-text index (SQLite FTS5, PostgreSQL
tsvector). Both are fed the *same* pre-tokenised text built here, so a query finds the same
messages on both backends:

* NFKC + case folding; Latin diacritics are folded (`résumé` finds `resume`);
* a token is a run of letters or digits; everything else separates tokens, so an
  identifier such as `10.1000/xyz-12` is the token sequence `10 1000 xyz 12`, searched as
  a phrase and then checked verbatim against the message (`exact`), so identifiers (Zotero
  keys, DOIs, paths, error codes) are found exactly;
* CJK text has no spaces between words, so a run of Han, kana or Hangul becomes its
  overlapping character bigrams (`東京大学` → `東京 京大 大学`), the classic approach of
  CJK search engines: any word of two or more characters is a phrase of bigrams. A single
  CJK character is searched as a prefix of the bigrams that start with it.

Very long messages are indexed in full up to `FULL_INDEX_CHARS` of tokens; beyond that only
the words not seen before are added (every distinct word stays findable, phrases far into a
huge tool output may not), which keeps one message's index entry bounded on both backends.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import ContextfoldError
from ..render.serialize import SerializeLimits, serialize_message
from ..values.messages import Message, ToolCallPart, ToolResultPart

_RUN = re.compile(r"[^\W_]+")
# Han (with extensions and compatibility ideographs), hiragana, katakana (and its halfwidth
# forms after NFKC), Hangul syllables and jamo.
_CJK = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]+"
)
MAX_TOKEN_CHARS = 64  # longer runs (base64, hashes of hashes) are cut: still a unique prefix
FULL_INDEX_CHARS = 100_000
MAX_INDEX_CHARS = 200_000
# Characters that make a query term an identifier to be matched verbatim.
_IDENTIFIER_MARKS = frozenset("./\\:-_#@+=~")


# Recall indexes and shows messages whole: no clipping (the summariser's limits do not apply).
_WHOLE = SerializeLimits(tool_result_chars=10**9, tool_args_chars=10**9,
                         resource_text_chars=10**9)


def message_text(msg: Message) -> str:
    """A message as labelled plain text, nothing clipped (what is indexed and expanded)."""
    return serialize_message(msg, _WHOLE)


# The runtime's recall tools (SPEC L2). Their calls and results are not indexed: a result
# quotes other messages, and indexing it would make every later search find the search.
RECALL_TOOL_NAMES = frozenset({"history_search", "history_expand"})


def client_recall_tools(names: Iterable[str]) -> tuple[str, str] | None:
    """The recall tools a client offers its model under names of its own, as (search,
    expand): an MCP client names the tools of `contextfold mcp` after the server
    (`mcp__contextfold__history_search` in Claude Code, `contextfold_history_search` in
    OpenCode). Both must be there with one prefix; None otherwise, and None for the bare
    names (the runtime's own tools, which the default recall note already names)."""
    names = [n for n in names if isinstance(n, str)]
    for name in names:
        if name.endswith("history_search") and name != "history_search":
            prefix = name[: -len("history_search")]
            if prefix + "history_expand" in names:
                return name, prefix + "history_expand"
    return None


_TOOL_PREFIX_END = ("_", ".", "-", ":", "/")


def is_recall_tool(name: str | None) -> bool:
    """A recall tool, bare or under a client's prefix (`mcp__contextfold__history_search`,
    `contextfold_history_expand`): its results quote other messages too."""
    if not name:
        return False
    for bare in RECALL_TOOL_NAMES:
        if name == bare or (name.endswith(bare) and name[: -len(bare)].endswith(
                _TOOL_PREFIX_END)):
            return True
    return False


def indexed_text(msg: Message) -> str:
    """What the index holds for a message: its text without recall calls and results (the
    runtime's, and `contextfold mcp`'s under a client's prefix)."""
    parts = tuple(p for p in msg.parts if not (
        isinstance(p, ToolCallPart | ToolResultPart) and is_recall_tool(p.name)))
    if len(parts) == len(msg.parts):
        return message_text(msg)
    return message_text(msg.model_copy(update={"parts": parts})) if parts else ""


def _fold_latin(token: str) -> str:
    if token.isascii():  # NFKD leaves ASCII as it is and it has no combining marks: O(1)
        return token  # (a per-character pass over every token of every message, issue 26)
    decomposed = unicodedata.normalize("NFKD", token)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def fold(text: str) -> str:
    """The comparable form of a text: NFKC and case folded (used for verbatim checks)."""
    return unicodedata.normalize("NFKC", text).casefold()


def tokens(text: str) -> list[str]:
    """The search tokens of `text`, in order (see the module docstring)."""
    if text.isascii():  # NFKC keeps ASCII, casefold is lower(), no CJK: runs as they are
        return [run[:MAX_TOKEN_CHARS] for run in _RUN.findall(text.lower())]
    out: list[str] = []
    for run in _RUN.findall(fold(text)):
        if run.isascii():
            out.append(run[:MAX_TOKEN_CHARS])
            continue
        pos = 0
        for m in _CJK.finditer(run):
            if m.start() > pos:
                out.append(_fold_latin(run[pos : m.start()])[:MAX_TOKEN_CHARS])
            cjk = m.group()
            if len(cjk) == 1:
                out.append(cjk)
            else:
                out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
            pos = m.end()
        if pos < len(run):
            out.append(_fold_latin(run[pos:])[:MAX_TOKEN_CHARS])
    return [t for t in out if t]


def index_document(text: str) -> str:
    """The space-separated token text the database indexes for one message (bounded)."""
    words = tokens(text)
    # Every word is kept while the tokens before it stay under FULL_INDEX_CHARS: when all of
    # them do, that is every word, joined at C speed (a message is indexed as it is stored,
    # once per request of a tool loop; issue 40).
    if sum(map(len, words)) + len(words) <= FULL_INDEX_CHARS:
        return " ".join(words)
    kept: list[str] = []
    size = 0
    seen: set[str] = set()
    for word in words:
        if size < FULL_INDEX_CHARS:
            kept.append(word)
            seen.add(word)
        elif word not in seen:
            if size + len(word) + 1 > MAX_INDEX_CHARS:
                break
            kept.append(word)
            seen.add(word)
        else:
            continue
        size += len(word) + 1
    return " ".join(kept)


@dataclass(frozen=True)
class Term:
    """One query term: a phrase of tokens, optionally a prefix, optionally checked verbatim."""

    raw: str
    tokens: tuple[str, ...]
    prefix: bool = False
    exact: bool = False  # an identifier: must appear verbatim (folded) in the message


@dataclass(frozen=True)
class SearchQuery:
    text: str
    terms: tuple[Term, ...]

    def matches_verbatim(self, folded_text: str) -> bool:
        """Whether every identifier term appears verbatim in a message's folded text."""
        return all(fold(t.raw) in folded_text for t in self.terms if t.exact)


_QUOTED = re.compile(r'"([^"]*)"|(\S+)')


class EmptyQueryError(ContextfoldError, ValueError):
    """The query has nothing searchable (only punctuation or blanks)."""

    kind = "bad_input"


def parse_query(text: str) -> SearchQuery:
    """Terms of a search: `"quoted phrases"`, words, identifiers, `prefix*`.

    Every term must match (AND). Raises `EmptyQueryError` when nothing is searchable.
    """
    if not isinstance(text, str):
        raise EmptyQueryError(f"the search query must be text, not {type(text).__name__}")
    terms: list[Term] = []
    for m in _QUOTED.finditer(text):
        quoted, word = m.group(1), m.group(2)
        raw = quoted if quoted is not None else word
        prefix = quoted is None and raw.endswith("*")
        body = raw.rstrip("*") if prefix else raw
        toks = tuple(tokens(body))
        if not toks:
            continue
        single_cjk = len(toks) == 1 and len(toks[0]) == 1 and _CJK.fullmatch(toks[0])
        exact = (quoted is None and len(toks) > 1
                 and any(c in _IDENTIFIER_MARKS for c in body.strip()))
        terms.append(Term(raw=body.strip(), tokens=toks, prefix=prefix or bool(single_cjk),
                          exact=exact))
    if not terms:
        raise EmptyQueryError(f"nothing to search for in {text!r}: give words or identifiers")
    return SearchQuery(text=text, terms=tuple(terms))


def fts5_match(query: SearchQuery, *, any_term: bool = False) -> str:
    """The query as an FTS5 MATCH expression (tokens are alphanumeric: no escaping needed)."""
    parts = ['"' + " ".join(t.tokens) + '"' + ("*" if t.prefix else "") for t in query.terms]
    return (" OR " if any_term else " AND ").join(parts)


def tsquery(query: SearchQuery, *, any_term: bool = False) -> str:
    """The query as PostgreSQL `to_tsquery('simple', ...)` text (phrases with `<->`)."""
    parts = []
    for t in query.terms:
        words = list(t.tokens)
        if t.prefix:
            words[-1] += ":*"
        parts.append("(" + " <-> ".join(words) + ")")
    return (" | " if any_term else " & ").join(parts)


def snippet(text: str, query: SearchQuery, width: int = 240) -> str:
    """A bounded excerpt of `text` around the first place a query term occurs."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    folded = fold(flat)
    # NFKC can change lengths; positions are only a hint, so fall back to the start.
    at = -1
    for term in query.terms:
        for needle in (fold(term.raw), term.tokens[0]):
            at = folded.find(needle)
            if at >= 0:
                break
        if at >= 0:
            break
    if len(folded) != len(flat) or at < 0:
        at = 0
    start = max(0, min(at - width // 3, len(flat) - width))
    end = start + width
    return ("…" if start > 0 else "") + flat[start:end].strip() + ("…" if end < len(flat) else "")
