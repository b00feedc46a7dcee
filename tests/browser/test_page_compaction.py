"""U1-U4 in a real browser: what a person sees and can do while earlier context is compacted.

The summaries come from the scripted fake model behind a gate the test holds (harness.py),
so the compaction window stays open exactly as long as each test needs.
"""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from .conftest import Stack

LOCK_REASON = "Not while earlier context is being compacted"
SENT = "Draft written while compacting: now add the summary table"
LOCKED = ["#retry", "#edit", "#compact", "#switch-model"]
TURNS = [
    "We are writing the related-work section; the bibliography is refs/library.bib. " * 6,
    "Check DOI 10.1000/xyz123 and the Zotero item ABCD1234 before citing them. " * 6,
    "Keep the section under two pages and never overwrite refs/library.bib. " * 6,
]


def open_session(page: Any, stack: Stack, session_id: str) -> None:
    page.goto(f"{stack.url}/#session={session_id}")
    expect(page.locator("#messages .msg.assistant").first).to_be_visible()
    expect(page.locator("#compact")).to_be_enabled()


def start_held_compaction(page: Any, stack: Stack) -> None:
    """Press "Compact now" with the summariser held: the compaction stays running."""
    stack.gate.hold()
    page.click("#compact")
    assert stack.gate.entered.wait(30), "the compaction never reached the summariser"
    expect(page.locator("#compacting")).to_be_visible()


def user_texts(stack: Stack, session_id: str) -> list[str]:
    with stack.client() as client:
        tree = client.get(f"/v1/sessions/{session_id}/tree").json()
    return [n["text"] for n in tree["nodes"] if n["role"] == "user"]


def test_u1_u2_u4_send_waits_for_the_compaction_then_goes_out(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "U2", TURNS)
    open_session(page, stack, session_id)
    start_held_compaction(page, stack)

    # U1: the banner says so and offers Cancel.
    expect(page.locator("#compacting")).to_contain_text("Compacting earlier context…")
    expect(page.locator("#cancel-compaction")).to_be_enabled()
    expect(page.locator("#cancel-compaction")).to_be_focused()  # keyboard: Enter cancels
    # U4: retry, edit, compact, model switch and fork are disabled, saying why.
    for selector in LOCKED:
        expect(page.locator(selector)).to_be_disabled()
    expect(page.locator("#retry")).to_have_attribute("title", LOCK_REASON)
    forks = page.locator("#tree button.fork")
    expect(forks.first).to_be_visible()
    for i in range(forks.count()):
        expect(forks.nth(i)).to_be_disabled()

    # U2: the input stays editable; Enter (an explicit send) freezes the draft, which waits.
    draft = page.locator("#draft")
    expect(draft).to_be_editable()
    draft.fill("Draft written while compacting: ")
    draft.press("End")
    draft.type("now add the summary table")
    draft.press("Enter")
    expect(draft).not_to_be_editable()
    expect(page.locator("#send-status")).to_contain_text("Waiting for the compaction")
    expect(page.locator("#messages .pending-user")).to_contain_text("now add the summary table")
    assert "now add the summary table" not in " ".join(user_texts(stack, session_id))

    # The compaction succeeds: the draft goes out by itself, after the checkpoint.
    stack.gate.release()
    expect(page.locator("#compacting")).to_be_hidden()
    expect(draft).to_have_value("")
    expect(draft).to_be_editable()
    last_user = page.locator("#messages .msg.user").last
    expect(last_user).to_have_text(ends_with(SENT))
    expect(page.locator("#messages .checkpoint-note")).to_have_count(1)
    for selector in LOCKED:
        expect(page.locator(selector)).to_be_enabled()
    assert user_texts(stack, session_id)[-1] == SENT


def ends_with(text: str) -> re.Pattern[str]:
    """A message bubble's text (header, then the message) that ends with exactly `text`."""
    return re.compile(re.escape(text) + r"\s*$")


def test_u1_u3_cancel_sends_nothing_and_keeps_the_draft(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "U3 cancel", TURNS)
    before = user_texts(stack, session_id)
    open_session(page, stack, session_id)
    start_held_compaction(page, stack)
    draft = page.locator("#draft")
    draft.fill("This must survive the cancel")
    page.click("#send")
    expect(draft).not_to_be_editable()

    page.click("#cancel-compaction")  # U1: it can be cancelled
    expect(page.locator("#notice")).to_contain_text("cancelled: nothing was sent")
    expect(page.locator("#compacting")).to_be_hidden()
    expect(draft).to_have_value("This must survive the cancel")  # U3: the draft is kept
    expect(draft).to_be_editable()
    expect(page.locator("#messages .pending-user")).to_have_count(0)
    expect(page.locator("#messages .checkpoint-note")).to_have_count(0)  # C4: rolled back
    stack.gate.release()
    assert user_texts(stack, session_id) == before  # nothing was sent or saved
    # The kept draft still sends normally afterwards.
    page.click("#send")
    expect(draft).to_have_value("")
    assert user_texts(stack, session_id)[-1] == "This must survive the cancel"


def test_u3_failed_compaction_sends_nothing_and_keeps_the_draft(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "U3 failure", TURNS)
    before = user_texts(stack, session_id)
    open_session(page, stack, session_id)
    start_held_compaction(page, stack)
    draft = page.locator("#draft")
    draft.fill("This must survive the failure")
    draft.press("Enter")
    expect(draft).not_to_be_editable()
    stack.fail_commits(True)
    try:
        stack.gate.release()
        expect(page.locator("#notice")).to_contain_text("compaction failed: nothing was sent")
        expect(draft).to_have_value("This must survive the failure")
        expect(draft).to_be_editable()
    finally:
        stack.fail_commits(False)
    expect(page.locator("#compacting")).to_be_hidden()
    assert user_texts(stack, session_id) == before


def test_u2_draft_survives_a_reload(page: Any, stack: Stack) -> None:
    """A draft typed but not sent is kept for the tab (sessionStorage), per session."""
    with stack.client() as client:
        session_id = stack.new_session(client, "draft", TURNS[:1])
    open_session(page, stack, session_id)
    page.locator("#draft").fill("half-written thought")
    page.reload()
    expect(page.locator("#draft")).to_have_value("half-written thought")
