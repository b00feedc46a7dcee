"""What the chat tests share to drive `contextfold chat` in a pseudo-terminal (pexpect)."""

from __future__ import annotations

import pexpect

PROMPT = "you> "


def quit_chat(child: pexpect.spawn) -> str:
    """Type `/quit`, wait for the chat to end cleanly (exit 0); the session id it prints
    to resume with."""
    child.sendline("/quit")
    child.expect(r"resume with --session ([0-9a-f-]{36})")
    session = child.match.group(1)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    return session
