"""`contextfold chat` keeps every request inside the window the server really has: across a
`/model` switch, and after the provider names a smaller limit than the one it was told
(SPEC P2, P4). Runs the real command in a pseudo-terminal against the local fake provider,
which answers an over-window request with the provider's genuine context-length error.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pexpect

from tests.cli.chat_driver import PROMPT, quit_chat
from tests.fakeserver import server_fixture
from tests.runtime.test_runtime_support import assert_requests_fit

fake = server_fixture()


def _spawn(fake, tmp_path, window: int, *extra: str) -> pexpect.spawn:
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "160", "LINES": "40",
           "CONTEXTFOLD_DB": f"sqlite:///{tmp_path / 'chat.db'}"}
    args = ["-m", "contextfold", "chat", "--model", "fake-chat", "--provider",
            "openai-compatible", "--base-url", fake.openai_url, "--context-window", str(window),
            "--max-output", "1000", *extra]
    return pexpect.spawn(sys.executable, args, env=env, encoding="utf-8", timeout=90,
                         dimensions=(40, 160))


def _question(i: int, words: int = 250) -> str:
    return f"question {i}: " + " ".join(f"lorem{(i * 7 + k) % 89}" for k in range(words))


def test_model_switch_keeps_the_context_window_cap(fake, tmp_path):  # P2
    fake.configure(context_window=6000)
    child = _spawn(fake, tmp_path, 6000)
    child.expect(PROMPT)
    child.sendline("/model gpt-4o")  # the catalog says 128k; this server holds 6000
    child.expect(r"gpt-4o \(6,000-token window\)")
    for i in range(14):
        child.expect(PROMPT)
        child.sendline(_question(i))
        child.expect("assistant>")
    child.expect(PROMPT)
    quit_chat(child)
    assert len(fake.requests) >= 14
    assert_requests_fit(fake, 6000)  # no request over the window, none refused


def test_provider_limit_is_learned_for_the_model_and_session(fake, tmp_path):  # P4
    fake.configure(context_window=5000)
    child = _spawn(fake, tmp_path, 9000)  # the user over-states the window
    child.expect(PROMPT)
    learned_at = None
    for i in range(16):
        child.sendline(_question(i))
        if child.expect(["assistant>", "learned: fake-chat accepts ([\\d,]+) tokens"]) == 1:
            learned_at = i
            assert int(child.match.group(1).replace(",", "")) == 5000
            break
        child.expect(PROMPT)
    assert learned_at is not None, "the provider never refused"
    child.expect(PROMPT)
    child.sendline("")  # Enter on an empty line asks again: now sized for 5000
    child.expect("assistant>")
    for i in range(learned_at + 1, learned_at + 7):
        child.expect(PROMPT)
        child.sendline(_question(i))
        child.expect("assistant>")
    child.expect(PROMPT)
    session = quit_chat(child)
    refused = [r for r in fake.requests if r.outcome == "overflow"]
    assert len(refused) == 1  # refused once, then never again

    from contextfold.store import open_store

    async def stored() -> dict:
        store = await open_store(f"sqlite:///{tmp_path / 'chat.db'}")
        try:
            return (await store.get_session(session)).metadata
        finally:
            await store.close()

    assert asyncio.run(stored())["learned_context_windows"] == {"fake-chat": 5000}

    fake.reset(context_window=5000)  # resumed: the learned window applies from the start
    resumed = _spawn(fake, tmp_path, 9000, "--session", session)
    resumed.expect(r"fake-chat \(5,000-token window\)")
    for i in range(3):
        resumed.expect(PROMPT)
        resumed.sendline(_question(100 + i))
        resumed.expect("assistant>")
    resumed.expect(PROMPT)
    quit_chat(resumed)
    assert_requests_fit(fake, 5000)


def test_a_pasted_block_is_one_message(fake, tmp_path):
    child = _spawn(fake, tmp_path, 6000)
    child.expect(PROMPT)
    child.send("\x1b[200~first line\nsecond line\nthird line\x1b[201~")
    child.send("\r")
    child.expect("assistant>")
    child.expect(PROMPT)
    child.sendline('"""')
    child.sendline("alpha")
    child.sendline("beta")
    child.sendline('"""')
    child.expect("assistant>")
    child.expect(PROMPT)
    quit_chat(child)
    users = [r.messages[-1]["content"] for r in fake.requests if not r.is_summary]
    assert users == ["first line\nsecond line\nthird line", "alpha\nbeta"]
