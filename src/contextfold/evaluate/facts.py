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

and, from the natural rules (`evaluate.rules`: hand-written, no cue word), the rule kinds
`action`, `information`, `process`, `preference` and `output` (`RULE_KINDS`).

`source` says where it was planted (the user's prose, a tool's result, the model's reply)
and `question` is how a later user message asks about it without quoting it (the probe of
`contextfold eval`; empty for the benchmark's sessions, which probe by presence only).
`stated` says where in the session its user turn stands, for the turns `contextfold eval`
reports by position (`STATED`): the first user message, a middle one, the latest one when
the first compaction runs; empty for every other turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .rules import RULE_KINDS

CATEGORIES = ("recall", "artifact", "continuation", "decision", "constraint", "language")
KINDS = (*CATEGORIES, *RULE_KINDS)  # what `contextfold eval` reports retention by
SOURCES = ("user", "tool")
STATED = ("first", "middle", "latest")


@dataclass(frozen=True)
class Fact:
    """One planted fact: its category, verbatim text and the turn it was planted in."""

    category: str
    text: str  # what must appear verbatim in the request
    turn: int  # the turn it was planted in
    identifier: bool = False  # counted in the "identifiers" figure too
    source: str = "user"  # user | tool | assistant: where it was planted
    question: str = ""  # a later question about it that does not quote it
    stated: str = ""  # first | middle | latest (see the module doc), else empty


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
