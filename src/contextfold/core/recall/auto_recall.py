"""Recall that comes by itself (SPEC L5): the pure part.

At a turn's first request, its user message (and the tool calls the model is about to read
the results of, if any) is searched against the folded part of the branch; the best matches
go into the projection as one labelled block, right before that user message. There it never
changes the cached prefix (checkpoint, pins and the tail before the latest request, SPEC
Y4), and it stays (SPEC Q5): every later request until the next checkpoint sends it byte for
byte in the same place, so the blocks of the turns since the checkpoint accumulate, within
the recall budget (`RecallTurns` records each turn's decision, a block or none). When the
next turn's block no longer fits, that turn gets none, no earlier block is edited, and the
full blocks are a reason to compact (`core.sizing.fit.recall_compaction_due`); the next checkpoint
folds them in and the accumulation starts afresh. This module decides everything about the
blocks except the search itself and where the decisions are kept (`runtime.auto_recall`):

* `recall_query(projection)`: the search, built from the query text: identifiers first,
  then the longest distinct words (CJK as bigrams), at most `MAX_TERMS`, any term matching
  (the store ranks by how many and how rare). Deterministic: the same text, the same query.
* `choose_block(candidates, projection, budget, count)`: drops what the request already
  holds (a node projected raw, a sentence already in the checkpoint text), cuts each hit to
  the sentences that hold the query's terms, and fits the block to `budget` tokens.
  Identical hits and projection give a byte-identical block (prompt cache), listed in
  branch order, not rank order, so a re-ranking of the same hits changes nothing.
* `RecallTurns`: the decisions of the turns since one checkpoint, and `held_blocks`, the
  blocks of a projection's turns in branch order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from ..sizing.fit import recall_full
from ..text.text_estimate import Count, estimate_text
from ..values.held import text_bytes
from ..values.messages import Message, TextPart, ToolCallPart
from ..view.projection import Projection, RecallBlock, anchored, checkpoint_text
from .recall_text import SearchQuery, Term, fold, tokens

__all__ = ["Candidate", "RecallBlock", "RecallTurns", "candidates_bytes", "choose_block",
           "held_blocks", "identifier_query", "known_text", "latest_request", "latest_user_index",
           "query_text", "recall_query", "smallest_block", "undecided_needs_search", "within"]

RECALL_HEADER = (
    "[contextfold recall] From earlier in this session: excerpts of compacted messages that "
    "match the latest request (history_expand with a node id reads the whole message)."
)
MAX_TERMS = 12  # query terms taken from the latest request
MAX_HITS = 5  # excerpts in one block at most
SEARCH_LIMIT = 12  # matches asked of the store (some are dropped as already in the request)
MIN_HIT_TOKENS = 24  # an excerpt smaller than this says nothing: it is left out
RELEVANCE = 0.5  # a match scoring under this share of the best one is left out
_MIN_WORD = 4  # shorter Latin words are too common to search for
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_IDENT = re.compile(r"\S*[0-9]\S*|\S+[./\\:_#@-]\S+")
# Frequent words that are long enough to pass `_MIN_WORD` but select nothing.
_COMMON_WORDS = (
    "this that with from have what which when where there their about would could should "
    "please thanks thank into also just like then than them they will your been were does "
    "make made only some more most very over such each other these those here after before "
    "because being while using used need want know think")
_COMMON = frozenset(_COMMON_WORDS.split())


@dataclass(frozen=True)
class Candidate:
    """One match the store found: a message of the branch and where it is."""

    node_id: str
    position: int
    turn: int
    role: str
    text: str  # the whole message as labelled plain text (`recall_text.message_text`)

    @cached_property
    def words(self) -> frozenset[str]:
        """The search tokens of `text`, computed once: the runtime memoises a search's
        candidates, so every request of a tool loop reuses them."""
        return frozenset(tokens(self.text))


def candidates_bytes(candidates: Sequence[Candidate]) -> int:
    """The estimated bytes a memo of `candidates` keeps: each match's fields, its text and
    the word set worked out from it (computed here, as every request that reads the memo
    would: the memo holds it from then on)."""
    # A set's hash table (about 32 bytes a word) is more than `text_bytes` counts for a
    # container; the word sets are most of what a match holds besides its text.
    table = sum(32 * len(c.words) for c in candidates)  # computes and caches each set
    return text_bytes(tuple(candidates), 4) + table


def latest_request(projection: Projection) -> tuple[str, str, str] | None:
    """The latest request of `projection`: the id of its latest user message projected
    raw, that message's text, and the inputs of the tool calls after it whose results the
    model reads next ("" when none). None when the latest user message is not projected
    raw (folded, or none yet)."""
    if (at := latest_user_index(projection)) is None:
        return None
    calls: list[str] = []
    for node in reversed(projection.messages[at + 1:]):
        if isinstance(msg := node.payload, Message) and msg.role == "assistant" and \
                msg.tool_calls:
            calls = [_call_text(c) for c in msg.tool_calls]
            break  # only the latest round's calls: the model reads their results next
    user = projection.messages[at]
    assert isinstance(user.payload, Message)
    text = " ".join(p.text for p in user.payload.parts if isinstance(p, TextPart))
    return user.id, text, "\n".join(t for t in reversed(calls) if t.strip())


def latest_user_index(projection: Projection) -> int | None:
    """Where `latest_request`'s user message is in `projection.messages`, its texts left
    alone (a tool loop's request only asks if its turn was decided); None: none is raw."""
    messages = projection.messages
    return next((i for i in range(len(messages) - 1, -1, -1)
                 if isinstance(m := messages[i].payload, Message) and m.role == "user"
                 and not m.tool_results), None)


def query_text(projection: Projection) -> str:
    """The text `latest_request` searches for ("" when there is none)."""
    found = latest_request(projection)
    return "\n".join(t for t in found[1:] if t) if found is not None else ""


def _call_text(call: ToolCallPart) -> str:
    if isinstance(call.input, dict):
        return " ".join(str(v) for v in call.input.values() if isinstance(v, str | int))
    return str(call.input)


def recall_query(text: str, calls: str = "", max_terms: int = MAX_TERMS) -> SearchQuery | None:
    """The search for `text` (any term matching), or None when it has nothing to search.

    Identifiers (anything with a digit or inner punctuation: keys, DOIs, paths) come first,
    as phrases of their tokens, the request's and then those of the pending tool `calls`;
    then the request's longest distinct words (CJK runs as bigrams), in the order they first
    occur among equals. A tool call adds identifiers only: its words ("notes", "draft")
    would re-weigh the same matches every round and change the block for nothing."""
    terms: list[Term] = []
    seen: set[tuple[str, ...]] = set()

    def add(raw: str, toks: Sequence[str]) -> None:
        key = tuple(toks)
        if key and key not in seen and len(terms) < max_terms:
            seen.add(key)
            terms.append(Term(raw=raw, tokens=key))

    for m in _IDENT.finditer(text + "\n" + calls):
        raw = m.group().strip(".,;:()[]{}<>\"'`")
        toks = tokens(raw)
        if toks and (any(ch.isdigit() for ch in raw) or len(toks) > 1):
            add(raw, toks)
    words = [w for w in dict.fromkeys(tokens(text))
             if (not w.isascii() or len(w) >= _MIN_WORD) and w not in _COMMON
             and not w.isdigit()]
    for w in sorted(words, key=len, reverse=True):
        add(w, (w,))
    if not terms:
        return None
    return SearchQuery(text="\n".join(t for t in (text, calls) if t), terms=tuple(terms))


def identifier_query(query: SearchQuery | None) -> SearchQuery | None:
    """The identifiers of `query` alone (None: it has none). Searched first: a common word
    can match thousands of messages, which the store then returns newest first rather than
    by relevance, and a key, path or number named in the request is what finds its message."""
    if query is None:
        return None
    terms = tuple(t for t in query.terms
                  if len(t.tokens) > 1 or any(ch.isdigit() for ch in t.raw))
    return SearchQuery(text=query.text, terms=terms) if terms else None


def _flat(text: str) -> str:
    return " ".join(fold(text).split())


Weights = dict[tuple[str, ...], float]


def term_weights(query: SearchQuery, texts: Sequence[str]) -> Weights:
    """How telling each query term is among the matches: the rarer among `texts`, the more
    (a local inverse document frequency). A key named in one message outweighs a word that
    every match shares; a term no match holds weighs nothing."""
    return _weights_of(query, [set(tokens(t)) for t in texts])


def _weights_of(query: SearchQuery, sets: Sequence[AbstractSet[str]]) -> Weights:
    """`term_weights` over the matches' word sets."""
    n = len(sets)
    weights: Weights = {}
    for term in query.terms:
        df = sum(1 for words in sets if all(tok in words for tok in term.tokens))
        weights[term.tokens] = math.log((n + 1) / df) if df else 0.0
    return weights


def _score(text: str, query: SearchQuery, weights: Weights) -> float:
    return _held(set(tokens(text)), query, weights)


def _held(words: AbstractSet[str], query: SearchQuery, weights: Weights) -> float:
    """The weight of the query terms `words` hold."""
    return sum(weights.get(t.tokens, 0.0) for t in query.terms
               if all(tok in words for tok in t.tokens))


def excerpt(text: str, query: SearchQuery, known: str, chars: int,
            weights: Weights | None = None) -> str:
    """The sentences of `text` that hold the most telling query terms (`weights`; each
    term counts 1 without), in their order, within `chars` characters; sentences already
    in `known` (the checkpoint, folded) are left out. "" when nothing new matches."""
    weights = weights if weights is not None else {t.tokens: 1.0 for t in query.terms}
    return _pick(_telling(text, query, known, weights), chars)


def _telling(text: str, query: SearchQuery, known: str,
             weights: Weights) -> list[tuple[float, int, str]]:
    """(score, index, sentence) of the sentences of `text` worth quoting: new (not in
    `known`) and scoring at least `RELEVANCE` of the best one."""
    sentences = [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]
    # A term can only be held by an ASCII sentence whose lower case contains its first
    # token (ASCII tokens are runs of the lower-cased text): most sentences of a long match
    # hold none, and are skipped without being tokenised.
    firsts = sorted({t.tokens[0] for t in query.terms if weights.get(t.tokens, 0.0) > 0})
    if not firsts:
        return []
    may_hold = re.compile("|".join(re.escape(f) for f in firsts))
    scored: list[tuple[float, int, str]] = []
    for i, sentence in enumerate(sentences):
        if sentence.isascii() and may_hold.search(sentence.lower()) is None:
            continue
        score = _score(sentence, query, weights)
        if score > 0 and _flat(sentence) not in known:
            scored.append((score, i, sentence))
    top = max((score for score, _i, _s in scored), default=0.0)
    return [item for item in scored if item[0] >= top * RELEVANCE]  # the telling ones


def _pick(scored: Sequence[tuple[float, int, str]], chars: int) -> str:
    """The best of `scored` within `chars` characters, joined in their order."""
    chosen: list[tuple[int, str]] = []
    used = 0
    for _, i, sentence in sorted(scored, key=lambda s: (-s[0], s[1])):
        if used + len(sentence) > chars:
            if used == 0:  # one long sentence: clip it at a word boundary
                cut = sentence[:chars].rsplit(" ", 1)[0] if " " in sentence[:chars] else \
                    sentence[:chars]
                chosen.append((i, cut + " …"))
            break
        chosen.append((i, sentence))
        used += len(sentence) + 1
    return " … ".join(s for _i, s in sorted(chosen))


def render(hits: Sequence[tuple[Candidate, str]]) -> str:
    """The block's text: the header, then one line per hit in branch order."""
    lines = [RECALL_HEADER]
    for hit, text in sorted(hits, key=lambda h: h[0].position):
        body = " ".join(text.split())
        lines.append(f"- node {hit.node_id} (turn {hit.turn}, {hit.role}): {body}")
    return "\n".join(lines)


def known_text(projection: Projection) -> str:
    """The checkpoint's text as `choose_block` compares with it: one per checkpoint."""
    return _flat(checkpoint_text(projection.summary)) if projection.summary else ""


def choose_block(candidates: Sequence[Candidate], projection: Projection, query: SearchQuery,
                 budget: int, count: Count = estimate_text,
                 known: str | None = None) -> RecallBlock | None:
    """The block for `candidates` (best first) within `budget` tokens, placed right
    before the latest user message (`latest_request`), or None.

    Never repeats the request: a candidate projected raw (or the checkpoint itself), or
    quoted by an earlier turn's block the request still holds (SPEC Q5), is dropped, and so
    is every sentence the checkpoint text already holds (`known`: its `known_text`)."""
    anchor = latest_request(projection)
    if budget <= 0 or not candidates or anchor is None:
        return None
    in_request = {n.id for n in projection.messages}
    in_request.update(i for b in projection.recalled for i in b.node_ids)
    if projection.checkpoint is not None:
        in_request.add(projection.checkpoint.id)
    known = known_text(projection) if known is None else known
    header = count(RECALL_HEADER)
    if header + MIN_HIT_TOKENS > budget:
        return None
    # Each hit gets an equal share of the room; one that uses less leaves it to the next.
    room = budget - header
    # Relevance among the matches themselves (the raw ones too: a term the latest request
    # shares with every match tells nothing); a match far weaker than the best is noise.
    weights = _weights_of(query, [c.words for c in candidates])
    fresh = [(c, _held(c.words, query, weights)) for c in candidates
             if c.node_id not in in_request]
    best = max((score for _c, score in fresh), default=0.0)
    fresh = [(c, score) for c, score in fresh if score > 0 and score >= best * RELEVANCE]
    # The hits that hold the most telling terms, not the store's first ones: its ranking
    # (bm25) favours a short message holding one rare term over a long one holding them
    # all. Stable, so equals keep the store's order (deterministic for the same hits).
    fresh = sorted(fresh, key=lambda hit: -hit[1])[:MAX_HITS]
    chosen: list[tuple[Candidate, str]] = []
    for i, (cand, _) in enumerate(fresh):
        share = room // (len(fresh) - i)
        if share < MIN_HIT_TOKENS:
            break
        text = _fit(cand, query, known, share, count, weights)
        if text:
            chosen.append((cand, text))
            room -= count(_line(cand, text)) + 1
    if not chosen:
        return None
    block = render(chosen)
    while count(block) > budget and chosen:  # estimates of parts and whole differ a little
        chosen.pop()
        block = render(chosen)
    if not chosen:
        return None
    ids = tuple(c.node_id for c, _t in sorted(chosen, key=lambda h: h[0].position))
    return RecallBlock(text=block, node_ids=ids, tokens=count(block), before_id=anchor[0])


def _line(cand: Candidate, text: str) -> str:
    return render([(cand, text)]).split("\n", 1)[1]


def _fit(cand: Candidate, query: SearchQuery, known: str, tokens_: int, count: Count,
         weights: Weights | None = None) -> str:
    """The excerpt of `cand` whose line costs at most `tokens_`."""
    weights = weights if weights is not None else {t.tokens: 1.0 for t in query.terms}
    telling = _telling(cand.text, query, known, weights)  # scored once, cut to size below
    chars = tokens_ * 4
    for _ in range(6):
        text = _pick(telling, max(40, chars))
        if not text or count(_line(cand, text)) <= tokens_:
            return text
        chars = chars * 3 // 4
    return ""


def smallest_block(count: Count = estimate_text) -> int:
    """The tokens of the smallest block worth sending: the header and one excerpt."""
    return count(RECALL_HEADER) + MIN_HIT_TOKENS


@dataclass(frozen=True)
class RecallTurns:
    """SPEC Q5: the recall decisions of the user turns since one checkpoint, in the order
    they were made. A turn is decided once, at its first request under the checkpoint: its
    block (None: it got none) is then sent byte for byte by every later request until the
    next checkpoint, whichever process sends it. `full`: a turn found no room left in the
    recall budget (or the blocks had to be cut to the safe limit), a reason to compact."""

    checkpoint_id: str
    turns: tuple[tuple[str, RecallBlock | None], ...] = ()
    full: bool = False

    def decided(self, user_id: str) -> bool:
        """Has the turn of user message `user_id` been decided under this checkpoint?"""
        return any(uid == user_id for uid, _b in self.turns)

    def with_turn(self, user_id: str, block: RecallBlock | None, *,
                  full: bool = False) -> RecallTurns:
        """These decisions and one more (a turn already decided keeps its own)."""
        if self.decided(user_id):
            return self if not full or self.full else replace(self, full=True)
        return RecallTurns(self.checkpoint_id, (*self.turns, (user_id, block)),
                           self.full or full)

    def merged(self, other: RecallTurns) -> RecallTurns:
        """These decisions with `other`'s for turns not decided here (same checkpoint):
        the first decision of a turn is the one every process sends."""
        out = self
        for uid, block in other.turns:
            out = out.with_turn(uid, block)
        return replace(out, full=out.full or other.full)

    def to_json(self) -> dict[str, Any]:
        """A plain JSON value (what the store keeps, `from_json` reads it back)."""
        return {"checkpoint": self.checkpoint_id, "full": self.full,
                "turns": [[uid, None if b is None else
                           {"text": b.text, "node_ids": list(b.node_ids), "tokens": b.tokens}]
                          for uid, b in self.turns]}

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> RecallTurns | None:
        """`to_json`'s value read back; None when it is not one (absent, or damaged: a
        missing record only costs the next turns their blocks, never a request)."""
        try:
            if not isinstance(value, Mapping):
                return None
            turns: list[tuple[str, RecallBlock | None]] = []
            for uid, b in value["turns"]:
                turns.append((str(uid), None if b is None else RecallBlock(
                    text=str(b["text"]), node_ids=tuple(str(i) for i in b["node_ids"]),
                    tokens=int(b["tokens"]), before_id=str(uid))))
            return cls(str(value["checkpoint"]), tuple(turns), bool(value.get("full")))
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def blocks(self) -> tuple[RecallBlock, ...]:
        return tuple(b for _uid, b in self.turns if b is not None)


def held_blocks(turns: RecallTurns, projection: Projection) -> tuple[RecallBlock, ...]:
    """The decided blocks whose user message `projection` holds, in branch order (a block
    whose message left the branch, by an edit or a fork, is not sent)."""
    blocks = turns.blocks
    if not blocks:
        return ()
    at = anchored(projection.messages, blocks)
    n = len(projection.messages)
    return tuple(b for i, b in sorted(zip(at, blocks, strict=True), key=lambda x: x[0])
                 if i < n)


def within(blocks: tuple[RecallBlock, ...], room: int) -> tuple[RecallBlock, ...]:
    """The longest run of `blocks` from the first whose tokens fit in `room`: cut at its
    end, the cached prefix of the earlier requests stays whole up to the cut."""
    kept: list[RecallBlock] = []
    used = 0
    for b in blocks:
        if used + b.tokens > room:
            break
        kept.append(b)
        used += b.tokens
    return tuple(kept)


def undecided_needs_search(turns: RecallTurns, user_id: str, query: SearchQuery | None,
                           used: int, budget: int, room: int,
                           smallest: int) -> RecallTurns | None:
    """SPEC Q5: the decision for the new turn of user message `user_id` when it needs no
    search (None: search, then `choose_block` within `room`). The blocks since the
    checkpoint use `used` tokens of the recall `budget`: with no room left for the
    `smallest` block the turn gets none and the blocks are full (`core.sizing.fit.recall_full`,
    a reason to compact); with nothing to search for, or a request too near the safe limit
    (`room`, `core.sizing.fit.recall_room`), it gets none either."""
    if recall_full(used, budget, smallest):
        return turns.with_turn(user_id, None, full=True)
    if query is None or room < smallest:
        return turns.with_turn(user_id, None)
    return None
