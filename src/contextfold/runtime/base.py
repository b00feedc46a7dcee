"""The former base of `Conversation`, kept as a name: `ConversationBase` is `Conversation`.

Issue 39 made the class whole in `runtime.conversation`, its parts composed (the branch as
held, pins, compactions) rather than inherited through `base` and `pinning`; code that
named the base class (a test patching one of its methods) finds the same class here.
"""

from __future__ import annotations

from .conversation import Conversation, OverflowPolicy

ConversationBase = Conversation

__all__ = ["ConversationBase", "OverflowPolicy"]
