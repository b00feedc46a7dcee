"""The continuity benchmark's synthetic sessions (bench/continuity.py, tests).

`research_session`: a Zotero research session, every user message naming one Zotero key and
a DOI or a file path, tool results of 2-6k tokens, facts of every category planted on a
fixed schedule (decisions and next steps in the model's replies). `long_research_session`:
issue 27's session, long user prose with a constraint, a Japanese instruction, a decision
and a next step planted once each, early; a tool error and a written file.
"""

from __future__ import annotations

import random

from .facts import Fact, ScriptedTurn, Session, ToolRound
from .material import SENTENCES, Prose, fulltext, prose_sentence, zotero_items, zotero_key


def research_session(turns: int = 60, seed: int = 11, min_tokens: int = 2_000,
                     max_tokens: int = 6_000) -> Session:
    """A Zotero research session: every user message names one Zotero key and a DOI or a
    file path; tool results of `min_tokens`-`max_tokens` (estimated); facts of every
    category planted on a fixed schedule."""
    rng = random.Random(seed)
    items = zotero_items()
    out: list[ScriptedTurn] = []
    for t in range(turns):
        item = items[t] if t < len(items) else {"key": zotero_key(rng), "title": f"Item {t}"}
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
                            fulltext(rng, key, title, rng.randint(min_tokens, max_tokens)))]
        if t % 5 == 2:
            error = f"Error: attachment {key}.pdf not found in storage (HTTP 404, code ZS{t:03d})"
            rounds.append(ToolRound("zotero_attachment", {"item_key": key}, error,
                                    is_error=True, text="Let me open the PDF as well."))
            facts.append(Fact("recall", error, t))
        if path is not None:
            rounds.append(ToolRound("write_file", {"path": path, "content": f"Notes on {key}."},
                                    f"wrote {path}"))
        reply = f"Read {key}: {rng.choice(SENTENCES)}"
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


def long_research_session(turns: int = 80, seed: int = 27, min_user: int = 1_000,
                          max_user: int = 3_000, min_tool: int = 2_000,
                          max_tool: int = 6_000) -> Session:
    """Issue 27's session: user messages of `min_user`-`max_user` tokens (English, Japanese
    and code, never repeating), tool results of `min_tool`-`max_tool`; planted once each,
    early and inside long user messages: a constraint, a Japanese instruction, a decision
    stated in passing, a next step naming two Zotero keys; a tool error and a written file.
    """
    rng = random.Random(seed)
    prose = Prose(rng)
    items = zotero_items()
    keys = [items[i]["key"] if i < len(items) else zotero_key(rng) for i in range(turns)]
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
                            fulltext(rng, key, f"Item {t}", rng.randint(min_tool, max_tool)))]
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
        reply = f"Read {key}: {prose_sentence(rng, 10_000 + t)}"
        out.append(ScriptedTurn(user=user, rounds=rounds, reply=reply, facts=facts))
    return Session(name=f"long-research-{turns}", turns=out,
                   system="You are a research assistant working in the user's Zotero library.")
