"""Recall over a linear in-memory session (SPEC L1, L2): what `MemoryStore` searches with.

The same contract as the SQL store's full-text search (`recall.search_branch`): the same
index text per message (`recall_text.index_document` of `indexed_text`: checkpoints and the
recall tools' own calls and results are not indexed), every term a phrase of its tokens
(the last one a prefix for `word*` and a single CJK character), all terms or, with
`any_term`, at least one, identifiers then checked verbatim against the message, hits best
first by an idf-weighted BM25 score over the session's messages, newest first among equals.

Each message is tokenised once, by the first search after it was pushed (issue 40: a push
only queues it, so a request of a tool loop, which stores the results and searches nothing,
does not pay for indexing them, and a session nobody searches never does): a search reads
the inverted index (token -> messages) and re-reads the index text of the candidates only
for phrases. The index is built from the nodes in the same process, so it needs no re-check
against them (the SQL store's `recall_trust` guards against rows written by someone else).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ...core.recall.recall_text import (
    SearchQuery,
    Term,
    fold,
    index_document,
    indexed_text,
    message_text,
    snippet,
)
from ...core.values.messages import Node
from ..values import RecallHit

# BM25's usual constants (SQLite FTS5 uses the same).
_K1 = 1.2
_B = 0.75


@dataclass(frozen=True)
class _Entry:
    """One indexed message: its node, place and index text."""

    node: Node
    position: int
    turn: int
    doc: str  # " token token ... " (padded, so a phrase is a substring search)
    counts: Counter[str]
    length: int


class MemoryIndex:
    """The recall index of one linear session, kept as nodes are pushed (oldest first)."""

    def __init__(self) -> None:
        self.turns: list[int] = []  # per branch position: user messages up to it (SPEC L2)
        self._entries: list[_Entry] = []
        self._postings: dict[str, list[int]] = {}  # token -> entry indexes, ascending
        self._lengths: list[int] = []  # per entry, its token count (what BM25 reads)
        # token -> ({entry: the token's count in it}, postings covered): built for the
        # tokens searched, when first searched, and extended by the entries pushed since.
        # One compact map per token reads much faster than thousands of entries' counters,
        # and pushing (once per message stored) pays nothing for it.
        self._columns: dict[str, tuple[dict[int, int], int]] = {}
        self._total_length = 0
        # (node, position, turn) pushed since the last search, indexed by the next one.
        self._queued: list[tuple[Node, int, int]] = []

    def push(self, node: Node) -> None:
        """Add `node`, the next node of the branch (its position is the count so far):
        its turn now, its index text at the next search (see the module)."""
        position = len(self.turns)
        turn = (self.turns[-1] if self.turns else 0) + (1 if node.is_user_message else 0)
        self.turns.append(turn)
        self._queued.append((node, position, turn))

    def _index_queued(self) -> None:
        """Index the nodes pushed since the last search, oldest first (as pushed)."""
        queued, self._queued = self._queued, []
        for node, position, turn in queued:
            self._index(node, position, turn)

    def _index(self, node: Node, position: int, turn: int) -> None:
        msg = node.message
        doc = index_document(indexed_text(msg)) if msg is not None else ""
        if not doc:
            return
        words = doc.split()
        counts = Counter(words)
        entry = len(self._entries)
        self._entries.append(_Entry(node, position, turn, f" {doc} ", counts, len(words)))
        self._total_length += len(words)
        self._lengths.append(len(words))
        for word in counts:
            self._postings.setdefault(word, []).append(entry)

    def search(self, query: SearchQuery, limit: int, *,
               any_term: bool = False) -> list[RecallHit]:
        """The messages matching `query`, best first, at most `limit` (see the module)."""
        if self._queued:
            self._index_queued()
        matched = [self._matching(term) for term in query.terms]
        if any_term:
            return self._best_of_any(query, matched, limit)
        found: set[int] = set.intersection(*matched) if matched else set()
        if not found:
            return []
        return self._ranked(query, found, self._scores(query.terms, matched, found), limit)

    def _best_of_any(self, query: SearchQuery, matched: list[set[int]],
                     limit: int) -> list[RecallHit]:
        """`search` with `any_term`: the same hits, without scoring every message that
        holds only common words (MaxScore). A term adds less than `_bound` to any message's
        score, so once the messages holding the rarer terms give `limit` hits all scoring
        above the bounds of the other terms summed, no message holding only those can be
        among the hits, nor tie with them: it is neither scored nor sorted (SPEC L5 searches
        a long session at every new turn, and a common word is held by thousands of its
        messages, issue 40). The messages scored are scored whole, as `_scores` scores them,
        so the hits, their order and their scores are the ones of scoring every match."""
        n = len(self._entries)
        bounds = sorted(((_bound(len(holders), n), i) for i, holders in enumerate(matched)
                         if holders), key=lambda b: (-b[0], b[1]))
        chosen: set[int] = set()
        scores: dict[int, float] = {}
        for k, (_b, i) in enumerate(bounds):
            new = matched[i] - chosen
            chosen |= new
            scores.update(self._scores(query.terms, matched, new))
            rest = sum(b for b, _i in bounds[k + 1:])
            if not rest:  # every term's messages are scored: the ranking of all of them
                break
            # A relative margin far above the sums' rounding: a near tie is not pruned.
            if len(scores) < limit or \
                    heapq.nlargest(limit, scores.values())[-1] <= rest * (1 + 1e-9):
                continue
            hits = self._ranked(query, chosen, scores, limit)
            if len(hits) == limit and hits[-1].score > rest * (1 + 1e-9):
                return hits
        return self._ranked(query, chosen, scores, limit) if chosen else []

    def _ranked(self, query: SearchQuery, found: set[int], scores: dict[int, float],
                limit: int) -> list[RecallHit]:
        """The best `limit` of `found` by `scores` as hits (identifiers checked verbatim)."""
        # Best first, newest first among equals: by entry, then by score (a stable sort
        # keeps the newest first among equal scores), no key tuple per entry.
        ranked = sorted(found, reverse=True)
        ranked.sort(key=scores.__getitem__, reverse=True)
        exact = any(t.exact for t in query.terms)
        hits: list[RecallHit] = []
        for e in ranked:
            entry = self._entries[e]
            msg = entry.node.message
            assert msg is not None  # only messages are indexed
            body = message_text(msg)
            if exact and not query.matches_verbatim(fold(body)):
                continue
            hits.append(RecallHit(node=entry.node, position=entry.position, turn=entry.turn,
                                  snippet=snippet(body, query), score=scores[e]))
            if len(hits) >= limit:
                break
        return hits

    # ------------------------------------------------------------------ internals

    def _with_token(self, token: str, prefix: bool) -> set[int]:
        if not prefix:
            return set(self._postings.get(token, ()))
        out: set[int] = set()
        for word, entries in self._postings.items():
            if word.startswith(token):
                out.update(entries)
        return out

    def _matching(self, term: Term) -> set[int]:
        """The entries holding `term`: each token, then the phrase in order."""
        *whole, last = term.tokens
        found: set[int] | None = None
        for token in sorted(set(whole), key=lambda t: len(self._postings.get(t, ()))):
            found = self._with_token(token, False) if found is None else \
                found & self._with_token(token, False)
            if not found:
                return set()
        with_last = self._with_token(last, term.prefix)
        found = with_last if found is None else found & with_last
        if len(term.tokens) == 1 or not found:
            return found
        phrase = _phrase(term)
        return {e for e in found if phrase.search(self._entries[e].doc)}

    def _scores(self, terms: Iterable[Term], matched: list[set[int]],
                found: set[int]) -> dict[int, float]:
        """BM25 of each found entry: idf by how many messages hold each term, the term's
        frequency by its rarest token's count (a prefix counts once).

        A common word of a long session is held by thousands of messages, each scored at
        every new user turn (SPEC L5): the counts come from the token's column
        (`_column`), the lengths from a flat list, the same arithmetic in the same order
        (issue 40)."""
        n = len(self._entries)
        average = self._total_length / n if n else 1.0
        # BM25's length normalisation, split so the loop below does one multiply-add.
        flat, per_token = _K1 * (1 - _B), _K1 * _B / average
        boost = _K1 + 1
        lengths = self._lengths
        scores = dict.fromkeys(found, 0.0)
        for term, holders in zip(terms, matched, strict=True):
            if not holders:
                continue
            idf = _idf(len(holders), n)
            whole = term.tokens[:-1] if term.prefix else term.tokens
            held = holders & found
            if len(whole) == 1:
                column = self._column(whole[0])
                for e in held:
                    tf = column[e]
                    scores[e] += idf * tf * boost / (tf + flat + per_token * lengths[e])
                continue
            columns = [self._column(t) for t in whole]
            for e in held:
                tf = min((c[e] for c in columns), default=1)
                scores[e] += idf * tf * boost / (tf + flat + per_token * lengths[e])
        return scores

    def _column(self, token: str) -> dict[int, int]:
        """{entry: `token`'s count in it} for every entry holding it (see `_columns`)."""
        postings = self._postings.get(token, [])
        column, done = self._columns.get(token, ({}, 0))
        if done < len(postings):
            entries = self._entries
            for e in postings[done:]:
                column[e] = entries[e].counts[token]
            self._columns[token] = (column, len(postings))
        return column


def _idf(holders: int, n: int) -> float:
    """BM25's idf of a term `holders` of `n` messages hold (always positive)."""
    return math.log(1 + (n - holders + 0.5) / (holders + 0.5))


def _bound(holders: int, n: int) -> float:
    """More than a term held by `holders` of `n` messages adds to any message's score:
    its idf times the most a term frequency can weigh (`tf * (k1 + 1) / (tf + k1 * (1 -
    b) + ...)` stays under `k1 + 1`)."""
    return _idf(holders, n) * (_K1 + 1)


def _phrase(term: Term) -> re.Pattern[str]:
    """The term's tokens in a row in a padded index text (tokens are alphanumeric)."""
    body = " ".join(re.escape(t) for t in term.tokens)
    return re.compile(" " + body + (r"\S* " if term.prefix else " "))
