"""The model projection: latest checkpoint summary, the kept tail in place, then what followed.

SPEC T2-T4: the tail is read where it stands in the tree (never copied), only the latest
checkpoint on the chain is projected, and older checkpoints never add to the context.
The active pins follow the checkpoint (SPEC N1, `pins.py`); tool results before the
checkpoint's `masked_before_id` are projected as placeholders (SPEC V1, `masking.py`).

Size: the projection and the texts it puts into the request (ledger, recall block, turn context,
checkpoint frame) are held whole until the core's regrouping (issue 39) moves the rendering to
its own subject; only the script moving `core/` may split it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..text.text_estimate import estimate_text, text_cost
from ..values.messages import (
    USER_CONSTRAINT,
    Checkpoint,
    Ledger,
    Message,
    Node,
    Pin,
    ProviderCompactionPart,
    ToolResultPart,
    TurnContext,
)
from ..values.resources import clip_middle
from ..values.tree import GROWN_FROM, Branch
from .masking import MASKING_NOTE, apply_mask
from .pins import active_pins, pins_text

SUMMARY_HEADER = (
    "[contextfold checkpoint] The earlier part of this conversation was compacted. "
    "This is a structured summary of it; the messages after it continue verbatim."
)
# A masking step with no summary yet (SPEC V1): nothing was summarised, only masked.
MASK_ONLY_HEADER = (
    "[contextfold checkpoint] Nothing of this conversation was summarised; the messages "
    "after this note continue verbatim."
)


@dataclass(frozen=True)
class RecallBlock:
    """SPEC L5: excerpts of folded messages for one user turn (`core.recall.auto_recall` chooses
    them): the text, the nodes it quotes, its size, and the projected message it goes
    right before (that turn's user message, whose words found them). SPEC Q5: once sent,
    it stays there, byte for byte, in every later request until the next checkpoint."""

    text: str
    node_ids: tuple[str, ...]
    tokens: int
    before_id: str


PIN_NOTE_UNPINNED = "[contextfold pins] The user unpinned pin {n}; it no longer applies."


@dataclass(frozen=True)
class PinNote:
    """SPEC N1 with Q5: a pin or an unpin since the checkpoint, sent where it happened:
    right before the first user message that followed it and answers no tool call
    (`before_id`, `opens_turn`; None: none followed yet, it waits for one). The prefix
    (checkpoint and the pins it carries) stays byte for byte
    until the next checkpoint, which shows the pins active then."""

    text: str
    before_id: str | None
    tokens: int


def anchored(messages: tuple[Node, ...],
             blocks: tuple[RecallBlock, ...] | tuple[PinNote, ...]) -> list[int]:
    """The index in `messages` each of `blocks` goes right before (`len(messages)`: its
    message is not there). Scanned from the end, where a session's blocks are, and only
    until all are found: a request must not walk a long history for them."""
    wanted = {b.before_id for b in blocks if b.before_id is not None}
    found: dict[str, int] = {}
    for i in range(len(messages) - 1, -1, -1):
        if len(found) == len(wanted):
            break
        if messages[i].id in wanted:
            found[messages[i].id] = i
    return [len(messages) if b.before_id is None else found.get(b.before_id, len(messages))
            for b in blocks]


@dataclass(frozen=True)
class Projection:
    """What the next request contains, besides the system prompt and tools."""

    checkpoint: Node | None
    messages: tuple[Node, ...]
    # Index into `messages` where the nodes written after the checkpoint begin: only their
    # usage reflects a request that contained the current summary (SPEC E1).
    after_checkpoint: int = 0
    # Active pins (SPEC N1).
    pins: tuple[Pin, ...] = ()
    # SPEC Q5: the pins the prefix shows, right after the checkpoint summary: those the
    # checkpoint carries (None: `pins`, for a projection built by hand). A pin event since
    # the checkpoint is a `PinNote` where it happened instead.
    prefix_pins: tuple[Pin, ...] | None = None
    pin_notes: tuple[PinNote, ...] = ()
    # SPEC K6: node id -> characters kept per tool result, for a kept round too big for the
    # tail budget. Exports and estimates apply it; the durable node stays whole.
    clips: Mapping[str, int] = field(default_factory=dict)
    # SPEC L5, Q5: the recall blocks of the turns since the checkpoint, in branch order,
    # each right before its turn's user message (`runtime.auto_recall` adds them; a turn's
    # block stays until the next checkpoint, so the projection only grows at its end).
    recalled: tuple[RecallBlock, ...] = ()

    @property
    def sent_pins(self) -> tuple[Pin, ...]:
        """The pins the prefix shows (SPEC N1, Q5)."""
        return self.pins if self.prefix_pins is None else self.prefix_pins

    def notes_before(self, node_id: str | None) -> tuple[str, ...]:
        """The texts sent right before message `node_id` (None: after the last message):
        the pin notes there (SPEC Q5), then the recall block of its turn (SPEC L5)."""
        texts = [n.text for n in self.pin_notes if n.before_id == node_id]
        block = self.recall_at.get(node_id) if node_id is not None else None
        if block is not None:
            texts.append(block.text)
        return tuple(texts)

    @property
    def recall_at(self) -> Mapping[str, RecallBlock]:
        """The recall blocks by the id of the message each goes right before."""
        return {b.before_id: b for b in self.recalled}

    @property
    def recall_tokens(self) -> int:
        """The tokens of all the recall blocks (as `RecallBlock.tokens` counted them)."""
        return sum(b.tokens for b in self.recalled)

    def message_of(self, node: Node) -> Message:
        """The message of `node` as this projection sends it (clipped if so decided)."""
        msg = node.payload
        assert isinstance(msg, Message)
        limit = self.clips.get(node.id)
        return msg if limit is None else clip_tool_results(msg, limit)

    @property
    def summary(self) -> Checkpoint | None:
        return self.checkpoint.checkpoint if self.checkpoint is not None else None

    @property
    def message_count(self) -> int:
        return len(self.messages)


def prefix_text(projection: Projection, recall_tools: tuple[str, str] | None = None
                ) -> str | None:
    """The checkpoint summary and the pins (SPEC N1) as one user message's text,
    byte-identical for the same checkpoint and pins (None: neither). Every face sends this
    text before the tail; the recall blocks (SPEC L5) are not part of it: each goes right
    before its turn's user message, so a new block never changes the cached prefix (Q5).
    `recall_tools`: the client's own names of the recall tools (SPEC L6, `checkpoint_text`)."""
    blocks = []
    text = checkpoint_text(projection.summary, recall_tools) if projection.summary else ""
    if text:  # "" for a checkpoint that is only a provider's compaction (SPEC Y7)
        blocks.append(text)
    if projection.sent_pins:
        blocks.append(pins_text(projection.sent_pins))
    return "\n\n".join(blocks) if blocks else None


def fixed_part(projection: Projection) -> Projection:
    """What of `projection` no compaction shrinks: its pins (SPEC N1) and a provider's own
    compaction (SPEC Y7), without the history. Estimated with the system prompt, tools and
    drafts, it is the floor of every request."""
    cp = projection.summary
    if cp is None or not cp.provider_base:
        return Projection(checkpoint=None, messages=(), pins=projection.pins)
    assert projection.checkpoint is not None
    base = Node(id=f"{projection.checkpoint.id}:provider-base", payload=Checkpoint(
        summary="", first_kept_id=None, tokens_before=0, provider_base=cp.provider_base))
    return Projection(checkpoint=base, messages=(), pins=projection.pins)


def raw_start(branch: Branch) -> int:
    """Index in `branch.nodes` where raw (unsummarised) history starts.

    After a checkpoint with `first_kept_id`, that node; after one with nothing kept raw
    (SPEC K3), the node after the checkpoint; with no checkpoint, the beginning.
    """
    ci = branch.latest_checkpoint_index
    if ci is None:
        return 0
    cp = branch.nodes[ci].checkpoint
    assert cp is not None
    if cp.first_kept_id is None:
        return ci + 1
    # Scan back from the checkpoint: the kept tail is near it, so this costs O(tail),
    # not O(history) as a full index of the branch would.
    for i in range(ci - 1, -1, -1):
        if branch.nodes[i].id == cp.first_kept_id:
            return i
    raise ValueError(f"first_kept_id {cp.first_kept_id!r} is not on the branch")


def provider_compaction_index(branch: Branch) -> int | None:
    """Index in `branch.nodes` of the latest message holding a provider's own compaction
    (SPEC Y7) that no checkpoint has taken up yet (None: there is none)."""
    return _derived(branch, "_provider_compaction_index", _provider_compaction_index,
                    _provider_compaction_grown)


def _provider_compaction_grown(before: int | None, branch: Branch, start: int) -> int | None:
    if any(_has_provider_compaction(n) for n in branch.nodes[start:]):
        return _provider_compaction_index(branch)
    return before


def _has_provider_compaction(node: Node) -> bool:
    msg = node.message
    return msg is not None and any(isinstance(p, ProviderCompactionPart) for p in msg.parts)


def _provider_compaction_index(branch: Branch) -> int | None:
    stop = branch.latest_checkpoint_index
    for i in range(len(branch.nodes) - 1, -1 if stop is None else stop, -1):
        msg = branch.nodes[i].message
        if msg is not None and any(isinstance(p, ProviderCompactionPart) for p in msg.parts):
            return i
    return None


def provider_base(branch: Branch, index: int) -> tuple[Message, ...]:
    """What the provider of the compaction at `index` needs first (SPEC Y7): Anthropic
    accepts its block only as the conversation's first block, so its message from that
    block on; so too OpenAI's in-call compaction (`context_management`: the item opens a
    response, the model's output follows it), before which OpenAI's guide drops every item.
    A compaction item alone (the window `/responses/compact` returned) keeps the items that
    window kept before it: the projected messages up to and including it."""
    msg = branch.nodes[index].message
    assert msg is not None
    at = next(i for i, p in enumerate(msg.parts) if isinstance(p, ProviderCompactionPart))
    part = msg.parts[at]
    assert isinstance(part, ProviderCompactionPart)
    if part.provider == "anthropic" or len(msg.parts) > at + 1:
        return (msg.model_copy(update={"parts": msg.parts[at:], "usage": None}),)
    # The provider compacted everything the client held before its item: an earlier
    # checkpoint's summary (or provider base) is superseded by it.
    return tuple(n.message.model_copy(update={"usage": None})
                 for n in branch.nodes[raw_start(branch):index + 1] if n.message is not None)


_NOTHING = object()


def _derived(branch: Branch, key: str, derive: Callable[[Branch], Any],
             grown: Callable[[Any, Branch, int], Any]) -> Any:
    """`derive(branch)`, kept on `branch`; for a branch `Branch.grown` made from one whose
    value was known, `grown(that value, branch, where the new nodes start)`."""
    known = branch.__dict__
    value = known.get(key, _NOTHING)
    if value is _NOTHING:
        handed = known.get(GROWN_FROM, {}).get(key)
        value = derive(branch) if handed is None else grown(handed[1], branch, handed[0])
        known[key] = value
    return value


def project(branch: Branch) -> Projection:
    """Derive the projection of a healthy branch (kept on the branch: a branch is
    immutable, and one grown at its leaf by messages extends its parent's projection)."""
    return _derived(branch, "_projection", _project, _project_grown)


def _project_grown(before: Projection, branch: Branch, start: int) -> Projection:
    # `Branch.grown` hands on only when the new nodes are all messages: they follow the
    # checkpoint, the pins and the mask, so they are projected as they are, after the rest
    # (a pin note that went last now goes right before the first of them).
    new = branch.nodes[start:]
    notes = before.pin_notes
    opener = next((n.id for n in new if opens_turn(n)), None)
    if opener is not None and any(n.before_id is None for n in notes):
        notes = tuple(replace(n, before_id=opener) if n.before_id is None else n
                      for n in notes)
    return replace(before, messages=(*before.messages, *new), pin_notes=notes)


def pin_notes(nodes: Sequence[Node], start: Sequence[Pin],
              count: Callable[[str], int] = estimate_text) -> tuple[PinNote, ...]:
    """SPEC N1 with Q5: the pin events of `nodes` (after the checkpoint, whose pins are
    `start`) as notes where they happened, each numbered as the pins message numbers them
    (the checkpoint's pins first, then each new pin in turn). An event that changes nothing
    (a pin already active, an unpin of none) has no note."""
    numbers = {p.pin_id: n for n, p in enumerate(start, 1)}
    active = set(numbers)
    notes: list[tuple[str, int]] = []  # text, index in `nodes` of the event
    for i, node in enumerate(nodes):
        event = node.pin_event
        if event is None:
            continue
        if event.action == "pin" and event.pin_id not in active:
            active.add(event.pin_id)
            numbers[event.pin_id] = len(numbers) + 1
            notes.append((pins_text([Pin(pin_id=event.pin_id, text=event.text,
                                         source_id=event.source_id)]).replace(
                "[pin 1]", f"[pin {numbers[event.pin_id]}]", 1), i))
        elif event.action == "unpin" and event.pin_id in active:
            active.discard(event.pin_id)
            notes.append((PIN_NOTE_UNPINNED.format(n=numbers[event.pin_id]), i))
    out = []
    for text, i in notes:
        after = next((n.id for n in nodes[i + 1:] if opens_turn(n)), None)
        out.append(PinNote(text=text, before_id=after, tokens=count(text)))
    return tuple(out)


def opens_turn(node: Node) -> bool:
    """Whether a note may go right before `node`: a user message that answers no tool call.
    A pin made during a tool loop waits for the next such message: right before a tool
    result it would split the calls from their results (an invalid request, SPEC K1)."""
    msg = node.payload
    return isinstance(msg, Message) and msg.role == "user" and not msg.tool_results


def _project(branch: Branch) -> Projection:
    ci = branch.latest_checkpoint_index
    start = raw_start(branch)
    nodes = branch.nodes
    pins = active_pins(nodes, ci)
    if ci is None:
        raw = tuple(n for n in nodes if isinstance(n.payload, Message))
        return Projection(checkpoint=None, messages=raw, pins=pins, prefix_pins=(),
                          pin_notes=pin_notes(nodes, ()))
    before = tuple(n for n in nodes[start:ci] if isinstance(n.payload, Message))
    after = tuple(n for n in nodes[max(start, ci + 1) :] if isinstance(n.payload, Message))
    cp = nodes[ci].checkpoint
    assert cp is not None
    return Projection(
        checkpoint=nodes[ci], messages=apply_mask(before + after, cp.masked_before_id),
        after_checkpoint=len(before), pins=pins, prefix_pins=cp.pins,
        pin_notes=pin_notes(nodes[ci + 1:], cp.pins), clips=cp.tail_clips,
    )


CLIP_NOTE = "characters of this tool result (the full output is in the session history)"


def clip_tool_results(msg: Message, limit: int) -> Message:
    """`msg` with every tool result longer than `limit` characters clipped head+tail.

    SPEC K6: the latest round is kept raw even when it alone exceeds the tail budget, with
    its results shortened for the model only; the marker says what was left out.
    """
    parts = tuple(
        p.model_copy(update={"output": clip_middle(p.output, limit, what=CLIP_NOTE)})
        if isinstance(p, ToolResultPart) and len(p.output) > limit else p
        for p in msg.parts
    )
    return msg.model_copy(update={"parts": parts})


LEDGER_NOTE_CHARS = 60


def render_ledger(ledger: Ledger) -> str:
    """The identifier ledger as plain text the model can read and copy from.

    One line per kind, identifiers separated by semicolons: a key costs a few tokens, not
    a line, so a research session's dozens of annotation keys all fit the ledger's budget.
    Identifiers the user named in a constraint come first, with the user's rule itself
    ("[user constraint] Never overwrite refs/library.bib."), so the rule survives any
    summariser; under pressure the rule's text goes before its identifiers do.
    """
    if not ledger.entries:
        return ""
    rules: dict[str, list[str]] = {}  # the user's rule -> identifiers it names
    groups: dict[str, list[str]] = {}
    for e in ledger.entries:
        note = " ".join(e.note.split())
        if e.priority >= USER_CONSTRAINT:
            if note:
                rules.setdefault(note, []).append(e.value)
            else:
                groups.setdefault(f"{e.kind} [user constraint]", []).append(e.value)
            continue
        if len(note) > LEDGER_NOTE_CHARS:
            note = note[: LEDGER_NOTE_CHARS - 1] + "…"
        groups.setdefault(e.kind, []).append(f"{e.value} ({note})" if note else e.value)
    lines = ["## Identifier Ledger (verbatim identifiers carried forward)"]
    for rule, values in rules.items():
        missing = [v for v in values if v not in rule]  # the rule was cut short
        lines.append(f"- [user constraint] {rule}" + (f" ({'; '.join(missing)})"
                                                         if missing else ""))
    constrained = [k for k in groups if k.endswith("[user constraint]")]
    for kind in [*constrained, *(k for k in groups if k not in constrained)]:
        lines.append(f"- {kind}: " + "; ".join(groups[kind]))
    if ledger.evicted:
        lines.append(f"({len(ledger.evicted)} older identifiers were dropped for size; "
                     "they remain in the durable history.)")
    return "\n".join(lines)


RECALL_NOTE = (
    "[Recall] Every earlier message is still in this session's durable history. If the "
    "history_search and history_expand tools are offered, search it by words or identifiers "
    "and expand a result to read the original messages."
)
# The evicted identifiers are named outside the ledger's budget (naming them inside it would
# cost what evicting them saved), so their list is bounded on its own.
EVICTED_LIST_CHARS = 400


def recall_note(tools: tuple[str, str] | None = None) -> str:
    """The recall note; naming the client's own recall tools (search, expand) when it has
    them (SPEC L6). The named note is used only when it costs no more than the default one,
    so a checkpoint sized with the default note never grows when it is sent (P1)."""
    if tools is None:
        return RECALL_NOTE
    search, expand = tools
    named = (f"[Recall] Earlier messages are all in this session's history: tool {search} "
             f"finds them by words or identifiers, tool {expand} reads one.")
    # Both cost components no larger: no larger for every tokenizer family's estimate.
    (latin, wide), (latin0, wide0) = text_cost(named), text_cost(RECALL_NOTE)
    return named if latin <= latin0 and wide <= wide0 else RECALL_NOTE


def render_recall(ledger: Ledger, tools: tuple[str, str] | None = None) -> str:
    """SPEC L3: recall exists, and what the ledger evicted is "in the history" (most
    critical first: the ledger evicts the least critical kinds first). `tools`: the
    client's names of the recall tools (`recall_note`)."""
    lines = [recall_note(tools)]
    if ledger.evicted:
        listed: list[str] = []
        size = 0
        for entry in reversed(ledger.evicted):
            if size + len(entry.value) > EVICTED_LIST_CHARS:
                break
            listed.append(entry.value)
            size += len(entry.value) + 2
        more = len(ledger.evicted) - len(listed)
        named = listed + ([f"and {more} more" if listed else f"{more} identifiers"]
                          if more else [])
        lines.append("In the history (dropped from the ledger for size): " + "; ".join(named))
    return "\n".join(lines)


TURN_HEADING = "## This Turn So Far"


def render_turn_context(turn: TurnContext) -> str:
    """The split turn's context as plain text (SPEC K6): the request verbatim, then what
    the folded rounds tried, what failed and which files they touched."""
    lines = [f"{TURN_HEADING} (split turn: its latest rounds follow verbatim after this "
             "checkpoint; it started with the request below)"]
    lines.append("### Request (user, verbatim)" if not turn.request_clipped else
                 "### Request (user, verbatim; the middle is clipped for size, the full text "
                 "is in the session history)")
    lines.append(turn.request.strip() or "(not available: it was folded into the summary "
                 "above before this turn was split)")
    lines.append(f"### Tried ({turn.rounds_folded} tool rounds of this turn are folded)")
    if turn.omitted:
        lines.append(f"- ({turn.omitted} older items omitted for size; the session history "
                     "has them)")
    lines += [f"- (tool) {call}" + (f" (×{n})" if n > 1 else "") for call, n in turn.tried]
    if not (turn.tried or turn.omitted):
        lines.append("- (none)")
    lines.append("### Failed")
    lines += [f"- {item}" for item in turn.failed] or ["- (none)"]
    lines.append("### Files Touched")
    if turn.files_modified:
        lines.append("- (tool) modified: " + "; ".join(turn.files_modified))
    if turn.files_read:
        lines.append("- (tool) read: " + "; ".join(turn.files_read))
    if not (turn.files_modified or turn.files_read):
        lines.append("- (none)")
    return "\n".join(lines)


def checkpoint_text(cp: Checkpoint, recall_tools: tuple[str, str] | None = None) -> str:
    """The summary message body exactly as the model sees it (`recall_tools`: the client's
    own names of the recall tools, which the recall note then names, `recall_note`); "" for
    a checkpoint that is only a provider's own compaction (SPEC Y7: nothing of contextfold's
    to say yet)."""
    summary = cp.summary.strip()
    if cp.provider_base and not summary and cp.masked_before_id is None and \
            not cp.ledger.entries and cp.turn is None:
        return ""
    head = [SUMMARY_HEADER, "", summary] if summary else [MASK_ONLY_HEADER]
    return "\n".join(head + _frame(cp.ledger, cp.turn, cp.masked_before_id, recall_tools))


def checkpoint_frame(ledger: Ledger, turn: TurnContext | None = None,
                     masked_before_id: str | None = None) -> str:
    """Everything a checkpoint message holds besides its summary text: the header, the
    split turn's context, the ledger, the recall note and the masking note (sizing counts
    it beside the summary, `core.sizing.fit.frame_reserve`)."""
    return "\n".join([SUMMARY_HEADER, "", *_frame(ledger, turn, masked_before_id)])


def _frame(ledger: Ledger, turn: TurnContext | None, masked_before_id: str | None,
           recall_tools: tuple[str, str] | None = None) -> list[str]:
    parts: list[str] = []
    if turn is not None:
        parts += ["", render_turn_context(turn)]
    rendered = render_ledger(ledger)
    if rendered:
        parts += ["", rendered]
    parts += ["", render_recall(ledger, recall_tools)]
    if masked_before_id is not None:
        parts += ["", MASKING_NOTE]
    return parts
