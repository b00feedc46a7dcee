"""Probing one fact: the request its question goes out with, and whether that holds the fact.

A probe puts the fact's question after the session as the next user message (in memory: the
stored session never sees it), lets automatic recall (SPEC L5, `runtime.auto_recall`) add
its block exactly as `Conversation` and the mirror do before a request, and exports the
request as the provider would receive it. The fact counts as continued when its exact text
is in that request (the checkpoint summary and its ledger, the recall block, the raw
messages), and separately as kept by the checkpoint when the checkpoint message alone holds
it. A fact the user stated is also checked against SPEC S8's promise: in the checkpoint, or
its message named there by node id (a statement clipped or not carried is named so that
recall can fetch it whole).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..core.values.messages import Node, text_message
from ..core.values.tool_calls import tool_arguments
from ..core.view.projection import Projection, checkpoint_text
from ..formats.request import export_session
from ..runtime.auto_recall import AutoRecall
from ..runtime.sizing import Sizer
from .facts import Fact

PROBE_NODE = "eval-probe"  # the id of the question's node (never stored)


@dataclass(frozen=True)
class ProbeResult:
    """One fact probed after a compaction."""

    fact: Fact
    in_request: bool  # in the request the question goes out with (L5 included)
    in_checkpoint: bool  # in the checkpoint message (summary and ledger)
    in_recall_block: bool  # in the automatic recall block of that request
    named: bool = False  # the checkpoint names the user message that stated it (S8)

    @property
    def in_checkpoint_or_named(self) -> bool:
        return self.in_checkpoint or self.named

    def to_json(self) -> dict[str, Any]:
        return {"category": self.fact.category, "source": self.fact.source,
                "turn": self.fact.turn, "stated": self.fact.stated or None,
                "text": self.fact.text, "in_request": self.in_request,
                "in_checkpoint": self.in_checkpoint, "in_recall_block": self.in_recall_block,
                "named": self.named}


def strings(value: Any) -> Iterable[str]:
    """Every string of a request body (contents, tool arguments, system prompt), in order;
    a tool call's JSON arguments are read as the values they hold."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "arguments" and isinstance(item, str):
                item = tool_arguments(item)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def request_text(projection: Projection, system: str | None = None) -> str:
    """The request `projection` makes, as text: every string of its OpenAI body."""
    return "\n".join(strings(export_session(projection, format="openai", system=system)))


def with_question(projection: Projection, question: str) -> Projection:
    """`projection` with `question` as the next user message."""
    # One id per question: automatic recall decides a turn once per user message id
    # (SPEC Q5), and every probe is a turn of its own.
    digest = hashlib.sha256(question.encode()).hexdigest()[:16]
    node = Node(id=f"{PROBE_NODE}-{digest}", payload=text_message("user", question))
    return replace(projection, messages=(*projection.messages, node))


async def probe(fact: Fact, projection: Projection, recall: AutoRecall, session_id: str,
                sizer: Sizer, node_id: str | None = None) -> ProbeResult:
    """Ask `fact.question` after `projection`; is the fact in the request it goes out with?
    `node_id` is the message that stated it, when the user did (is it named?)."""
    asked = await recall.apply(session_id, with_question(projection, fact.question), sizer,
                               hypothetical=True)
    sent = request_text(asked, sizer.system)
    block = "\n".join(b.text for b in asked.recalled)
    held = checkpoint_text(projection.summary) if projection.summary is not None else ""
    return ProbeResult(fact, in_request=fact.text in sent, in_checkpoint=fact.text in held,
                       in_recall_block=fact.text in block,
                       named=bool(node_id) and str(node_id) in held)
