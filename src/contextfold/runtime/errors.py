"""What a `Conversation` raises: one class per thing an application reacts to differently.

Provider errors (`ContextOverflowError`, rate limits, ...) and store errors
(`ReadOnlySessionError`, `SessionNotFoundError`, ...) pass through unchanged; the classes here
are the runtime's own decisions: "busy compacting", "this draft cannot fit", "the compaction
your send waited for did not succeed", "the tool workflow is not in the state you assumed".
"""

from __future__ import annotations

from ..core.messages import Message


class ConversationError(Exception):
    """Base class of every error the runtime raises on purpose."""


class BusyError(ConversationError):
    """The operation is disabled while a compaction (or another turn) runs (SPEC U4).

    `operation` names what was refused; `activity` what is running. Wait for the compaction
    (`await conversation.wait_idle()`) or cancel it (`conversation.cancel_compaction()`).
    """

    def __init__(self, operation: str, activity: str = "a compaction") -> None:
        super().__init__(
            f"cannot {operation} while {activity} is running; wait for it to finish or "
            "cancel it with cancel_compaction()"
            if activity == "a compaction"
            else f"cannot {operation} while {activity} is running; wait for it to finish"
        )
        self.operation = operation
        self.activity = activity


class RequestTooLargeError(ConversationError):
    """The next request cannot fit the model's safe input limit, even after compaction.

    Nothing was sent to the provider (SPEC P3). `overflow_tokens` is how many tokens over
    the limit the smallest request the runtime could build would be.
    """

    def __init__(self, message: str, *, overflow_tokens: int, estimated_tokens: int,
                 safe_input_limit: int) -> None:
        super().__init__(message)
        self.overflow_tokens = overflow_tokens
        self.estimated_tokens = estimated_tokens
        self.safe_input_limit = safe_input_limit


class DraftTooLargeError(RequestTooLargeError):
    """A new user message does not fit, even after compacting everything before it (P3).

    The draft was NOT persisted and no provider call was made. `draft` is the message to
    give back to the user; shorten it by at least `overflow_tokens` tokens.
    """

    def __init__(self, draft: Message, *, overflow_tokens: int, estimated_tokens: int,
                 safe_input_limit: int) -> None:
        super().__init__(
            f"the message does not fit the model's context: the request would need about "
            f"{estimated_tokens} tokens, the safe limit is {safe_input_limit}; shorten the "
            f"message by at least {overflow_tokens} tokens (nothing was sent or saved)",
            overflow_tokens=overflow_tokens, estimated_tokens=estimated_tokens,
            safe_input_limit=safe_input_limit,
        )
        self.draft = draft


class SendAbortedError(ConversationError):
    """A send waited for a compaction that failed or was cancelled, so nothing was sent (U3).

    `draft` is the user's message, unsent and unsaved; `reason` is "cancelled" or "failed";
    `detail` says what went wrong.
    """

    def __init__(self, draft: Message | None, reason: str, detail: str = "") -> None:
        what = "was cancelled" if reason == "cancelled" else "failed"
        extra = f" ({detail})" if detail else ""
        super().__init__(f"the compaction this message waited for {what}{extra}; nothing was "
                         "sent and the draft is kept")
        self.draft = draft
        self.reason = reason
        self.detail = detail


class ToolWorkflowError(ConversationError):
    """The call does not match the tool workflow at the leaf, e.g. a new user message while
    tool calls wait for results, results for calls that are not open, or `continue_turn`
    with nothing to continue. The message says which ids or state are wrong."""


class CompactionFailedError(ConversationError):
    """A compaction raised; `cause` is the original exception (also `__cause__`)."""

    def __init__(self, detail: str, cause: BaseException | None = None) -> None:
        super().__init__(f"compaction failed: {detail}")
        self.cause = cause
