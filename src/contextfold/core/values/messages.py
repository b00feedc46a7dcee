"""Messages, parts, usage and nodes: the immutable values everything else works on.

Every value here is a frozen pydantic v2 model that forbids unknown fields, so bad input
(an unknown part type, a tool result without a call id, negative usage) fails at the
boundary with an error that names the field, before anything is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from .surrogates import without_surrogates

Role = Literal["user", "assistant", "tool", "system"]
MessageStatus = Literal["complete", "streaming", "error", "aborted"]
ApprovalState = Literal["pending", "approved", "rejected"]

NonEmptyStr = Annotated[str, Field(min_length=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Value(BaseModel):
    """Base for every core value: immutable and strict about unknown fields.

    No value holds a lone UTF-16 surrogate: they become U+FFFD (`core.values.surrogates`), so
    hashing, storing and sending a value can never fail on one.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        # Before validation: pydantic refuses a lone surrogate in a constrained str field.
        return without_surrogates(data) if isinstance(data, dict) else data


# --------------------------------------------------------------------------- parts


class TextPart(Value):
    type: Literal["text"] = "text"
    text: str


class ReasoningPart(Value):
    """Model reasoning ("thinking"). Never shown to the summariser (SPEC R2)."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None


class ToolCallPart(Value):
    type: Literal["tool_call"] = "tool_call"
    id: NonEmptyStr
    name: NonEmptyStr
    input: Any = Field(default_factory=dict)


class ToolResultPart(Value):
    type: Literal["tool_result"] = "tool_result"
    call_id: NonEmptyStr
    name: str | None = None
    output: str = ""
    is_error: bool = False
    denied: bool = False


class ApprovalPart(Value):
    """A user's decision on a tool call that needs permission."""

    type: Literal["approval"] = "approval"
    call_id: NonEmptyStr
    state: ApprovalState


class FilePart(Value):
    """An image or attachment. Only metadata is kept in the core; bytes live elsewhere."""

    type: Literal["file"] = "file"
    name: NonEmptyStr
    media_type: NonEmptyStr
    size: NonNegativeInt | None = None

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")


class ProviderCompactionPart(Value):
    """A provider's own compaction of the conversation so far (SPEC Y7): OpenAI's
    `compaction` input item, Anthropic's `compaction` content block. `data` is the item or
    block exactly as the provider wrote it (its encrypted content is opaque): it is stored,
    counted and sent back to that provider unchanged, never summarised and never shown to
    another provider."""

    type: Literal["provider_compaction"] = "provider_compaction"
    provider: Literal["openai", "anthropic"]
    data: dict[str, Any]


# Typed research resources (SPEC R6). Each holds what resumption needs plus, where a tool
# returned content, the content itself (`text`), which the serialiser may truncate.


class ZoteroItemPart(Value):
    type: Literal["zotero_item"] = "zotero_item"
    item_key: NonEmptyStr
    title: str = ""
    citation: str = ""


class PdfPagePart(Value):
    type: Literal["pdf_page"] = "pdf_page"
    attachment_name: NonEmptyStr
    attachment_key: str | None = None
    page: Annotated[int, Field(ge=1)]
    total_pages: Annotated[int, Field(ge=1)] | None = None
    text: str = ""


class EpubLocationPart(Value):
    type: Literal["epub_location"] = "epub_location"
    attachment_name: str | None = None
    section_index: NonNegativeInt
    href: str = ""
    cfi: str = ""
    text: str = ""


class AnnotationPart(Value):
    type: Literal["annotation"] = "annotation"
    annotation_key: NonEmptyStr
    parent_item_key: str | None = None
    text: str = ""
    comment: str = ""
    page: str | None = None


class CollectionPart(Value):
    type: Literal["collection"] = "collection"
    key: NonEmptyStr
    name: str = ""


class TagPart(Value):
    """A Zotero tag: the tag string is its stable identifier."""

    type: Literal["tag"] = "tag"
    tag: NonEmptyStr
    name: str = ""


ResourcePart = (
    ZoteroItemPart | PdfPagePart | EpubLocationPart | AnnotationPart | CollectionPart | TagPart
)
RESOURCE_PART_TYPES: tuple[type[Value], ...] = (
    ZoteroItemPart,
    PdfPagePart,
    EpubLocationPart,
    AnnotationPart,
    CollectionPart,
    TagPart,
)

Part = Annotated[
    TextPart
    | ReasoningPart
    | ToolCallPart
    | ToolResultPart
    | ApprovalPart
    | FilePart
    | ProviderCompactionPart
    | ZoteroItemPart
    | PdfPagePart
    | EpubLocationPart
    | AnnotationPart
    | CollectionPart
    | TagPart,
    Field(discriminator="type"),
]


# --------------------------------------------------------------------------- usage


class Usage(Value):
    """Provider-reported usage of one request.

    `occupied` is what that request took of the context window (SPEC E1): everything it
    read plus what it wrote. Cumulative or billing totals never belong here (SPEC E3).
    """

    input: NonNegativeInt = 0
    output: NonNegativeInt = 0
    cache_read: NonNegativeInt = 0
    cache_write: NonNegativeInt = 0
    model: str | None = None

    @property
    def occupied(self) -> int:
        return self.input + self.cache_read + self.cache_write + self.output

    @property
    def prompt(self) -> int:
        return self.input + self.cache_read + self.cache_write


def summed_usage(usages: Iterable[Usage]) -> Usage | None:
    """The usage of several requests together (a compaction's summarising calls, SPEC Q4);
    None for none. The model is kept when they agree."""
    items = list(usages)
    if not items:
        return None
    models = {u.model for u in items}
    return Usage(input=sum(u.input for u in items), output=sum(u.output for u in items),
                 cache_read=sum(u.cache_read for u in items),
                 cache_write=sum(u.cache_write for u in items),
                 model=models.pop() if len(models) == 1 else None)


# --------------------------------------------------------------------------- messages


class Message(Value):
    kind: Literal["message"] = "message"
    role: Role
    parts: tuple[Part, ...] = ()
    usage: Usage | None = None
    status: MessageStatus = "complete"
    model: str | None = None

    @property
    def text(self) -> str:
        """The visible text of the message (no reasoning, no tool payloads)."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ToolResultPart))

    @property
    def approvals(self) -> tuple[ApprovalPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ApprovalPart))

    @property
    def is_closed_without_result(self) -> bool:
        """An errored or aborted reply: its tool calls will never get results."""
        return self.status in ("error", "aborted")


# --------------------------------------------------------------------------- checkpoint


# `LedgerEntry.priority`: how long the ledger keeps an identifier under pressure (higher is
# evicted later). Here, beside the entry, because the extraction (`identifiers`) writes them
# and the rendering (`projection`) reads them.
TOOL_TRAFFIC = 0  # seen in tool traffic or the assistant's words
USER_WRITTEN = 1  # written by the user
USER_CONSTRAINT = 2  # named in a constraint the user stated ("never overwrite refs/library.bib")


class LedgerEntry(Value):
    """One identifier carried forward verbatim across compactions."""

    kind: NonEmptyStr  # e.g. zotero_item, doi, url, path, commit, tool_error
    value: NonEmptyStr
    note: str = ""  # e.g. a title; never needed to keep the identifier itself
    priority: Annotated[int, Field(ge=TOOL_TRAFFIC, le=USER_CONSTRAINT)] = TOOL_TRAFFIC


class Ledger(Value):
    entries: tuple[LedgerEntry, ...] = ()
    evicted: tuple[LedgerEntry, ...] = ()  # dropped for size: recorded, never silent


class TurnContext(Value):
    """The unfinished turn a split-turn checkpoint cuts through (SPEC K6).

    When the keep boundary falls at a tool round inside the current turn, the turn's
    first part is folded away; this keeps what the model needs to continue the rest: the
    user's request that started the turn, verbatim, and what the folded rounds tried,
    what failed and which files they touched. Repeated compactions of one long turn merge
    into it (same `request_id`).
    """

    request_id: str | None = None  # the user message that started the turn (None: unknown)
    request: str = ""  # its text, verbatim (clipped head+tail only if over its budget)
    request_clipped: bool = False
    rounds_folded: NonNegativeInt = 0
    tried: tuple[tuple[str, int], ...] = ()  # (call, times), most recent last
    failed: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    files_modified: tuple[str, ...] = ()
    omitted: NonNegativeInt = 0  # older items dropped for size (stated, never silent)


class Pin(Value):
    """A text the user asked to keep in front of the model, verbatim (SPEC N1).

    `pin_id` is the id of the pin event node that created it; `source_id` the message it
    was taken from, if any (the text is copied so the projection never reads history).
    """

    pin_id: NonEmptyStr
    text: NonEmptyStr
    source_id: str | None = None


class PinEvent(Value):
    """A durable pin or unpin (SPEC N2): an append-only node the projection folds.

    It is neither a message nor a checkpoint: the model never sees the event itself, only
    the active pins after the checkpoint. An unpin names the `pin_id` it removes.
    """

    kind: Literal["pin"] = "pin"
    action: Literal["pin", "unpin"]
    pin_id: NonEmptyStr
    text: str = ""
    source_id: str | None = None


class Checkpoint(Value):
    """Internal node written only by compaction (SPEC C6).

    `pins`: the pins active at the checkpoint's parent, so an O(tail) load that starts
    after older pin events still projects them (SPEC N2). `masked_before_id`: tool results
    of raw nodes before this node are projected as placeholders (SPEC V1); a masking step is
    a checkpoint that keeps the previous summary and boundary and only sets this field.
    """

    kind: Literal["checkpoint"] = "checkpoint"
    summary: str
    first_kept_id: str | None
    tokens_before: NonNegativeInt
    tokens_after_estimate: NonNegativeInt | None = None
    model: str | None = None
    profile: Literal["research", "coding", "general"] = "research"
    summarizer: str = "extractive"
    ledger: Ledger = Ledger()
    details: dict[str, Any] = Field(default_factory=dict)
    # SPEC K6: set when first_kept_id is a tool round inside the current turn.
    turn: TurnContext | None = None
    # SPEC K6: kept nodes whose tool results are clipped head+tail *in the projection*
    # (node id -> characters kept per result); the durable nodes are never changed.
    tail_clips: dict[str, NonNegativeInt] = Field(default_factory=dict)
    pins: tuple[Pin, ...] = ()
    masked_before_id: str | None = None
    # SPEC Y7: a provider's own compaction this checkpoint starts from: the messages that
    # provider needs first (its compaction item or block, and for OpenAI the items its
    # compacted window kept before it), sent back to it as they came. Never summarised;
    # every later checkpoint carries them forward and summarises only what follows.
    provider_base: tuple[Message, ...] = ()

    @property
    def provider(self) -> str | None:
        """The provider whose compaction this checkpoint starts from (None: none)."""
        for msg in self.provider_base:
            for part in msg.parts:
                if isinstance(part, ProviderCompactionPart):
                    return part.provider
        return None


Payload = Annotated[Message | Checkpoint | PinEvent, Field(discriminator="kind")]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Node(Value):
    """One durable entry of a session tree. Never edited once written."""

    id: NonEmptyStr
    parent_id: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    payload: Payload

    @property
    def kind(self) -> Literal["message", "checkpoint", "pin"]:
        return self.payload.kind

    @property
    def message(self) -> Message | None:
        return self.payload if isinstance(self.payload, Message) else None

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self.payload if isinstance(self.payload, Checkpoint) else None

    @property
    def pin_event(self) -> PinEvent | None:
        return self.payload if isinstance(self.payload, PinEvent) else None

    @property
    def is_user_message(self) -> bool:
        return isinstance(self.payload, Message) and self.payload.role == "user"


PAYLOAD_ADAPTER: TypeAdapter[Message | Checkpoint | PinEvent] = TypeAdapter(Payload)


def parse_payload(data: Any) -> Message | Checkpoint | PinEvent:
    """Validate a stored or imported payload; raises pydantic.ValidationError naming the field."""
    return PAYLOAD_ADAPTER.validate_python(data)


# ----------------------------------------------------------------- small constructors


def text_message(role: Role, text: str, **kwargs: Any) -> Message:
    """A message holding one text part: the common case in tests, demos and apps."""
    return Message(role=role, parts=(TextPart(text=text),), **kwargs)
