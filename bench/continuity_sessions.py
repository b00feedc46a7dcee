"""Sessions for the continuity benchmark: scripted turns with typed facts planted in them.

A `ScriptedTurn` is what one user turn contains: the user's message, the tool rounds the
model makes (with the results the tools return) and the final reply. A `Fact` is a string
that a resumed agent needs verbatim, typed by category:

    recall        an exact error message, a number
    artifact      a Zotero key or DOI the user named, a file the session modified
    continuation  the next step, as last stated
    decision      what was decided and why
    constraint    a rule the user stated ("Never overwrite …")
    language      a request in the user's own language (Japanese), kept as written

Two sources: a synthetic Zotero research session built from the real Zotero records in
`tests/fixtures/zotero` (keys past the 20 real ones are drawn from Zotero's key alphabet),
and the real coding transcripts in `tests/fixtures` (Pi, Claude Code) with facts planted in
their user messages. Everything is deterministic (seeded).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextfold.core.estimator import estimate_text
from contextfold.core.identifiers import ZOTERO_KEY_ALPHABET
from contextfold.core.messages import Message
from contextfold.formats import import_file
from contextfold.replay import active_messages

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "language")


@dataclass(frozen=True)
class Fact:
    category: str
    text: str  # what must appear verbatim in the projection
    turn: int  # the turn it was planted in
    identifier: bool = False  # counted in the "identifiers" figure too


@dataclass(frozen=True)
class ToolRound:
    name: str
    arguments: dict[str, Any]
    output: str
    is_error: bool = False
    text: str = ""  # what the model says next to the call


@dataclass
class ScriptedTurn:
    user: str
    rounds: list[ToolRound] = field(default_factory=list)
    reply: str = "Done."
    facts: list[Fact] = field(default_factory=list)


@dataclass
class Session:
    name: str
    turns: list[ScriptedTurn]
    system: str

    @property
    def facts(self) -> list[Fact]:
        return [f for t in self.turns for f in t.facts]


# --------------------------------------------------------------------------- synthetic research


def _zotero_items() -> list[dict[str, Any]]:
    return [e["data"] for e in json.loads((FIXTURES / "zotero" / "items_doc.json").read_text())]


_SENTENCES = (
    "The chapter returns to the deductive method and the way the narrator frames it.",
    "Letters from the period show how the serial publication shaped the reception.",
    "The author compares stage adaptations with the printed stories in some detail.",
    "Several reviewers of the time read the detective as a figure of imperial order.",
    "The annotated editions disagree on the chronology of the early adventures.",
)


def _fulltext(rng: random.Random, key: str, title: str, target_tokens: int) -> str:
    """A tool result of about `target_tokens` (by the estimator): page text and references."""
    head = f"Full text of {key} ({title[:60]}).\n"
    refs = "References:\n" + "\n".join(
        f"[{i + 1}] doi:10.{rng.randint(1000, 9999)}/ref.{rng.randint(10_000, 99_999)}"
        for i in range(8))
    body: list[str] = []
    page = 1
    while estimate_text(head + " ".join(body) + refs, "gpt") < target_tokens:
        body.append(f"[p. {page}] " + " ".join(rng.choice(_SENTENCES) for _ in range(6)))
        page += 1
    return head + "\n".join(body) + "\n" + refs


def _key(rng: random.Random) -> str:
    return "".join(rng.choice(ZOTERO_KEY_ALPHABET) for _ in range(8))


def research_session(turns: int = 60, seed: int = 11, min_tokens: int = 2_000,
                     max_tokens: int = 6_000) -> Session:
    """A Zotero research session: every user message names one Zotero key and a DOI or a
    file path; tool results of `min_tokens`-`max_tokens` (estimated); facts of every
    category planted on a fixed schedule."""
    rng = random.Random(seed)
    items = _zotero_items()
    out: list[ScriptedTurn] = []
    for t in range(turns):
        item = items[t] if t < len(items) else {"key": _key(rng), "title": f"Item {t}"}
        key, title = item["key"], item.get("title") or f"Item {t}"
        facts = [Fact("artifact", key, t, identifier=True)]
        if t % 2 == 0:
            doi = f"10.{rng.randint(1000, 9999)}/holmes.{t}.{rng.randint(100, 999)}"
            user = f"Please open Zotero item {key} and compare it with {doi}."
            facts.append(Fact("artifact", doi, t, identifier=True))
            path = None
        else:
            path = f"notes/review/section_{t:02d}.md"
            user = f"Please open Zotero item {key} and save your notes on it to {path}."
            facts.append(Fact("artifact", path, t, identifier=True))
        if t % 7 == 3:
            rule = f"Never overwrite drafts/chapter_{t:02d}.tex, it is the submitted version."
            user += " " + rule
            facts.append(Fact("constraint", rule, t))
        if t % 10 == 5:
            ja = f"アイテム{key}の要旨は日本語でまとめてください。"
            user += " " + ja
            facts.append(Fact("language", ja, t))
        rounds = [ToolRound("zotero_fulltext", {"item_key": key},
                            _fulltext(rng, key, title, rng.randint(min_tokens, max_tokens)))]
        if t % 5 == 2:
            error = f"Error: attachment {key}.pdf not found in storage (HTTP 404, code ZS{t:03d})"
            rounds.append(ToolRound("zotero_attachment", {"item_key": key}, error,
                                    is_error=True, text="Let me open the PDF as well."))
            facts.append(Fact("recall", error, t))
        if path is not None:
            rounds.append(ToolRound("write_file", {"path": path, "content": f"Notes on {key}."},
                                    f"wrote {path}"))
        reply = f"Read {key}: {rng.choice(_SENTENCES)}"
        if t % 4 == 1:
            number = f"{rng.randint(11, 97)}.{rng.randint(10, 99)} per cent"
            reply += f" The share of reviews citing it is {number}."
            facts.append(Fact("recall", number, t))
        if t % 6 == 4:
            decision = f"We decided to exclude film adaptations from chapter {t} because " \
                       "they are not scholarship."
            reply += " " + decision
            facts.append(Fact("decision", decision, t))
        step = f"Next I will check the references of {key} against the bibliography."
        reply += " " + step
        facts.append(Fact("continuation", step, t))
        out.append(ScriptedTurn(user=user, rounds=rounds, reply=reply, facts=facts))
    return Session(name=f"research-{turns}", turns=out,
                   system="You are a research assistant working in the user's Zotero library.")


# --------------------------------------------------------------------------- real transcripts


_WRITE_TOOLS = frozenset({"edit", "write", "multiedit", "str_replace_editor", "write_file"})


def _turns_of(messages: Sequence[Message]) -> list[ScriptedTurn]:
    """Real messages as scripted turns: the model's tool rounds and its final reply."""
    turns: list[ScriptedTurn] = []
    results: dict[str, tuple[str, bool]] = {}
    for msg in messages:
        for r in msg.tool_results:
            results[r.call_id] = (r.output or "(empty)", r.is_error)
    pending_text = ""
    for msg in messages:
        if msg.role == "user" and msg.text.strip():
            turns.append(ScriptedTurn(user=msg.text.strip(), reply=""))
            pending_text = ""
            continue
        if not turns or msg.role != "assistant":
            continue
        turn = turns[-1]
        if msg.tool_calls:
            for i, call in enumerate(msg.tool_calls):
                output, error = results.get(call.id, ("(no result recorded)", False))
                args = call.input if isinstance(call.input, dict) else {"input": call.input}
                text = (pending_text + " " + msg.text).strip() if i == 0 else ""
                turn.rounds.append(ToolRound(call.name, args, output, error, text))
            pending_text = ""
        elif msg.text.strip():
            pending_text = (pending_text + " " + msg.text).strip()
            turn.reply = pending_text
    for turn in turns:
        turn.reply = turn.reply or "(the turn ended without a final reply)"
    return turns


def _plant(turns: list[ScriptedTurn], label: str) -> None:
    """Facts in a real coding session: the files it modified (from its own tool calls),
    plus planted user rules, issue references and error codes, and the next step."""
    rng = random.Random(label)
    for t, turn in enumerate(turns):
        for r in turn.rounds:
            path = r.arguments.get("path") or r.arguments.get("file_path")
            written = r.name.lower() in _WRITE_TOOLS and not r.is_error
            if written and isinstance(path, str) and path not in {f.text for f in turn.facts}:
                turn.facts.append(Fact("artifact", path, t, identifier=True))
        if t % 6 == 2:
            ref = f"PR #{rng.randint(100, 9999)}"
            turn.user += f" (This is tracked in {ref}.)"
            turn.facts.append(Fact("artifact", ref.split()[1], t, identifier=True))
        if t % 9 == 4:
            rule = f"Never overwrite config/release_{t:03d}.json, it is generated by CI."
            turn.user += " " + rule
            turn.facts.append(Fact("constraint", rule, t))
        if t % 8 == 6:
            code = f"E0{rng.randint(100, 999)}"  # a rustc-style diagnostic code
            sentence = f"The failing check reported error[{code}] last night."
            turn.user += " " + sentence
            turn.facts.append(Fact("recall", code, t, identifier=True))
        step = f"Next I will rerun the checks for step {t}."
        turn.reply += "\n\n" + step  # its own paragraph: real replies may end mid-sentence
        turn.facts.append(Fact("continuation", step, t))


def real_session(name: str, max_turns: int = 60) -> Session:
    """A real transcript from tests/fixtures (`pi` or `claude-code`), with facts planted."""
    if name == "pi":
        path = FIXTURES / "pi-mono" / "large-session.jsonl"
    else:
        path = FIXTURES / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    result = import_file(path)
    messages = [m for _, m in active_messages(result.nodes, result.leaf_id)]
    turns = _turns_of(messages)[:max_turns]
    _plant(turns, name)
    return Session(name=f"{name}-{len(turns)}", turns=turns,
                   system="You are a coding agent working in the user's repository.")


# --------------------------------------------------------------------------- long user prose

# Word pools for prose that never repeats a sentence (issue 27: a session built from a few
# repeated sentences compresses unrealistically well). Deliberately free of the words the
# summariser reads as rules, decisions or plans, so only the planted sentences are those.
_SUBJECTS = ("the narrator", "the second edition", "the serial version", "the archive copy",
             "the preface", "the first reviewer", "the stage script", "the translator",
             "the index", "the appendix", "the manuscript", "the frontispiece")
_VERBS = ("describes", "omits", "reframes", "quotes", "contradicts", "dates", "annotates",
          "revises", "echoes", "cites", "mislabels", "compresses")
_OBJECTS = ("the deductive method", "the London fog", "the Baker Street rooms",
            "the Reichenbach episode", "the colonial subplot", "the violin passages",
            "the cocaine references", "the Irregulars", "the final bow", "the dog at night",
            "the speckled band", "the five pips")
_TAILS = ("in a footnote", "across two chapters", "with a marginal sketch", "in passing",
          "at unusual length", "with a date that conflicts", "in the closing paragraph",
          "without attribution", "in a revised table", "in the printer's proof")
_JA_SUBJECTS = ("語り手は", "第二版は", "連載版は", "序文は", "翻訳者は", "索引は", "付録は",
                "原稿は")
_JA_OBJECTS = ("推理の方法を", "ロンドンの霧を", "ベイカー街の部屋を", "ライヘンバッハの場面を",
               "植民地の挿話を", "バイオリンの場面を", "最後の挨拶を", "まだらの紐を")
_JA_VERBS = ("詳しく描いている。", "省略している。", "言い換えている。", "引用している。",
             "脚注で触れている。", "別の日付で記している。", "短くまとめている。",
             "書き直している。")
_CODE_NAMES = ("parse", "collect", "score", "align", "merge", "rank", "clean", "count")
_CODE_OBJECTS = ("citations", "editions", "reviews", "quotes", "dates", "chapters", "notes")


def _prose_sentence(rng: random.Random, n: int) -> str:
    return (f"In note {n}, {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} "
            f"{rng.choice(_OBJECTS)} {rng.choice(_TAILS)} (page {rng.randint(1, 480)}).")


def _ja_sentence(rng: random.Random, n: int) -> str:
    return (f"メモ{n}：{rng.choice(_JA_SUBJECTS)}{rng.randint(1, 480)}ページで"
            f"{rng.choice(_JA_OBJECTS)}{rng.choice(_JA_VERBS)}")


def _code_block(rng: random.Random, n: int) -> str:
    name = f"{rng.choice(_CODE_NAMES)}_{rng.choice(_CODE_OBJECTS)}_{n}"
    lines = [f"def {name}(rows):"]
    for i in range(rng.randint(3, 7)):
        lines.append(f"    rows = [r for r in rows if r.get('v{i}', 0) > {rng.randint(1, 99)}]")
    lines.append(f"    return sorted(rows, key=lambda r: r['k{rng.randint(0, 9)}'])")
    return "```python\n" + "\n".join(lines) + "\n```"


class _Prose:
    """Non-repeating user prose: numbered sentences (English or Japanese) and code blocks."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0

    def paragraph(self, target_tokens: int, planted: Sequence[str] = ()) -> str:
        """About `target_tokens` (estimated) of prose with `planted` sentences in the middle."""
        parts: list[str] = []
        planted_at = max(1, target_tokens // 3)  # well inside the message, not at its ends
        placed = False
        while True:
            text = " ".join(parts)
            size = estimate_text(text, "gpt")
            if not placed and size >= planted_at:
                parts.extend(planted)
                placed = True
            if size >= target_tokens and placed:
                return text
            self.n += 1
            kind = self.rng.random()
            if kind < 0.15:
                parts.append("\n\n" + _code_block(self.rng, self.n) + "\n\n")
            elif kind < 0.40:
                parts.append(_ja_sentence(self.rng, self.n))
            else:
                parts.append(_prose_sentence(self.rng, self.n))


def long_research_session(turns: int = 80, seed: int = 27, min_user: int = 1_000,
                          max_user: int = 3_000, min_tool: int = 2_000,
                          max_tool: int = 6_000) -> Session:
    """Issue 27's session: user messages of `min_user`-`max_user` tokens (English, Japanese
    and code, never repeating), tool results of `min_tool`-`max_tool`; planted once each,
    early and inside long user messages: a constraint, a Japanese instruction, a decision
    stated in passing, a next step naming two Zotero keys; a tool error and a written file.
    """
    rng = random.Random(seed)
    prose = _Prose(rng)
    items = _zotero_items()
    keys = [items[i]["key"] if i < len(items) else _key(rng) for i in range(turns)]
    a, b = keys[1], keys[2]
    planted: dict[int, list[Fact]] = {
        1: [Fact("constraint", "Never cite a source we have not opened in Zotero ourselves.", 1)],
        2: [Fact("decision", "We decided to use close reading of the serial version as our "
                 "method because the later editions were revised by the printer.", 2)],
        3: [Fact("language", "参考文献リストは必ず日本語の書誌形式で書いてください。", 3)],
        4: [Fact("continuation", f"Next step: compare {a} against {b} on how each dates the "
                 "Reichenbach episode.", 4),
            Fact("artifact", a, 4, identifier=True), Fact("artifact", b, 4, identifier=True)],
    }
    out: list[ScriptedTurn] = []
    for t in range(turns):
        key = keys[t]
        facts = list(planted.get(t, []))
        said = [f.text for f in facts if f.category != "artifact"]
        body = prose.paragraph(rng.randint(min_user, max_user), said)
        user = f"Zotero item {key} today. {body}"
        rounds = [ToolRound("zotero_fulltext", {"item_key": key},
                            _fulltext(rng, key, f"Item {t}", rng.randint(min_tool, max_tool)))]
        if t == 5:
            error = f"Error: attachment {key}.pdf not found in storage (HTTP 404, code ZS{t:03d})"
            rounds.append(ToolRound("zotero_attachment", {"item_key": key}, error,
                                    is_error=True, text="Let me open the PDF as well."))
            facts.append(Fact("recall", error, t))
        if t == 6:
            path = "notes/review/serial_versions.md"
            rounds.append(ToolRound("write_file", {"path": path, "content": "Serial notes."},
                                    f"wrote {path}"))
            facts.append(Fact("artifact", path, t, identifier=True))
        reply = f"Read {key}: {_prose_sentence(rng, 10_000 + t)}"
        out.append(ScriptedTurn(user=user, rounds=rounds, reply=reply, facts=facts))
    return Session(name=f"long-research-{turns}", turns=out,
                   system="You are a research assistant working in the user's Zotero library.")
