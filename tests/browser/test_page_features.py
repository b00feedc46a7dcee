"""The page features of issue 25 (item 12) in Chromium: the session list (rename, archive,
export, which face made it), search over the branch (SPEC L1, L4), pins from the page
(N1, N2), Markdown and collapsed tool output, dates, the context breakdown that adds up to
the gauge (E9), the settings view, and the replay chart's compaction marks."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from tests.fakeserver import Reply

from .conftest import Stack
from .harness import PHONE
from .test_page_compaction import TURNS, open_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def number(text: str) -> int:
    return int(re.sub(r"[^0-9]", "", text))


def test_session_list_rename_archive_export(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        first = stack.new_session(client, "Listed first", ["hello list"])
        stack.new_session(client, "Listed second", ["hello again"])
    open_session(page, stack, first)
    page.click("#tab-sessions")
    row = page.locator("#session-list li.session-row", has_text="Listed first")
    expect(row).to_be_visible()
    expect(row.locator(".face")).to_have_text("service")
    expect(row.locator("time")).to_contain_text("today")  # a date, not a bare clock time
    expect(row).to_have_class(re.compile(r"\bopen\b"))

    # Rename with the keyboard only: the button, type, Enter.
    row.get_by_role("button", name="Rename Listed first").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".rename-input")).to_be_focused()
    page.keyboard.type("Renamed from the page")
    page.keyboard.press("Enter")
    renamed = page.locator("#session-list li.session-row", has_text="Renamed from the page")
    expect(renamed).to_be_visible()
    expect(page.locator("#session-select option:checked")).to_contain_text("Renamed from the page")
    with stack.client() as client:
        assert client.get(f"/v1/sessions/{first}").json()["title"] == "Renamed from the page"

    # Export: a JSON download with the durable branch and the next request.
    with page.expect_download() as download:
        renamed.get_by_role("button", name="Export Renamed from the page").click()
    document = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    assert document["session"]["session_id"] == first
    assert [n["text"] for n in document["branch"] if n["role"] == "user"] == ["hello list"]
    assert document["request"]["messages"][0]["role"] == "user"

    # Archive hides it (nothing deleted); "Show archived" brings it back, marked.
    renamed.get_by_role("button", name="Archive Renamed from the page").click()
    rows = page.locator("#session-list li.session-row", has_text="Renamed from the page")
    expect(rows).to_have_count(0)
    expect(page.locator("#sessions-status")).to_contain_text("nothing deleted")
    page.check("#show-archived")
    archived = page.locator("#session-list li.session-row.archived",
                            has_text="Renamed from the page")
    expect(archived).to_be_visible()
    archived.get_by_role("button", name="Unarchive Renamed from the page").click()
    expect(page.locator("#session-list li.session-row.archived")).to_have_count(0)
    # Open from the list: the chat shows it.
    page.locator("#session-list .session-open", has_text="Listed second").click()
    expect(page.locator("#chat-pane")).to_be_visible()
    expect(page.locator("#messages .msg.user").first).to_contain_text("hello again")


def test_l1_l4_search_box_finds_compacted_history_and_opens_it(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "search", [*TURNS, "a later question about ferns"])
        client.post(f"/v1/sessions/{sid}/compact", json={}).raise_for_status()
    open_session(page, stack, sid)
    expect(page.locator("#messages .checkpoint-note")).to_be_visible()
    page.fill("#search-input", "ABCD1234")  # only in a turn the checkpoint folded (L1)
    page.press("#search-input", "Enter")
    hits = page.locator("#search-results .search-hit")
    expect(hits).to_have_count(1)
    expect(hits.first).to_contain_text("ABCD1234")
    expect(page.locator("#search-results")).to_contain_text("1 match on this branch")
    hits.first.get_by_role("button").click()
    found = page.locator("#messages li.msg.found")
    expect(found).to_contain_text("ABCD1234")
    expect(found).to_be_focused()
    page.fill("#search-input", "zebraword")
    page.press("#search-input", "Enter")
    expect(page.locator("#search-results")).to_contain_text("Nothing on this branch matches")
    page.press("#search-input", "Escape")
    expect(page.locator("#search-results")).to_be_hidden()


def test_n1_n2_pins_from_the_page(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "pins", ["never overwrite refs/library.bib"])
    open_session(page, stack, sid)
    pins = page.locator("#model-pane section[aria-label='Pins'] h3")
    expect(pins).to_have_text("Pins: 0")
    user = page.locator("#messages .msg.user").first
    user.get_by_role("button", name="Pin this message").click()
    expect(pins).to_have_text("Pins: 1")
    expect(page.locator("#pin-list")).to_contain_text("never overwrite refs/library.bib")
    expect(user.get_by_role("button", name="Unpin this message")).to_be_visible()
    # A short text pinned from the form, with the keyboard.
    # A refresh may land while this is typed (the event stream's first "state" event schedules
    # one): it once rebuilt the field and lost the text and the Enter under load.
    page.fill("#pin-text", "cite with DOIs")
    page.press("#pin-text", "Enter")
    expect(pins).to_have_text("Pins: 2", timeout=20_000)  # a POST and a refresh
    # Unpin from the projection: an unpin event, the pin event stays in the history (N2).
    page.get_by_role("button", name=re.compile(r"^Unpin: never overwrite")).click()
    expect(pins).to_have_text("Pins: 1")
    again = page.locator("#messages .msg.user").first
    expect(again.get_by_role("button", name="Pin this message")).to_be_visible()
    with stack.client() as client:
        kinds = [n["kind"] for n in client.get(f"/v1/sessions/{sid}/tree").json()["nodes"]]
        assert kinds.count("pin") == 3
        assert [p["text"] for p in client.get(f"/v1/sessions/{sid}/projection").json()["pins"]] == \
            ["cite with DOIs"]


def test_markdown_code_links_and_collapsed_tool_output(page: Any, stack: Stack,
                                                       tmp_path: Path) -> None:
    stack.fake.enqueue(Reply(text=(
        "Here is **the plan** with `refs/library.bib`:\n\n```python\nprint('<b>hi</b>')\n```\n"
        "- first\n- second\n\n[bad](javascript:alert(1)) and [docs](https://example.org/x)")),
        kind="chat")
    with stack.client() as client:
        sid = stack.new_session(client, "markdown", ["show me markdown"])
    open_session(page, stack, sid)
    reply = page.locator("#messages .msg.assistant").last
    expect(reply.locator("strong")).to_have_text("the plan")
    expect(reply.locator("p code")).to_have_text("refs/library.bib")
    expect(reply.locator("pre.md-code code")).to_have_text("print('<b>hi</b>')")
    expect(reply.locator("pre.md-code b")).to_have_count(0)  # code is text, never markup
    expect(reply.locator("ul li")).to_have_count(2)
    link = reply.locator("a")
    expect(link).to_have_count(1)  # javascript: stays text
    expect(link).to_have_attribute("href", "https://example.org/x")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(reply).to_contain_text("[bad](javascript:alert(1))")

    # An imported run: a long tool output is collapsed; an empty reply says "(no text)".
    recording = {"messages": [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": "\n".join(f"file-{i}.txt" for i in range(60))},
        {"role": "assistant", "content": ""},
    ]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(recording), encoding="utf-8")
    page.click("#tab-replay")
    page.set_input_files("#import-file", str(path))
    page.fill("#import-title", "a tool run")
    page.click("#import-submit")
    expect(page.locator("#session-select option:checked")).to_contain_text("a tool run")
    long = page.locator("#messages details.tool-result.long")
    expect(long).to_have_count(1)
    expect(long.locator("summary")).to_contain_text("60 lines")
    expect(long.locator("pre")).to_be_hidden()
    long.locator("summary").click()
    expect(long.locator("pre")).to_contain_text("file-59.txt")

    # A Pi reply that was aborted before any text: "(no text)", never a blank card.
    pi = tmp_path / "pi.jsonl"
    pi.write_text("\n".join(json.dumps(e) for e in [
        {"type": "session", "id": "pi-empty", "timestamp": "2025-11-20T23:33:50.805Z", "cwd": "/w",
         "provider": "anthropic", "modelId": "claude-sonnet-4-5"},
        {"type": "message", "timestamp": "2025-11-20T23:34:01.550Z",
         "message": {"role": "user", "content": [{"type": "text", "text": "go on"}]}},
        {"type": "message", "timestamp": "2025-11-20T23:34:02.351Z",
         "message": {"role": "assistant", "content": [], "provider": "anthropic",
                     "model": "claude-sonnet-4-5", "stopReason": "aborted",
                     "errorMessage": "Request was aborted"}},
    ]) + "\n", encoding="utf-8")
    page.click("#tab-replay")
    page.set_input_files("#import-file", str(pi))
    page.fill("#import-title", "an aborted pi reply")
    page.click("#import-submit")
    empty = page.locator("#messages .msg.assistant .no-text")
    # The first Anthropic session of the process loads its SDK: allow for it.
    expect(empty).to_have_count(1, timeout=60_000)
    expect(empty).to_contain_text("(no text")


def test_e9_context_breakdown_adds_up_to_the_gauge_and_savings(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "breakdown", TURNS)
        client.post(f"/v1/sessions/{sid}/compact", json={}).raise_for_status()
        gauge = client.get(f"/v1/sessions/{sid}").json()["gauge"]
    open_session(page, stack, sid)
    table = page.locator("#context-breakdown table.breakdown")
    expect(table).to_be_visible()
    rows = table.locator("tbody tr")
    # system, tools, checkpoint, pins, recall, tail messages, tool results, free
    expect(rows).to_have_count(8)
    values = {r.get_attribute("data-category"): number(r.locator("td").first.inner_text())
              for r in rows.all()}
    used = sum(v for k, v in values.items() if k != "free")
    assert used == gauge["tokens"], (values, gauge)
    assert values["free"] == gauge["safe_input_limit"] - gauge["tokens"]
    assert values["checkpoint"] > 0 and values["tools"] > 0
    expect(page.locator("#gauge-text")).to_contain_text(f"{gauge['tokens']:,} /")
    # The saving against the whole history; a request larger than it is a loss (issue 41).
    with stack.client() as client:
        context = client.get(f"/v1/sessions/{sid}/context").json()
    saved = context["full_history_tokens"] - gauge["tokens"]
    assert context["saved_tokens"] == saved
    expect(page.locator("#context-savings")).to_contain_text(
        f"Saved: {saved:,} tokens" if saved >= 0 else f"Lost: the next request is {-saved:,}")
    expect(page.locator("#context-savings")).to_contain_text("1 compaction)")


def test_settings_view_names_keys_never_values(page: Any, stack: Stack) -> None:
    os.environ["MISTRAL_API_KEY"] = "sk-mistral-never-shown"
    try:
        page.goto(stack.url + "/")
        page.click("#tab-settings")
        counts = page.locator("#settings-counts")
        expect(counts).to_contain_text("default model")
        expect(counts).to_contain_text("offline/echo")
        expect(page.locator("#settings-keys")).to_contain_text("Mistral (MISTRAL_API_KEY)")
        assert "sk-mistral-never-shown" not in page.content()
    finally:
        del os.environ["MISTRAL_API_KEY"]


def test_item13_token_field_hidden_without_auth_and_ledger_kind_never_wraps(
        page: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "nits", TURNS)
        client.post(f"/v1/sessions/{sid}/compact", json={}).raise_for_status()
    open_session(page, stack, sid)
    expect(page.locator("#token-form")).to_be_hidden()  # no --auth: no token to give
    kind = page.locator("#model-pane table.ledger td").first
    expect(kind).to_be_visible()
    assert kind.evaluate("e => getComputedStyle(e).whiteSpace") == "nowrap"


def test_replay_errors_defaults_and_compaction_marks(page: Any, stack: Stack) -> None:
    claude = str(FIXTURES / "claude-code" / "tool_heavy.jsonl")
    page.goto(stack.url + "/")
    page.click("#tab-replay")
    # The default window is the recorded model's: it works for a Claude Code file.
    expect(page.locator("#replay-window")).to_have_value("")
    page.set_input_files("#replay-file", claude)
    page.click("#replay-submit")
    expect(page.locator("#replay-report svg.chart")).to_be_visible(timeout=120_000)
    # Too small a window: a sentence (no API field names or codes), the old report gone.
    page.fill("#replay-window", "32768")
    page.click("#replay-submit")
    status = page.locator("#replay-status")
    expect(status).to_have_class(re.compile(r"\berror\b"), timeout=120_000)
    text = status.inner_text()
    # Prose may have parentheses; an API field name or an error code in brackets may not.
    assert "context_window" not in text and "bad_request" not in text, text
    assert text[0].isupper() and "context window" in text
    expect(page.locator("#replay-report")).to_be_empty()

    # A replay with compactions: each mark is a button that opens what it did.
    page.fill("#replay-window", "32768")
    page.set_input_files("#replay-file", str(FIXTURES / "pi-mono" / "large-session.jsonl"))
    page.click("#replay-submit")
    marks = page.locator("#replay-report svg.chart .compaction-mark")
    expect(marks.first).to_be_visible(timeout=120_000)
    assert page.locator("#replay-report svg.chart .x-tick-label").count() >= 4
    marks.first.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#checkpoint-dialog")).to_be_visible()
    expect(page.locator("#replay-compaction")).to_contain_text("tokens before")
    expect(page.locator("#replay-summary")).not_to_be_empty()  # the checkpoint it wrote
    # Issue 40: the compaction explained, its realised saving over the requests after it.
    why = page.locator("#checkpoint-dialog").get_by_role("region", name="Why it ran")
    expect(why).to_contain_text("expected saving")
    expect(why).to_contain_text(re.compile(r"realised saving[+−]"))
    page.keyboard.press("Escape")


def test_replay_chart_readable_on_a_phone(page: Any, stack: Stack) -> None:
    page.set_viewport_size(PHONE)
    page.goto(stack.url + "/")
    page.click("#tab-replay")
    page.fill("#replay-window", "32768")
    page.set_input_files("#replay-file", str(FIXTURES / "pi-mono" / "large-session.jsonl"))
    page.click("#replay-submit")
    chart = page.locator("#replay-report svg.chart")
    expect(chart).to_be_visible(timeout=120_000)
    label = chart.locator(".x-tick-label").first
    # Drawn text scaled to the screen: at least 10 px tall on a 390 px phone.
    assert label.bounding_box()["height"] >= 10, label.bounding_box()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_import_stays_put_if_the_user_moved_on_and_a_re_import_names_the_holder(
        page: Any, stack: Stack) -> None:
    short = str(FIXTURES / "claude-code" / "short.jsonl")
    held: list[Any] = []
    page.goto(stack.url + "/")
    page.route("**/v1/import?**", lambda route: held.append(route))
    page.click("#tab-replay")
    page.set_input_files("#import-file", short)
    page.fill("#import-title", "moved on import")
    page.click("#import-submit")
    expect(page.locator("#import-result")).to_contain_text("Importing")
    page.click("#tab-sessions")  # the user moves on while the upload runs
    page.wait_for_function("() => true")  # give the route handler its turn
    assert held, "the import request was not held"
    held[0].continue_()
    expect(page.locator("#session-list")).to_contain_text("moved on import")
    expect(page.locator("#tab-sessions")).to_have_attribute("aria-pressed", "true")
    page.unroute("**/v1/import?**")

    # The same file again: refused, naming the session that holds it, with a way to open it.
    page.click("#tab-replay")
    page.set_input_files("#import-file", short)
    page.fill("#import-title", "")
    page.click("#import-submit")
    expect(page.locator("#import-result")).to_contain_text(
        "already stored in the session “moved on import”")
    page.click("#import-open-existing")
    expect(page.locator("#chat-pane")).to_be_visible()
    expect(page.locator("#session-select option:checked")).to_contain_text("moved on import")


def test_item7_compact_now_card_and_gauge_agree_and_growth_is_said(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "short compaction", ["hi", "ok"])
        before = client.get(f"/v1/sessions/{sid}").json()["gauge"]["tokens"]
    open_session(page, stack, sid)
    expect(page.locator("#gauge-text")).to_contain_text(f"{before:,} /")
    # The fake summariser writes a summary longer than two short turns: the request grows.
    page.click("#compact")
    note = page.locator("#messages .checkpoint-note")
    expect(note).to_be_visible()
    expect(page.locator("#notice")).to_contain_text("did not get smaller")
    with stack.client() as client:
        after = client.get(f"/v1/sessions/{sid}").json()["gauge"]["tokens"]
    # The card and the gauge count one quantity: the whole next request.
    expect(note).to_contain_text(f"{before:,} → ~{after:,} tokens (estimated")
    expect(note).to_contain_text("It did not make the request smaller")  # the card too
    expect(page.locator("#gauge-text")).to_contain_text(f"{after:,} /")


def test_an_unpriced_model_is_named_instead_of_a_dash(page: Any, stack: Stack) -> None:
    """The service's own cost of a session whose model has no catalog price (the fake
    model): the line says so, and which model, rather than "Cost so far: –."."""
    with stack.client() as client:
        sid = stack.new_session(client, "unpriced", ["hello"])
    open_session(page, stack, sid)
    cost = page.locator("#context-cost")
    expect(cost).to_contain_text("Cost so far: no price known for ")
    expect(cost).not_to_contain_text("–")


def test_cost_is_rendered_when_the_session_has_one(page: Any, stack: Stack) -> None:
    """The `cost` object another part of the service adds to a session: shown when present
    (the page never prices anything itself)."""
    with stack.client() as client:
        sid = stack.new_session(client, "cost", ["hello cost"])

    def with_cost(route: Any) -> None:
        answer = route.fetch()
        body = answer.json()
        body["cost"] = {"currency": "USD", "usd": 0.0123, "full_history_usd": 0.05,
                        "saved_usd": 0.0377 - saved[0],
                        "compactions": 1,
                        "input_tokens": 1200, "cached_tokens": 300, "cache_write_tokens": 0,
                        "output_tokens": 80, "summarizer_usd": None}
        body["cost"]["as_sent_usd"] = 0.05 - body["cost"]["saved_usd"]
        route.fulfill(response=answer, json=body)

    saved = [0.0]
    page.route(re.compile(rf".*/v1/sessions/{sid}$"), with_cost)
    open_session(page, stack, sid)
    cost = page.locator("#context-cost")
    expect(cost).to_contain_text("Cost so far: $0.0123")
    # "Saved" is the service's (full history against as sent, both modelled), beside both.
    expect(cost).to_contain_text("compaction saved $0.0377 against sending the full history")
    expect(cost).to_contain_text("the full history $0.0500, as sent $0.0123")
    expect(cost).to_contain_text("1,200 input tokens (300 cached)")
    # A negative saving is a loss, said as one, never "$0" (issue 41).
    saved[0] = 0.05
    page.reload()
    expect(cost).to_contain_text("compaction cost $0.0123 more than sending the full history",
                                 timeout=30_000)
    expect(cost).not_to_contain_text("saved")
