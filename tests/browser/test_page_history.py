"""The durable tree beside what the model sees: branch navigation after an edit and a fork
(SPEC O2, O3 as the page shows them), checkpoint detail, text shown as text, and the layout
at 1280×800 and at a phone's 390×844."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from tests.fakeserver import Reply

from .conftest import Stack
from .harness import PHONE
from .test_page_compaction import TURNS, open_session, user_texts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def tree_node(page: Any, text: str) -> Any:
    return page.locator("#tree li.node", has_text=text)


def test_o2_o3_branch_navigation_after_edit_and_fork(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "branches", ["First question", "Original wording"])
    open_session(page, stack, session_id)

    # Edit the last message: it becomes a sibling on a new branch (the old one is kept).
    page.click("#edit")
    draft = page.locator("#draft")
    expect(draft).to_have_value("Original wording")
    expect(draft).to_be_focused()
    draft.fill("Edited wording")
    draft.press("Enter")
    expect(page.locator("#messages .msg.user").last).to_contain_text("Edited wording")
    expect(page.locator("#messages")).not_to_contain_text("Original wording")

    edited = tree_node(page, "Edited wording")
    expect(edited.locator(".branch-pos")).to_have_text("2 / 2")
    expect(edited).not_to_have_class(re.compile(r"\boff\b"))
    # Back to the first branch: its nodes are shown greyed (not on the session's branch).
    edited.get_by_role("button", name="Previous branch").click()
    original = tree_node(page, "Original wording")
    expect(original.locator(".branch-pos")).to_have_text("1 / 2")
    expect(original).to_have_class(re.compile(r"\boff\b"))
    expect(page.locator("#tree li.node.off")).to_have_count(2)  # the old message and its reply
    expect(original.get_by_role("button", name="Previous branch")).to_be_focused()
    # Keyboard: the arrows are buttons, Enter moves on.
    page.keyboard.press("Enter")
    expect(tree_node(page, "Edited wording").locator(".branch-pos")).to_have_text("2 / 2")
    expect(page.locator("#tree li.node.off")).to_have_count(0)

    # Fork from the first reply: a new session continues from there, and the page opens it.
    before = page.locator("#session-select option").count()
    first_reply = page.locator("#tree li.node.message", has=page.locator(".fork")).first
    first_reply.locator("button.fork").click()
    expect(page.locator("#notice")).to_contain_text("Forked")
    expect(page.locator("#session-select option")).to_have_count(before + 1)
    assert session_id not in page.url
    expect(page.locator("#messages")).to_contain_text("First question")
    expect(page.locator("#messages")).not_to_contain_text("wording")
    page.locator("#draft").fill("Continuing the fork")
    page.locator("#draft").press("Enter")
    expect(page.locator("#messages .msg.user").last).to_contain_text("Continuing the fork")
    # The original session is untouched and still reachable from the list.
    page.select_option("#session-select", session_id)
    expect(page.locator("#messages")).to_contain_text("Edited wording")
    expect(page.locator("#messages")).not_to_contain_text("Continuing the fork")


def test_checkpoint_detail_and_projection(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "checkpoint", TURNS)
        client.post(f"/v1/sessions/{session_id}/compact", json={}).raise_for_status()
        projection = client.get(f"/v1/sessions/{session_id}/projection").json()
    open_session(page, stack, session_id)
    checkpoint = projection["checkpoint"]["payload"]
    # The projection: summary, ledger, raw tail, token counts.
    expect(page.locator("#projection-summary")).to_contain_text("## ")
    expect(page.locator("#projection")).to_contain_text("refs/library.bib")  # in the ledger
    tail = page.locator("#projection-tail > li")
    expect(tail).to_have_count(len(projection["messages"]))
    expect(page.locator("#projection-counts")).to_contain_text(f"{projection['limit']:,}")
    # The checkpoint's detail, from the tree.
    checkpoint_node = page.locator("#tree li.node.checkpoint")
    checkpoint_node.get_by_role("button", name="Checkpoint details").click()
    dialog = page.locator("#checkpoint-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"{checkpoint['tokens_before']:,}")
    expect(dialog).to_contain_text(checkpoint["summarizer"])
    folded = dialog.locator("ol.folded > li")
    assert folded.count() >= 2
    expect(folded.first).to_contain_text("related-work")  # the first user message was folded
    # Issue 40 (Q2): why it ran and what it saved, as the checkpoint stored it; the realised
    # saving comes from the session's cost (no request has followed the compaction yet).
    why = dialog.get_by_role("region", name="Why it ran")
    expect(why).to_contain_text("manual (asked by the user)")
    stored = checkpoint["details"]["explanation"]
    expect(why).to_contain_text(f"{stored['tokens_before']:,} → {stored['tokens_after']:,} tokens")
    expect(why).to_contain_text("expected saving")
    expect(why).to_contain_text("no request since")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_text_is_shown_as_text_never_as_html(page: Any, stack: Stack) -> None:
    hostile = '<img src=x onerror="window.__pwned=1"><b>bold</b><script>window.__pwned=2</script>'
    with stack.client() as client:
        session_id = stack.new_session(client, "<i>title</i>", [hostile])
    open_session(page, stack, session_id)
    expect(page.locator("#messages .msg.user").first).to_contain_text(hostile)
    expect(page.locator("#tree")).to_contain_text("<b>bold</b>")
    for pane in ("#messages", "#tree", "#projection", "#session-select"):
        assert page.locator(f"{pane} img, {pane} b, {pane} script, {pane} i").count() == 0
    assert page.evaluate("window.__pwned") is None


def no_horizontal_overflow(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width}px wide"


def test_readable_at_desktop_and_phone_width(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "layout", TURNS)
    open_session(page, stack, session_id)
    for pane in ("#chat-pane", "#history-pane", "#model-pane"):  # side by side at 1280×800
        expect(page.locator(pane)).to_be_in_viewport()
    expect(page.locator("#draft")).to_be_in_viewport()
    no_horizontal_overflow(page)

    page.set_viewport_size(PHONE)
    expect(page.locator("#tab-history")).to_be_visible()
    expect(page.locator("#draft")).to_be_in_viewport()
    expect(page.locator("#history-pane")).to_be_hidden()
    no_horizontal_overflow(page)
    page.click("#tab-history")
    expect(page.locator("#history-pane")).to_be_visible()
    expect(page.locator("#chat-pane")).to_be_hidden()
    page.click("#tab-model")
    expect(page.locator("#projection-counts")).to_be_in_viewport()
    no_horizontal_overflow(page)


def test_keyboard_only_send(page: Any, stack: Stack) -> None:
    """Tab reaches the message box, Enter sends, focus is visible."""
    with stack.client() as client:
        session_id = stack.new_session(client, "keyboard", ["hello"])
    open_session(page, stack, session_id)
    page.locator("body").focus()
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "draft":
            break
    assert page.evaluate("document.activeElement.id") == "draft"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    page.keyboard.type("typed without a mouse")
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.user").last).to_contain_text("typed without a mouse")
    for label in ("Message", "Model", "Session", "Token"):
        expect(page.get_by_label(label, exact=True)).to_have_count(1)


def test_import_and_replay_with_chart(page: Any, stack: Stack) -> None:
    page.goto(stack.url + "/")
    page.click("#tab-replay")
    page.set_input_files("#replay-file", str(FIXTURES / "pi-mono" / "large-session.jsonl"))
    page.fill("#replay-window", "32768")
    answered: list[dict[str, Any]] = []

    def keep_report(route: Any) -> None:  # the server's own report, as the page gets it
        response = route.fetch()
        answered.append(response.json())
        route.fulfill(response=response)

    page.route("**/v1/replay?chart=json*", keep_report)
    page.click("#replay-submit")
    chart = page.locator("#replay-report svg.chart")
    expect(chart).to_be_visible(timeout=120_000)
    expect(chart.locator("polyline.estimated")).to_have_count(1)
    expect(chart.locator("polyline.recorded")).to_have_count(1)
    counts = page.locator("#replay-counts")
    compactions = int(counts.locator("dt:text-is('compactions') + dd").inner_text())
    assert compactions > 0
    expect(chart.locator(".compaction-mark")).to_have_count(compactions)
    expect(counts.locator("dt:text-is('over the limit') + dd")).to_have_text("0")
    # L5: the page shows the server's count of requests that carried a recall block.
    recalled = answered[0]["recall_requests"]
    expect(counts.locator("dt:text-is('with a recall block') + dd")).to_have_text(str(recalled))

    page.set_input_files("#import-file", str(FIXTURES / "claude-code" / "tool_heavy.jsonl"))
    page.fill("#import-title", "imported tool run")
    page.click("#import-submit")
    expect(page.locator("#session-select option:checked")).to_contain_text("imported tool run")
    expect(page.locator("#chat-pane")).to_be_visible()
    expect(page.locator("#tree li.node").first).to_be_visible()
    expect(page.locator("#messages .msg.tool").first).to_be_visible()


def test_o1_retry_and_model_switch_from_the_page(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        session_id = stack.new_session(client, "retry", ["Question one"])
    open_session(page, stack, session_id)
    stack.fake.enqueue(Reply(text="A second, different answer"), kind="chat")
    page.click("#retry")
    expect(page.locator("#messages .msg.assistant").last).to_contain_text("different answer")
    reply = tree_node(page, "different answer")
    expect(reply.locator(".branch-pos")).to_have_text("2 / 2")  # the old reply is kept
    reply.get_by_role("button", name="Previous branch").click()
    expect(page.locator("#tree li.node.off")).to_have_count(1)

    page.fill("#model-input", "offline/echo")
    page.press("#model-input", "Enter")
    expect(page.locator("#session-model")).to_have_text("offline/echo")
    page.locator("#draft").fill("after the switch")
    page.locator("#draft").press("Enter")
    expect(page.locator("#messages .msg.assistant").last).to_contain_text("(offline model)")


def test_new_session_on_the_default_offline_model(page: Any, stack: Stack) -> None:
    page.goto(stack.url + "/")
    page.click("#new-session")
    expect(page.locator("#messages")).to_contain_text("No messages yet")
    expect(page.locator("#draft")).to_be_focused()
    page.keyboard.type("first words")
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.assistant")).to_contain_text("first words")
    expect(page.locator("#gauge")).not_to_have_attribute("aria-valuetext", "no session")


def test_new_clicked_while_the_page_still_loads_keeps_the_new_session(
    page: Any, stack: Stack
) -> None:
    """A click on "New" before the page's first load finished: the load's own "open the
    latest session" must not land afterwards and take the new session (and the keyboard)
    away. The session listing is held back until the click has happened."""
    with stack.client() as client:
        older = stack.new_session(client, "an older session", ["hello"])
    held: list[Any] = []
    page.route("**/v1/sessions", lambda route: held.append(route)
               if route.request.method == "GET" else route.continue_())
    page.goto(stack.url + "/")
    page.click("#new-session")
    page.wait_for_timeout(200)  # the click is in; the page is still waiting for the listing
    assert held, "the page never asked for the session listing"
    for route in held:
        route.continue_()
    expect(page.locator("#messages")).to_contain_text("No messages yet")
    expect(page.locator("#draft")).to_be_focused()
    expect(page).not_to_have_url(re.compile(re.escape(older)))
    page.keyboard.type("typed into the new session")
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.assistant")).to_contain_text("typed into the new session")


def test_a_send_whose_answer_was_lost_is_not_stored_twice(page: Any, stack: Stack) -> None:
    """The page sends one Idempotency-Key per draft: the server stores the message and
    answers, the answer is lost on the way (the network fails), the draft comes back, and
    sending it again gets the stored turn instead of a second copy."""
    with stack.client() as client:
        session_id = stack.new_session(client, "lost answer", ["hello"])
    open_session(page, stack, session_id)
    keys: list[str | None] = []

    def lose_the_answer(route: Any) -> None:
        keys.append(route.request.headers.get("idempotency-key"))
        route.fetch()  # the server gets the message, stores it and answers...
        route.abort("connectionreset")  # ...and the answer never reaches the page

    page.route("**/messages", lose_the_answer)
    page.fill("#draft", "stored once, whatever the network does")
    page.click("#send")
    expect(page.locator("#notice")).to_contain_text("draft is kept")
    expect(page.locator("#draft")).to_have_value("stored once, whatever the network does")
    page.unroute("**/messages")

    def watch(request: Any) -> None:
        if request.url.endswith("/messages"):
            keys.append(request.headers.get("idempotency-key"))

    page.on("request", watch)
    page.click("#send")
    expect(page.locator("#draft")).to_have_value("")
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]
    assert user_texts(stack, session_id) == ["hello", "stored once, whatever the network does"]


def test_continue_on_a_viewed_branch(page: Any, stack: Stack) -> None:
    """A branch chosen with the arrows can be continued: a new session (a fork at the
    branch's last reply, SPEC O3) opens with that branch's history; the original stays."""
    with stack.client() as client:
        session_id = stack.new_session(client, "continue", ["First question", "Old wording"])
        client.post(f"/v1/sessions/{session_id}/edit", json={"text": "New wording"}
                    ).raise_for_status()
    open_session(page, stack, session_id)
    expect(page.locator("#tree .continue-branch")).to_have_count(0)  # on the session's branch
    tree_node(page, "New wording").get_by_role("button", name="Previous branch").click()
    expect(tree_node(page, "Old wording")).to_have_class(re.compile(r"\boff\b"))
    go_on = page.get_by_role("button", name="Continue on this branch")
    expect(go_on).to_be_enabled()
    before = page.locator("#session-select option").count()
    go_on.click()
    expect(page.locator("#session-select option")).to_have_count(before + 1)
    assert session_id not in page.url
    expect(page.locator("#messages")).to_contain_text("Old wording")
    expect(page.locator("#messages")).not_to_contain_text("New wording")
    expect(page.locator("#tree .continue-branch")).to_have_count(0)
    page.locator("#draft").fill("Going on from the old wording")
    page.locator("#draft").press("Enter")
    expect(page.locator("#messages .msg.user").last).to_contain_text("Going on from the old")
    with stack.client() as client:  # the session we came from still ends where it ended
        tree = client.get(f"/v1/sessions/{session_id}/tree").json()
    on_branch = [n["text"] for n in tree["nodes"] if n["on_branch"] and n["role"] == "user"]
    assert on_branch == ["First question", "New wording"]
