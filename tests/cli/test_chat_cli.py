"""`contextfold chat` in a pseudo-terminal (pexpect) against the local fake provider: send,
automatic compaction behind the spinner, Ctrl-C during compaction keeps the draft."""

from __future__ import annotations

import os
import sys

import pexpect
import pytest

from tests.cli.chat_driver import PROMPT, quit_chat
from tests.fakeserver import Reply, server_fixture

fake = server_fixture()


def _spawn(fake, tmp_path, *extra: str) -> pexpect.spawn:
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "40",
           "CONTEXTFOLD_DB": f"sqlite:///{tmp_path / 'chat.db'}"}
    args = ["-m", "contextfold", "chat", "--model", "fake-chat", "--provider",
            "openai-compatible", "--base-url", fake.openai_url, "--context-window", "4000",
            "--max-output", "1000", *extra]
    return pexpect.spawn(sys.executable, args, env=env, encoding="utf-8", timeout=60,
                         dimensions=(40, 120))


def _words(n: int) -> str:
    return " ".join(f"lorem{i % 97}" for i in range(n))


def _chat_texts(fake) -> list[str]:
    return [str(r.messages[-1].get("content")) for r in fake.requests if not r.is_summary]


def test_chat_send_and_resume(fake, tmp_path):  # C5 U1
    fake.enqueue(Reply(text="Hello, I am the fake model."), kind="chat")
    child = _spawn(fake, tmp_path)
    child.expect(PROMPT)
    child.sendline("Hi there")
    child.expect("assistant>")
    child.expect("Hello, I am the fake model.")
    child.expect(r"context [\d,]+ / [\d,]+ tokens")  # the live gauge
    child.expect(PROMPT)
    child.sendline("/context")  # a breakdown by category, as the page and `context` show
    child.expect("Tools")
    child.expect("Recent messages")
    child.expect("Free")
    child.expect("next compaction")
    child.expect(PROMPT)
    child.sendline("/request")  # the request in full
    child.expect("Hi there")
    child.expect(PROMPT)
    session = quit_chat(child)

    resumed = _spawn(fake, tmp_path, "--session", session)
    resumed.expect(PROMPT)
    resumed.sendline("/history")
    resumed.expect("Hello, I am the fake model.")
    resumed.expect(PROMPT)
    resumed.sendline("/quit")
    resumed.expect(pexpect.EOF)


def test_chat_compacts_automatically_and_ctrl_c_keeps_the_draft(fake, tmp_path):  # A1 U1 U2 U3 C4
    # The first summary never comes, so only the Ctrl-C below can end that compaction. A
    # delayed summary (30 s) made the outcome depend on how fast a loaded machine reaches
    # the Ctrl-C: in two full runs the draft was answered first and the test timed out.
    fake.enqueue(Reply(hang=True), kind="summary")
    child = _spawn(fake, tmp_path, "--summarizer-model", "fake-summariser")
    child.expect(PROMPT)
    for turn in range(40):
        child.sendline(f"question {turn}: {_words(60)}")
        child.expect("assistant>")
        if child.expect([PROMPT, "Compacting earlier context"]) == 1:
            child.expect(PROMPT)  # compacting in the background; the input is free
            break
    else:
        pytest.fail("no automatic compaction started")
    for _ in range(200):  # the summariser's request reached the server
        if fake.summary_requests:
            break
        child.expect(pexpect.TIMEOUT, timeout=0.05)
    assert fake.summary_requests

    child.sendline("my precious draft")
    child.expect("Compacting earlier context")  # the send waits behind the spinner
    child.sendintr()
    child.expect("cancelled")
    child.expect(PROMPT + "my precious draft")  # back on the input line, unsent
    assert not any("my precious draft" in t for t in _chat_texts(fake))

    child.sendline("")  # Enter sends the kept draft
    child.expect("assistant>")
    child.expect(PROMPT)
    assert sum("my precious draft" in t for t in _chat_texts(fake)) == 1
    child.sendline("/compact keep the lorem numbers")
    child.expect(r"compacted|nothing to compact")
    child.expect(PROMPT)
    child.sendline("/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_pin_pins_unpin(fake, tmp_path):  # N1 N2
    child = _spawn(fake, tmp_path)
    child.expect(PROMPT)
    child.sendline("/pin Never overwrite data/raw.csv")
    child.expect(r"\(1 active\)")
    child.expect("Never overwrite data/raw.csv")
    child.expect(PROMPT)
    child.sendline("/pin " + _words(400))  # over the pin budget of a 4k model
    child.expect("pin budget")
    child.expect(PROMPT)
    child.sendline("Hello")
    child.expect("assistant>")
    child.expect(PROMPT)
    assert "Never overwrite data/raw.csv" in str(
        [r.messages for r in fake.requests if not r.is_summary][-1])
    child.sendline("/unpin 1")
    child.expect("unpinned")
    child.expect("no pins")
    child.expect(PROMPT)
    child.sendline("/unpin 3")
    child.expect("with N from")
    child.expect(PROMPT)
    child.sendline("/quit")
    child.expect(pexpect.EOF)


def test_chat_resumes_by_prefix_with_the_sessions_model(fake, tmp_path):  # issue 41
    """`--session` takes any unique prefix (or `latest`), and without `--model` the chat
    goes on with the model the session was written with."""
    fake.enqueue(Reply(text="First answer."), kind="chat")
    child = _spawn(fake, tmp_path)
    child.expect(PROMPT)
    child.sendline("Hi there")
    child.expect("First answer.")
    child.expect(PROMPT)
    session = quit_chat(child)

    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120", "LINES": "40",
           "CONTEXTFOLD_DB": f"sqlite:///{tmp_path / 'chat.db'}"}
    for ref in (session[:-6], "latest"):
        fake.enqueue(Reply(text="Second answer."), kind="chat")
        args = ["-m", "contextfold", "chat", "--session", ref, "--provider",
                "openai-compatible", "--base-url", fake.openai_url, "--context-window", "4000"]
        resumed = pexpect.spawn(sys.executable, args, env=env, encoding="utf-8", timeout=60,
                                dimensions=(40, 120))
        resumed.expect("fake-chat")  # the banner names the session's model
        resumed.expect(PROMPT)
        resumed.sendline("And now?")
        resumed.expect("Second answer.")
        resumed.expect(PROMPT)
        resumed.sendline("/quit")
        resumed.expect(f"resume with --session {session}")
        resumed.expect(pexpect.EOF)
        resumed.close()
        assert resumed.exitstatus == 0
        sent = [r for r in fake.requests if not r.is_summary]
        assert sent[-1].body["model"] == "fake-chat"
