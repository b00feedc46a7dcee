"""What a planted session is made of: scripted turns and the typed facts planted in them.

A `ScriptedTurn` is what one user turn contains: the user's message, the tool rounds the
model makes (with the results the tools return) and the final reply. A `Fact` is a string a
resumed agent needs verbatim, typed by category:

    recall        an exact error message, a number
    artifact      a Zotero key or DOI the user named, a file the session wrote
    continuation  the next step, as last stated
    decision      what was decided and why
    constraint    a rule the user stated ("Never overwrite …")
    language      a request in the user's own language (Japanese), kept as written

`source` says where it was planted (the user's prose, a tool's result, the model's reply)
and `question` is how a later user message asks about it without quoting it (the probe of
`contextfold eval`; empty for the benchmark's sessions, which probe by presence only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "language")
SOURCES = ("user", "tool")


@dataclass(frozen=True)
class Fact:
    """One planted fact: its category, verbatim text and the turn it was planted in."""

    category: str
    text: str  # what must appear verbatim in the request
    turn: int  # the turn it was planted in
    identifier: bool = False  # counted in the "identifiers" figure too
    source: str = "user"  # user | tool | assistant: where it was planted
    question: str = ""  # a later question about it that does not quote it


@dataclass(frozen=True)
class ToolRound:
    """One tool call of a turn and the result its tool returns."""

    name: str
    arguments: dict[str, Any]
    output: str
    is_error: bool = False
    text: str = ""  # what the model says next to the call


@dataclass
class ScriptedTurn:
    """One user turn: the user's message, the model's tool rounds and its final reply."""

    user: str
    rounds: list[ToolRound] = field(default_factory=list)
    reply: str = "Done."
    facts: list[Fact] = field(default_factory=list)


@dataclass
class Session:
    """A scripted session: its turns (facts planted in them) and its system prompt."""

    name: str
    turns: list[ScriptedTurn]
    system: str

    @property
    def facts(self) -> list[Fact]:
        return [f for t in self.turns for f in t.facts]
