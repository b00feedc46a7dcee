"""What one `Mirror.sync` returns (SPEC Y1, Y2): where the client's messages are stored, and
the request to send instead, message by message (`Synced.items`).

A face walks `items()` to build its provider's request: the checkpoint and pins prefix, each
turn's automatic recall block and pin notes (SPEC L5, Q5, N1), then the projected tail, with
every message the client sent as it came marked `verbatim` (the face may forward its own
bytes). A request that is the client's list unchanged says so (`as_sent`), and is forwarded
without the walk.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from ..core.models.budget import Budget, ModelCapacity
from ..core.sizing.estimator import Estimate
from ..core.values.messages import Message, Node, TextPart
from ..core.view.masking import MaskedNode
from ..core.view.projection import Projection, prefix_text
from ..providers.base import ToolSpec
from .compaction import CompactionOutcome
from .driver import Tools


class ProjectedItem(NamedTuple):
    """One message of the request to send, in order.

    `index`: position in the messages given to `sync` (None for the checkpoint and pins
    prefix, and for the recall block, SPEC L5, which has `recall` set). `verbatim`: the
    message is what the client sent, so a face may forward its own object or bytes;
    otherwise send `message` (masked or clipped by the projection, V1/K6). (A named tuple:
    one is made per message of every request.)
    """

    index: int | None
    message: Message
    verbatim: bool
    # A note contextfold puts right before a message: its turn's automatic recall block
    # (SPEC L5) or a pin note, where a pin or unpin since the checkpoint happened (N1, Q5).
    recall: bool = False


@dataclass(frozen=True)
class Synced:
    """The outcome of one `sync`: where the messages are stored and what to send."""

    session_id: str
    messages: tuple[Message, ...]
    hashes: tuple[str, ...]
    node_ids: tuple[str, ...]  # the stored node of each message given
    projection: Projection
    estimate: Estimate
    budget: Budget
    capacity: ModelCapacity
    compactions: tuple[CompactionOutcome, ...] = ()
    appended: int = 0  # messages stored by this call (the rest were stored before)
    moved: str | None = None  # None, "append", "branch" (a difference) or "switch"
    created: bool = False  # a new session was started for these messages
    # The client's own recall tools (`contextfold mcp`'s, under its names): the checkpoint's
    # recall note names them (SPEC L6).
    recall_tools: tuple[str, str] | None = None
    # `Mirror(defer=True)`: the new user message, not stored yet (its node, named and
    # projected): it is stored with the reply, in the reply's transaction, or alone when
    # no reply comes (`no_reply`).
    deferred: Node | None = None
    chain_scope: str = "default"  # the scope its hashes were made in

    @cached_property
    def source_index(self) -> Mapping[str, int]:
        """Node id -> the position of its message in the messages given (made when
        `items()` needs it: a request sent as it came never does)."""
        return dict(zip(self.node_ids, range(len(self.node_ids)), strict=True))

    @property
    def prefix_text(self) -> str | None:
        """The checkpoint summary and pins as one text, byte-identical for the same
        checkpoint, pins and recall tools (SPEC Y4); None without a checkpoint or pins."""
        return prefix_text(self.projection, self.recall_tools)

    def as_sent(self) -> bool:
        """Is the request the client's own list, every message as it came and in order? (No
        checkpoint, pins, clips or recall block, and the projection is the stored nodes of
        the messages given.) A face then forwards the client's messages without walking
        `items()` (issue 26: that walk was linear in the history on every request).

        The projected nodes and `node_ids` both lie on the branch's one path from its root
        to its leaf, and without a checkpoint the projection holds every message node of it;
        the same count with the same first and last node is the same sequence."""
        p = self.projection
        if p.checkpoint is not None or p.sent_pins or p.pin_notes or p.clips or p.recalled:
            return False
        nodes, ids = p.messages, self.node_ids
        return len(nodes) == len(ids) > 0 and nodes[0].id == ids[0] and \
            nodes[-1].id == ids[-1]

    @property
    def tail_start(self) -> int | None:
        """Index of the first message sent from the client's list (None: nothing is)."""
        for item in self.items():
            if item.index is not None:
                return item.index
        return None

    @property
    def leaf_hash(self) -> str | None:
        return self.hashes[-1] if self.hashes else None

    def items(self) -> list[ProjectedItem]:
        """The request's messages: a provider's own compaction the checkpoint starts from
        (SPEC Y7), the prefix (if any), then the projected tail."""
        out: list[ProjectedItem] = []
        if self.projection.summary is not None:
            out += [ProjectedItem(None, m, False) for m in self.projection.summary.provider_base]
        joinable = -1  # the prefix message, which the recall block may join
        text = self.prefix_text
        if text is not None:
            out.append(ProjectedItem(None, Message(role="user", parts=(TextPart(text=text),)),
                                     False))
            joinable = len(out) - 1
        projection = self.projection
        clips, index_of = projection.clips, self.source_index

        def add_notes(before: str | None) -> None:
            # SPEC L5, Q5: a pin note where it happened, and its turn's recall block, each
            # its own user-side message right before the message (there in every later
            # request until the next checkpoint); one right after the prefix or another
            # note joins that message (two user messages in a row are not a valid
            # Messages request), never a provider's compaction (SPEC Y7: that message goes
            # back to its provider as it came).
            for text in projection.notes_before(before):
                block = TextPart(text=text)
                if out and (len(out) - 1 == joinable or out[-1].recall):
                    last = out[-1]
                    out[-1] = ProjectedItem(None, last.message.model_copy(
                        update={"parts": (*last.message.parts, block)}), False, last.recall)
                else:
                    out.append(ProjectedItem(None, Message(role="user", parts=(block,)),
                                             False, recall=True))

        for node in projection.messages:
            add_notes(node.id)
            index = index_of.get(node.id)
            if node.id in clips:  # SPEC K6: a clipped copy differs from the stored node
                out.append(ProjectedItem(index, projection.message_of(node), False))
                continue
            # The stored node has the client's message content (same chain hash); only a
            # masked (V1) projection copy differs from it.
            out.append(ProjectedItem(index, node.payload,  # type: ignore[arg-type]
                                     index is not None and not isinstance(node, MaskedNode)))
        # A pin note after the client's latest message (a pin that raced the request) goes
        # out with the next request, before the message after it: after this request's
        # content, so no cached prefix breaks (SPEC Q5), and never a second user message
        # in a row.
        return out



def tool_names(tools: Tools) -> list[str]:
    """The names of a request's tools (ToolSpecs, Anthropic tools, OpenAI functions)."""
    names = []
    for tool in tools:
        if isinstance(tool, ToolSpec):
            names.append(tool.name)
        elif isinstance(tool, Mapping):
            inner = tool.get("function")
            name = (inner if isinstance(inner, Mapping) else tool).get("name")
            if isinstance(name, str):
                names.append(name)
    return names
