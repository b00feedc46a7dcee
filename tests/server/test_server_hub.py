"""What `PgHub` sends other workers (issue 26): a turn's queued deltas as one notification,
nothing else changed or reordered; its own notifications dropped before parsing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextfold.server.hub import PgHub, encode, joined_deltas

_delta = st.builds(lambda s, t, text: {"o": "w", "s": s, "e": "delta",
                                       "d": {"text": text, "turn_id": t}},
                   st.sampled_from(["s1", "s2"]), st.sampled_from(["t1", "t2"]),
                   st.text(max_size=300))
_other = st.builds(lambda s, e: {"o": "w", "s": s, "e": e, "d": {"state": "idle"}},
                   st.sampled_from(["s1", "s2"]), st.sampled_from(["state", "gauge"]))


def _shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each run of one turn's deltas as one entry (session, turn, joined text); others as is."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if m["e"] == "delta" and out and out[-1][0] == "delta" and \
                out[-1][1:3] == (m["s"], m["d"]["turn_id"]):
            out[-1] = (*out[-1][:3], out[-1][3] + m["d"]["text"])
        elif m["e"] == "delta":
            out.append(("delta", m["s"], m["d"]["turn_id"], m["d"]["text"]))
        else:
            out.append((m["e"], m["s"], json.dumps(m["d"])))
    return out


@given(st.lists(st.one_of(_delta, _other), max_size=40))
def test_joined_deltas_keep_every_text_in_order(messages):
    joined = joined_deltas(messages)
    assert _shape(joined) == _shape(messages)  # same texts, same order, same other events
    assert len(joined) <= len(messages)
    for m in joined:  # every one still fits a notification
        assert len(encode(m).encode()) < 8000


def test_a_streamed_reply_is_one_notification():
    pieces = [{"o": "w", "s": "s1", "e": "delta", "d": {"text": f"w{i} ", "turn_id": "t"}}
              for i in range(18)]
    joined = joined_deltas([{"o": "w", "s": "s1", "e": "state", "d": {}}, *pieces])
    assert [m["e"] for m in joined] == ["state", "delta"]
    assert joined[1]["d"] == {"text": "".join(f"w{i} " for i in range(18)), "turn_id": "t"}


def test_own_notifications_are_dropped_and_others_delivered():
    hub = PgHub("postgresql://unused")
    other = PgHub("postgresql://unused")
    got: list[Any] = []
    hub._deliver = got.append  # type: ignore[method-assign]
    hub._received(encode({"o": hub.origin, "s": "s1", "e": "state", "d": {}}))
    assert got == []
    hub._received(encode({"o": other.origin, "s": "s1", "e": "state", "d": {"x": 1}}))
    assert [(e.session_id, e.name, e.data) for e in got] == [("s1", "state", {"x": 1})]
