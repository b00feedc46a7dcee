"""Screenshots of the page for the docs: `python -m tests.browser.shots [DIR]` (default docs/img).

Runs the same stack as the browser tests (the service, the fake model, a held summariser),
builds a small research session with a checkpoint and an edited branch, and saves:
page-desktop.png (1280×800), page-phone-compacting.png (390×844, a compaction running, a
draft waiting), page-checkpoint.png (a checkpoint's detail), page-replay.png (a replay
chart), page-breakdown.png, page-search.png, page-sessions.png, page-settings.png and
their phone views page-phone-breakdown.png, page-phone-sessions.png, page-phone-replay.png.
Not a test: a way to look at the page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tests.fakeserver import Reply, fake_server

from .conftest import _stack
from .harness import CHROMIUM, CHROMIUM_ARGS, DESKTOP, PHONE

ROOT = Path(__file__).resolve().parents[2]
CONVERSATION = [
    ("We are writing the related-work section of the paper. The bibliography is "
     "refs/library.bib; never overwrite it, only append.",
     "Understood: I will only append to refs/library.bib. Which papers should the section "
     "cover first?"),
    ("Start with the compaction papers: DOI 10.1145/3600006.3613165 and the Zotero item "
     "QW7XK2PA. Summarise their methods in two sentences each.",
     "Both fold old turns into a structured summary; the first keeps a verbatim tail, the "
     "second an identifier ledger. I added both to the outline."),
    ("Good. Now compare their evaluation: which long-horizon benchmarks did they use and "
     "what context windows?",
     "The first evaluates at 32k and 128k on agentic coding tasks; the second on 200-turn "
     "research dialogues at 16k. Neither reports cancelled compactions."),
    ("Draft the paragraph on evaluation, at most 120 words, citing both.",
     "**Draft** (at most 120 words):\n\n- Prior work evaluates compaction on long-horizon "
     "agents at 16k-128k windows [10.1145/3600006.3613165; QW7XK2PA].\n- Neither reports "
     "cancelled compactions; see `refs/library.bib`."),
]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with fake_server() as fake, tempfile.TemporaryDirectory() as tmp:
        stack_iter = _stack(Path(tmp), fake, auth=False)
        stack = next(stack_iter)
        with stack.client() as client:
            sid = stack.new_session(client, "Related work, section 2")
            for text, reply in CONVERSATION:
                fake.enqueue(Reply(text=reply), kind="chat")
                client.post(f"/v1/sessions/{sid}/messages", json={"text": text}
                            ).raise_for_status()
            client.post(f"/v1/sessions/{sid}/compact", json={}).raise_for_status()
            fake.enqueue(Reply(text="Here is the table of benchmarks and windows."), kind="chat")
            client.post(f"/v1/sessions/{sid}/messages",
                        json={"text": "Add a table of benchmarks and windows."}
                        ).raise_for_status()
            fake.enqueue(Reply(text="A shorter table: two rows."), kind="chat")
            client.post(f"/v1/sessions/{sid}/edit",
                        json={"text": "Add a short table of benchmarks and windows."}
                        ).raise_for_status()
            # More rows for the session list: an import and another chat.
            client.post("/v1/import", params={"title": "Claude Code: fix the parser"},
                        content=(ROOT / "tests/fixtures/claude-code/short.jsonl").read_bytes()
                        ).raise_for_status()
            other = stack.new_session(client, "Release notes, v0.4")
            fake.enqueue(Reply(text="Here is a first outline of the notes."), kind="chat")
            client.post(f"/v1/sessions/{other}/messages",
                        json={"text": "Outline the release notes."}).raise_for_status()
            client.patch(f"/v1/sessions/{other}", json={"archived": True}).raise_for_status()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM),
                                                 args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=DESKTOP)
            page.goto(f"{stack.url}/#session={sid}")
            expect(page.locator("#tree li.node.checkpoint")).to_be_visible()
            page.screenshot(path=out / "page-desktop.png")

            page.locator("#tree li.node.checkpoint button", has_text="Details").click()
            expect(page.locator("#checkpoint-dialog")).to_be_visible()
            page.screenshot(path=out / "page-checkpoint.png")
            page.keyboard.press("Escape")

            # The new views of issue 25: breakdown and pins, search, sessions, settings.
            page.locator("#messages .msg.user", has_text="never overwrite").get_by_role(
                "button", name="Pin this message").click()
            expect(page.locator("#pin-list li")).to_have_count(1)
            page.screenshot(path=out / "page-breakdown.png")
            page.fill("#search-input", "QW7XK2PA")
            page.press("#search-input", "Enter")
            expect(page.locator("#search-results .search-hit").first).to_be_visible()
            page.locator("#search-results .hit-open").first.click()
            page.screenshot(path=out / "page-search.png")
            page.click("#tab-sessions")
            page.check("#show-archived")
            expect(page.locator("#session-list li.session-row")).to_have_count(3)
            page.screenshot(path=out / "page-sessions.png")
            page.click("#tab-settings")
            expect(page.locator("#settings-counts")).to_be_visible()
            page.screenshot(path=out / "page-settings.png")

            page.click("#tab-replay")
            page.set_input_files("#replay-file",
                                 str(ROOT / "tests/fixtures/pi-mono/large-session.jsonl"))
            page.fill("#replay-window", "32768")
            page.click("#replay-submit")
            expect(page.locator("#replay-report svg.chart")).to_be_visible(timeout=120_000)
            page.locator("#replay-report").scroll_into_view_if_needed()
            page.screenshot(path=out / "page-replay.png")

            phone = browser.new_page(viewport=PHONE)
            phone.goto(f"{stack.url}/#session={sid}")
            expect(phone.locator("#compact")).to_be_enabled()
            phone.click("#tab-model")
            expect(phone.locator("#context-breakdown")).to_be_visible()
            phone.screenshot(path=out / "page-phone-breakdown.png")
            phone.click("#tab-sessions")
            expect(phone.locator("#session-list li.session-row").first).to_be_visible()
            phone.screenshot(path=out / "page-phone-sessions.png")
            phone.click("#tab-replay")
            phone.set_input_files("#replay-file",
                                  str(ROOT / "tests/fixtures/pi-mono/large-session.jsonl"))
            phone.fill("#replay-window", "32768")
            phone.click("#replay-submit")
            expect(phone.locator("#replay-report svg.chart")).to_be_visible(timeout=120_000)
            phone.locator("#replay-report svg.chart").scroll_into_view_if_needed()
            phone.screenshot(path=out / "page-phone-replay.png")
            phone.click("#tab-chat")
            expect(phone.locator("#compact")).to_be_enabled()
            stack.gate.hold()
            phone.click("#compact")
            expect(phone.locator("#compacting")).to_be_visible()
            phone.locator("#draft").fill("Now tighten the paragraph to 90 words.")
            phone.locator("#draft").press("Enter")
            expect(phone.locator("#send-status")).to_contain_text("Waiting")
            phone.screenshot(path=out / "page-phone-compacting.png")
            stack.gate.release()
            browser.close()
        for _ in stack_iter:
            pass
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img")
