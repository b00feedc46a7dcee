"""The counters the README cites as evidence, each fed a broken history and seen to count.

A counter that always reads 0 would pass every test that only replays clean sessions; these
tests break the history (or the exporter) on purpose so each counter has to notice:
`dropped_messages`, `invalid_tool_sequences`, `over_limit_requests` of `contextfold replay`,
and the independent validity oracles behind them (issue 14).
"""

from __future__ import annotations

import pytest

import contextfold.replay_session as replay_module  # where a replayed request is exported
from contextfold.core.models.budget import ModelCapacity, derive_budget
from contextfold.core.render.export import ExportResult
from contextfold.core.render.validity import (
    anthropic_from_chat,
    anthropic_problems,
    openai_problems,
    tool_pairing_problems,
)
from contextfold.core.values.messages import Message, TextPart, ToolResultPart
from contextfold.replay import ManagedSession, replay_messages
from tests.builders import assistant, tool_call, tool_result, user

CAP = ModelCapacity(model="gpt-4o", context_window=128_000, max_output=16_384, family="gpt")



def _pairs(messages: list[Message]) -> list[tuple[str, Message]]:
    return [(f"m{i}", m) for i, m in enumerate(messages)]


# --------------------------------------------------------------------------- oracles

CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "search", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "found"}
Q = {"role": "user", "content": "question"}
A = {"role": "assistant", "content": "answer"}


@pytest.mark.parametrize("messages,needle", [
    ([Q, RESULT, A], "does not follow its call"),  # orphan result
    ([Q, CALL, A], "have no result"),  # unanswered call
    ([Q, CALL], "no result at the end"),
], ids=["orphan", "unanswered", "unanswered-at-end"])
def test_every_oracle_counts_broken_tool_pairing(messages, needle):  # K1
    assert any(needle in p for p in tool_pairing_problems(messages))
    assert any(needle in p for p in openai_problems(messages))
    assert anthropic_problems(anthropic_from_chat(messages))


def test_openai_oracle_counts_empty_history_and_empty_assistant():  # T3
    assert openai_problems([{"role": "system", "content": "s"}]) == ["empty history"]
    assert any("empty assistant" in p for p in openai_problems(
        [Q, {"role": "assistant", "content": ""}]))


def test_only_the_anthropic_rules_require_a_user_first():  # T3
    opens_with_assistant = [A, Q, CALL, RESULT, A]
    assert tool_pairing_problems(opens_with_assistant) == []
    assert openai_problems(opens_with_assistant) == []
    assert anthropic_problems(anthropic_from_chat(opens_with_assistant)) == [
        "first message is not from the user"]


def test_anthropic_shape_groups_results_and_hoists_the_system():
    shaped = anthropic_from_chat([{"role": "system", "content": "s"}, Q, CALL, RESULT,
                                  {**RESULT, "tool_call_id": "c2"}, Q, A])
    assert [m["role"] for m in shaped] == ["user", "assistant", "user", "assistant"]
    # the results and the next question are one user turn, as the API combines them
    assert [b["type"] for b in shaped[2]["content"]] == ["tool_result", "tool_result", "text"]


# --------------------------------------------------------------------------- replay counters


def test_dropped_messages_counts_a_message_neither_summarised_nor_projected():  # K5
    session = ManagedSession(CAP, derive_budget(CAP))
    for i, m in enumerate([user("a"), assistant("b"), user("c"), assistant("d")]):
        session.append(m, f"m{i}")
    assert session.dropped_messages() == 0
    # The loaded part skips two messages no checkpoint covers (a store that loses them).
    session.store._sessions[session.session_id].load_from = 2
    session.fit.branch = session.store._branch(session.store._sessions[session.session_id], 2)
    assert session.dropped_messages() == 2


def test_replay_reports_dropped_messages_from_the_session(monkeypatch):  # K5
    monkeypatch.setattr(ManagedSession, "dropped_messages", lambda self: 7)
    report = replay_messages(_pairs([user("q"), assistant("a")]), CAP, derive_budget(CAP))
    assert report.to_json()["dropped_messages"] == 7


def test_invalid_tool_sequences_counts_what_the_oracles_find(monkeypatch):  # K1
    orphan = Message(role="tool", parts=(ToolResultPart(call_id="gone", output="x"),))
    history = _pairs([user("q"), orphan, assistant("a")])
    clean = replay_messages(history, CAP, derive_budget(CAP))
    assert clean.invalid_tool_sequences == 0  # the exporter repairs the orphan

    def no_repair(projection, *, system=None):  # an exporter that forgets to repair
        out: list[dict] = []
        for node in projection.messages:
            msg = node.message
            if msg.role == "tool":
                out += [{"role": "tool", "tool_call_id": r.call_id, "content": r.output}
                        for r in msg.tool_results]
            else:
                out.append({"role": msg.role, "content": "".join(
                    p.text for p in msg.parts if isinstance(p, TextPart))})
        return ExportResult(messages=out, repairs=())

    monkeypatch.setattr(replay_module, "to_openai", no_repair)
    broken = replay_messages(history, CAP, derive_budget(CAP))
    assert broken.invalid_tool_sequences == 1
    assert broken.to_json()["invalid_tool_sequences"] == 1
    assert any("does not follow its call" in p for p in broken.requests[0].problems)


def test_over_limit_requests_counts_a_request_sent_over_the_limit(monkeypatch):  # P3 B1
    small = ModelCapacity(model="tiny", context_window=4_000, max_output=1_000, family="gpt")
    history = _pairs([user("q"), tool_call("t1"), tool_result("t1", "word " * 6_000),
                      assistant("a")])

    def unfitted(self):  # an engine that sends the request without making it fit
        projection = self.projection()
        return projection, self.estimate(projection=projection).tokens

    with monkeypatch.context() as patched:
        patched.setattr(ManagedSession, "before_request", unfitted)
        report = replay_messages(history, small, derive_budget(small))
    assert report.to_json()["over_limit_requests"] == 1
    assert report.requests[-1].over_limit
    assert report.max_projected_tokens > report.safe_input_limit
    fits = replay_messages(history, small, derive_budget(small))
    assert fits.to_json()["over_limit_requests"] == 0
