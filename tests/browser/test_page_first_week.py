"""The page as a newcomer's first week meets it (issue 41), on the real Pi and Claude Code
sessions imported and compacted by the CLI: it opens the session active last, lists each
session's model and title as the CLI does, shows the same breakdown and estimate, shows a
message of thinking alone as thinking, never breaks an identifier of the ledger inside a
run of letters and digits, and shows no rule ids or internal words."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from contextfold.server import ServiceConfig
from tests.test_first_week import RULE_ID

from .harness import DESKTOP, Service

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
THINKING = [{"role": "user", "content": "Which file holds the settings?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The settings are usually in config.toml.",
                 "signature": "c2lnbmVk"}]},
            {"role": "assistant", "content": "config.toml holds them."}]


# The page's own words: its text without what people, models and tools wrote (messages,
# tool output, summaries, identifiers, titles), which may say anything.
OUR_WORDS = """() => {
  const copy = document.body.cloneNode(true);
  for (const n of copy.querySelectorAll(
      '.msg-text, .node-text, .summary-box, pre, .ledger, .tail, .hit-snippet, option, ' +
      '.session-open, .folded')) n.remove();
  return copy.innerText;
}"""


def cf(*args: str, db: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "contextfold", *args, "--json", "--db", db],
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The real sessions imported (the Pi one compacted: its ledger), a session of thinking
    alone imported last, then the Pi session compacted again: the one active last."""
    tmp = tmp_path_factory.mktemp("week")
    db = f"sqlite:///{tmp / 'week.db'}"
    pi = cf("import", str(FIXTURES / "pi-mono/large-session.jsonl"), db=db)["session_id"]
    claude = cf("import", str(FIXTURES / "claude-code/short.jsonl"), db=db)["session_id"]
    thinking = tmp / "thinking.json"
    thinking.write_text(json.dumps(THINKING))
    thought = cf("import", str(thinking), "--format", "anthropic", db=db)["session_id"]
    assert cf("compact", pi, db=db)["status"] == "compacted"
    rows = {r["session_id"]: r for r in cf("sessions", db=db)["sessions"]}
    service = Service(ServiceConfig(db=db)).start()
    try:
        yield {"url": service.url, "db": db, "pi": pi, "claude": claude, "thought": thought,
               "rows": rows}
    finally:
        service.stop()


def test_the_page_opens_the_session_active_last_with_the_clis_numbers(
        page: Any, week: dict[str, Any]) -> None:
    page.goto(week["url"] + "/")
    # The Pi session was imported first and compacted last: it is the one active last.
    # (Its first opening imports the Anthropic SDK: seconds on a loaded machine.)
    expect(page.locator("#session-model")).to_contain_text("claude-sonnet-4-5", timeout=90_000)
    expect(page).to_have_url(re.compile(f"#session={week['pi']}$"))
    options = page.locator("#session-select option")
    for sid, row in week["rows"].items():
        option = options.filter(has_text=sid[-6:])
        expect(option).to_contain_text(row["title"])
        expect(option).to_contain_text(row["model"])  # never "–" for an imported session
    context = cf("context", week["pi"], db=week["db"])
    table = page.locator("#context-breakdown table.breakdown")
    expect(table).to_be_visible()
    for key, tokens in context["parts"].items():
        expect(table.locator(f"tr[data-category='{key}'] td").first).to_have_text(
            f"{tokens:,}")
    expect(page.locator("#context-next")).to_contain_text(
        f"{context['next_compaction']['tokens_to_go']:,}")


def test_a_prefix_link_opens_the_session(page: Any, week: dict[str, Any]) -> None:
    page.goto(f"{week['url']}/#session={week['claude'][:-5]}")
    expect(page).to_have_url(re.compile(f"#session={week['claude']}$"), timeout=90_000)
    expect(page.locator("#messages .msg.user").first).to_be_visible(timeout=90_000)


def test_thinking_alone_is_shown_as_thinking(page: Any, week: dict[str, Any]) -> None:
    page.goto(f"{week['url']}/#session={week['thought']}")
    cards = page.locator("#messages .msg.assistant")
    expect(cards).to_have_count(2, timeout=90_000)
    first = cards.first.locator(".msg-text")
    expect(first).to_contain_text("Thinking")
    first.locator("summary").click()
    expect(first).to_contain_text("The settings are usually in config.toml.")
    for i in range(cards.count()):
        assert cards.nth(i).locator(".msg-text").inner_text().strip()


def test_the_ledger_never_breaks_an_identifier_inside_a_word(
        page: Any, week: dict[str, Any]) -> None:
    page.set_viewport_size(DESKTOP)
    page.goto(f"{week['url']}/#session={week['pi']}")
    cells = page.locator("#projection table.ledger td.ident")
    expect(cells.first).to_be_visible(timeout=90_000)
    # Every run of letters and digits of every identifier sits on one line (one client
    # rectangle); a long one may wrap only after its separators.
    broken = page.evaluate("""() => {
      const out = [];
      for (const td of document.querySelectorAll('#projection table.ledger td.ident')) {
        const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          for (const m of node.data.matchAll(/[A-Za-z0-9]+/g)) {
            const range = document.createRange();
            range.setStart(node, m.index);
            range.setEnd(node, m.index + m[0].length);
            const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
            if (lines.size > 1) out.push(m[0]);
          }
        }
      }
      return out;
    }""")
    assert cells.count() > 5
    assert broken == []
    texts = [t.replace("\u200b", "") for t in cells.all_inner_texts()]
    assert all(texts)


def test_no_rule_ids_or_internal_words_on_the_page(page: Any, week: dict[str, Any]) -> None:
    for sid in (week["pi"], week["claude"], week["thought"]):
        page.goto(f"{week['url']}/#session={sid}")
        expect(page.locator("#messages .msg").first).to_be_visible(timeout=90_000)
        expect(page.locator("#context-breakdown")).to_be_visible(timeout=90_000)
        texts = [page.evaluate(OUR_WORDS)]
        for view in ("sessions", "replay", "settings", "chat"):  # the others are on screen
            tab = page.locator(f"#tab-{view}")
            if tab.is_visible():
                tab.click()
                texts.append(page.evaluate(OUR_WORDS))
        for text in texts:
            assert not RULE_ID.search(text), RULE_ID.search(text)
            assert not re.search(r"\b1 (?:messages|checkpoints|sessions|nodes|compactions)\b",
                                 text)
            assert "~–" not in text
