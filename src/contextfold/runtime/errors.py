"""What a `Conversation` raises: one class per thing an application reacts to differently.

Provider errors (`ContextOverflowError`, rate limits, ...) and store errors
(`ReadOnlySessionError`, `SessionNotFoundError`, ...) pass through unchanged; the classes here
are the runtime's own decisions: "busy compacting", "this draft cannot fit", "the compaction
your send waited for did not succeed", "the tool workflow is not in the state you assumed".
Each has a kind of the one error vocabulary (`contextfold.errors`), which the faces answer.
"""

from __future__ import annotations

from typing import Any

from ..core.values.messages import Message
from ..errors import ContextfoldError, Kind, code_of, kind_of


class ConversationError(ContextfoldError):
    """Base class of every error the runtime raises on purpose."""


class BusyError(ConversationError):
    """The operation is disabled while a compaction (or another turn) runs (SPEC U4).

    `operation` names what was refused; `activity` what is running. Wait for the compaction
    (`await conversation.wait_idle()`) or cancel it (`conversation.cancel_compaction()`).
    """

    kind = "busy"

    def __init__(self, operation: str, activity: str = "a compaction") -> None:
        super().__init__(
            f"cannot {operation} while {activity} is running; wait for it to finish or "
            "cancel it with cancel_compaction()"
            if activity == "a compaction"
            else f"cannot {operation} while {activity} is running; wait for it to finish"
        )
        self.operation = operation
        self.activity = activity
        self.code = "compacting" if activity == "a compaction" else "busy"

    def facts(self) -> dict[str, Any]:
        return {"reason": str(self)}


class RequestTooLargeError(ConversationError):
    """The next request cannot fit the model's safe input limit, even after compaction.

    Nothing was sent to the provider (SPEC P3). `overflow_tokens` is how many tokens over
    the limit the smallest request the runtime could build would be, `estimated_tokens` what
    the request needs, `model` the model whose limit it is and `context_window` its window
    (when known: the safe limit is the window less the reply's room and a margin, and the
    faces name each for what it is). The faces word the error from these numbers, each in
    its own terms; the message is the library's sentence.
    """

    kind = "too_large"
    code = "request_too_large"

    def __init__(self, message: str = "", *, overflow_tokens: int, estimated_tokens: int,
                 safe_input_limit: int, model: str | None = None,
                 context_window: int | None = None) -> None:
        of_model = f" of {model}" if model else ""
        super().__init__(message or (
            f"the next request needs about {estimated_tokens} tokens but the safe input limit"
            f"{of_model} is {safe_input_limit}, even after compaction; nothing was sent. "
            f"Shorten it by at least {overflow_tokens} tokens or use a larger-window model."))
        self.overflow_tokens = overflow_tokens
        self.estimated_tokens = estimated_tokens
        self.safe_input_limit = safe_input_limit
        self.model = model
        self.context_window = context_window

    def facts(self) -> dict[str, Any]:
        return {"overflow_tokens": self.overflow_tokens,
                "estimated_tokens": self.estimated_tokens,
                "safe_input_limit": self.safe_input_limit,
                **({"context_window": self.context_window} if self.context_window else {})}


class DraftTooLargeError(RequestTooLargeError):
    """A new user message does not fit, even after compacting everything before it (P3).

    The draft was NOT persisted and no provider call was made. `draft` is the message to
    give back to the user; shorten it by at least `overflow_tokens` tokens.
    """

    code = "draft_too_large"

    def __init__(self, draft: Message, *, overflow_tokens: int, estimated_tokens: int,
                 safe_input_limit: int, model: str | None = None,
                 context_window: int | None = None) -> None:
        super().__init__(
            f"the message does not fit the model's context: the request would need about "
            f"{estimated_tokens} tokens, the safe limit is {safe_input_limit}; shorten the "
            f"message by at least {overflow_tokens} tokens (nothing was sent or saved)",
            overflow_tokens=overflow_tokens, estimated_tokens=estimated_tokens,
            safe_input_limit=safe_input_limit, model=model, context_window=context_window,
        )
        self.draft = draft


class SendAbortedError(ConversationError):
    """A send waited for a compaction that failed or was cancelled, so nothing was sent (U3).

    `draft` is the user's message, unsent and unsaved; `reason` is "cancelled" or "failed";
    `detail` says what went wrong.
    """

    kind = "conflict"
    code = "send_aborted"

    def __init__(self, draft: Message | None, reason: str, detail: str = "") -> None:
        what = "was cancelled" if reason == "cancelled" else "failed"
        extra = f" ({detail})" if detail else ""
        super().__init__(f"the compaction this message waited for {what}{extra}; nothing was "
                         "sent and the draft is kept")
        self.draft = draft
        self.reason = reason
        self.detail = detail

    def facts(self) -> dict[str, Any]:
        return {"reason": self.reason,
                "draft": self.draft.text if self.draft is not None else None}


class ToolWorkflowError(ConversationError):
    """The call does not match the tool workflow at the leaf, e.g. a new user message while
    tool calls wait for results, results for calls that are not open, or `continue_turn`
    with nothing to continue. The message says which ids or state are wrong."""

    kind = "bad_input"


class CompactionFailedError(ConversationError):
    """A compaction raised; `cause` is the original exception (also `__cause__`).

    Its kind and code are its cause's (a window too small to summarise in is `bad_input`, a
    failed summariser model `provider`); an unexpected cause leaves it `internal`.
    """

    def __init__(self, detail: str, cause: BaseException | None = None) -> None:
        super().__init__(f"compaction failed: {detail}")
        self.cause = cause
        if cause is not None:
            self.kind: Kind = kind_of(cause)
            self.code = code_of(cause)
