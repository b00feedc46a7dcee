"""LangMem `summarize_messages` (run in the peers venv).

Used as LangMem documents it: called before every model call with the full message history
and the previous `RunningSummary`; its returned messages are the request, the running summary
is kept in state, the history itself is never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AnyMessage
from langmem.short_term import RunningSummary, summarize_messages

from .common import TRIGGER_TOKENS, Neutral
from .peer_langchain import echo_model, to_langchain, to_openai

# LangMem's own budget for the summary it writes (its default is 256); ours is what a
# structured checkpoint needs. It only shifts LangMem's arithmetic, the fake ignores it.
SUMMARY_TOKENS = 2_048


class LangMemSummarize:
    """`summarize_messages(max_tokens=T, max_tokens_before_summary=T, max_summary_tokens=2048)`.

    LangMem has no recent-tail setting: it summarises the oldest unsummarised messages until
    their count reaches `max_tokens_before_summary` and keeps only what follows.
    """

    name = "langmem-summarize_messages"

    def __init__(self, summarize: Callable[[str], str]) -> None:
        self.model = echo_model(summarize)
        self.messages: list[AnyMessage] = []
        self.running: RunningSummary | None = None

    def ingest(self, new: Sequence[Neutral]) -> None:
        self.messages.extend(to_langchain(m) for m in new)

    def decide(self) -> list[AnyMessage]:
        result = summarize_messages(
            self.messages,
            running_summary=self.running,
            model=self.model,
            max_tokens=TRIGGER_TOKENS,
            max_tokens_before_summary=TRIGGER_TOKENS,
            max_summary_tokens=SUMMARY_TOKENS,
        )
        if result.running_summary is not None:
            self.running = result.running_summary
        return result.messages

    def to_openai(self, request: list[AnyMessage]) -> list[dict[str, Any]]:
        return to_openai(request)
