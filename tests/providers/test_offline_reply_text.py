"""The offline model's reply reads as written English (issue 25, item 13): one full stop
after the quote however it ends, and "1 message", not "1 messages"."""

from __future__ import annotations

import pytest

from contextfold.core.values.messages import text_message
from contextfold.providers.base import simple_request
from contextfold.providers.offline import OfflineModel


def reply(*texts: str) -> str:
    messages = [text_message("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    return OfflineModel("offline/echo").reply_text(simple_request(messages))


@pytest.mark.parametrize("said", ["Write two sentences.", "Really?", "Wow!", "no stop"])
def test_one_full_stop_after_the_quote(said: str) -> None:
    text = reply(said)
    assert ".." not in text and "?." not in text and "!." not in text
    assert said in text


def test_the_count_agrees_with_its_noun() -> None:
    assert "I see 1 message in this request." in reply("hello")
    assert "I see 3 messages in this request." in reply("hello", "hi", "again")


def test_a_long_quote_is_cut_with_one_ellipsis() -> None:
    text = reply("word " * 100)
    assert "…" in text and "…." not in text and "..." not in text
