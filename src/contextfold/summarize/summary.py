"""`Summary`: what every summariser returns for a plan (one value for every face).

The offline summariser, the LLM summariser and the runtime's guard all answer with a
`Summary`: the text to commit, the name of what wrote it (recorded in the checkpoint),
how many model requests it took, and the problems met on the way. A summary written by
the offline summariser in place of the configured one is named `FALLBACK`, and its
`problems` say why (a rejected key, a timeout, an invalid answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.values.messages import Usage

EXTRACTIVE = "extractive"  # the offline summariser, as configured
FALLBACK = "extractive-fallback"  # the offline summariser, in place of the configured one


@dataclass(frozen=True)
class Summary:
    """The summary of a plan, and how it was obtained.

    text        a checkpoint summary (valid once it has passed the runtime's guard)
    summarizer  "extractive", "llm:<model>", "extractive-fallback", or a custom name
    attempts    summarisation requests sent to a model (strict retries included)
    problems    why answers were rejected or calls failed, in order (empty when none)
    usage       what the summarising requests used, summed (SPEC Q4; None: no model was
                asked or it reported nothing)
    """

    text: str
    summarizer: str
    attempts: int = 0
    problems: tuple[str, ...] = ()
    usage: Usage | None = None

    @property
    def fell_back(self) -> bool:
        """The offline summary stands in for the configured summariser's."""
        return self.summarizer == FALLBACK

    @property
    def fallback_reason(self) -> str | None:
        """Why the configured summariser was not used (None when it was)."""
        if not self.fell_back:
            return None
        return "; ".join(self.problems) or "no reason given"
