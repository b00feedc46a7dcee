"""The runtime: a live `Conversation` over a store, a model and a summariser.

    conv = await Conversation.open(store, model=model, capacity=capacity)
    result = await conv.send("hello")

See docs/runtime.md.
"""

from .compaction import CompactionOutcome, CompactionRequest, compact_session
from .conversation import Conversation, OverflowPolicy
from .errors import (
    BusyError,
    CompactionFailedError,
    ConversationError,
    DraftTooLargeError,
    RequestTooLargeError,
    SendAbortedError,
    ToolWorkflowError,
)
from .events import ConversationState, Event, EventKind, EventStream
from .runner import Finished
from .sizing import Gauge
from .summarizers import FallbackNote, GuardedSummarizer
from .turns import RunTools, SendResult

__all__ = [
    "BusyError",
    "CompactionFailedError",
    "CompactionOutcome",
    "CompactionRequest",
    "Conversation",
    "ConversationError",
    "ConversationState",
    "DraftTooLargeError",
    "Event",
    "EventKind",
    "EventStream",
    "FallbackNote",
    "Finished",
    "Gauge",
    "GuardedSummarizer",
    "OverflowPolicy",
    "RequestTooLargeError",
    "RunTools",
    "SendAbortedError",
    "SendResult",
    "ToolWorkflowError",
    "compact_session",
]
