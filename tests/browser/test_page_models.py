"""A real recorded session on the page (SPEC B4, Y8): a fresh database, the Pi session from
the fixtures imported in Chromium, opened, compacted and sent to — with its recorded model
(claude-sonnet-4-5), its title and its window, the summaries offline. Served by a server that
binds Anthropic to the fake provider (the key goes there only); and by one without the key,
where the page says the model cannot be served and still compacts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from contextfold.core.models.catalog import capacity_for
from contextfold.server import ServiceConfig
from tests.fakeserver import FakeServer, Reply

from .harness import Service

PI = Path(__file__).resolve().parent.parent / "fixtures" / "pi-mono" / "large-session.jsonl"
KEY = "sk-ant-page-test-key"


@pytest.fixture
def service(tmp_path: Path, fake: FakeServer, monkeypatch: pytest.MonkeyPatch,
            request: pytest.FixtureRequest) -> Iterator[Service]:
    """A fresh database; `request.param`: whether the server holds the Anthropic key."""
    if request.param:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    else:
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = ServiceConfig(db=f"sqlite:///{tmp_path / 'service.db'}", rate_limit=100_000,
                           provider_urls={"anthropic": fake.anthropic_url})
    running = Service(config).start()
    yield running
    running.stop()


def import_pi(page: Any, service: Service) -> str:
    page.goto(service.url + "/")
    page.click("#tab-replay")
    page.set_input_files("#import-file", str(PI))
    page.click("#import-submit")
    chosen = page.locator("#session-select option:checked")
    expect(chosen).to_contain_text("large-session.jsonl · claude-sonnet-4-5", timeout=120_000)
    expect(page.locator("#banner")).to_be_hidden()
    expect(page.locator("#session-model")).to_have_text("claude-sonnet-4-5", timeout=60_000)
    return str(chosen.get_attribute("value"))


def compact_from_the_page(page: Any, service: Service, session_id: str) -> None:
    expect(page.locator("#compact")).to_be_enabled()
    page.click("#compact")
    deadline = time.monotonic() + 180
    with httpx.Client(base_url=service.url, timeout=60) as client:
        while True:
            tree = client.get(f"/v1/sessions/{session_id}/tree").json()
            made = [n for n in tree["nodes"] if n["kind"] == "checkpoint"
                    and n["payload"].get("summarizer") == "extractive"]
            if made:
                break
            assert time.monotonic() < deadline, "the page's compaction never committed"
            time.sleep(0.5)
    expect(page.locator("#tree .tag-checkpoint").first).to_be_attached(timeout=60_000)
    expect(page.locator("#notice.error")).to_be_hidden()


@pytest.mark.parametrize("service", [True], indirect=True)
def test_b4_an_imported_pi_session_opens_compacts_and_sends_with_its_model(
        page: Any, service: Service, fake: FakeServer) -> None:  # Y8
    seen = len(fake.requests)  # the fake serves the whole module
    session_id = import_pi(page, service)
    window = capacity_for("claude-sonnet-4-5").context_window
    with httpx.Client(base_url=service.url, timeout=60) as client:
        assert client.get(f"/v1/sessions/{session_id}").json()["context_window"] == window
    expect(page.locator("#session-problem")).to_be_hidden()
    compact_from_the_page(page, service, session_id)

    fake.enqueue(Reply(text="Sonnet answers from its bound endpoint"), kind="chat")
    page.locator("#draft").fill("what is left to port?")
    page.locator("#draft").press("Enter")
    expect(page.locator("#messages .msg.assistant").last).to_contain_text(
        "Sonnet answers from its bound endpoint", timeout=60_000)
    chats = [r for r in fake.requests[seen:] if not r.is_summary]
    assert chats and {r.protocol for r in chats} == {"anthropic"}
    assert {v.removeprefix("Bearer ") for r in chats for v in r.key_headers.values()} == {KEY}


@pytest.mark.parametrize("service", [False], indirect=True)
def test_b4_a_model_the_server_cannot_serve_is_said_and_the_session_still_compacts(
        page: Any, service: Service, fake: FakeServer) -> None:
    seen = len(fake.requests)
    session_id = import_pi(page, service)
    problem = page.locator("#session-problem")
    expect(problem).to_be_visible()
    expect(problem).to_contain_text("ANTHROPIC_API_KEY")
    expect(page.locator("#send")).to_be_disabled()
    expect(page.locator("#retry")).to_be_disabled()
    compact_from_the_page(page, service, session_id)
    assert fake.requests[seen:] == []  # nothing was sent anywhere
