"""Fixtures of the browser tests: Chromium (Debian's), the fake model, the service.

Skipped only when /usr/bin/chromium is missing (`make test` installs it first, so CI never
skips: see the Makefile's chromium target).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.providers import make_chat_model
from contextfold.server import ServiceConfig
from contextfold.summarize.llm import LlmSummarizer
from tests.fakeserver import FakeServer, fake_server

from .harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    DESKTOP,
    FailingCommits,
    GatedSummarizer,
    Service,
    create_tokens,
)

FAKE_MODEL = "openai-compatible/fake-chat"
WINDOW = 4096  # small, so a few messages make a compaction worth doing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if CHROMIUM.exists():
        return
    skip = pytest.mark.skip(reason=f"{CHROMIUM} is missing (make test installs it)")
    for item in items:
        if "page" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for the browser tests, closed when they are done: Playwright's sync API
    keeps an event loop running on the main thread while it is open, which would break every
    later test that calls asyncio.run()."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServer]:
    with fake_server() as server:
        yield server


class Stack:
    """The service under test and what the test controls: the summary gate, failing commits,
    and a plain HTTP client to set sessions up quickly."""

    def __init__(self, service: Service, gate: GatedSummarizer, stores: list[FailingCommits],
                 fake: FakeServer, tokens: dict[str, str]) -> None:
        self.service = service
        self.url = service.url
        self.gate = gate
        self._stores = stores
        self.fake = fake
        self.tokens = tokens

    def fail_commits(self, failing: bool) -> None:
        for store in self._stores:
            store.failing = failing

    def client(self, tenant: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def new_session(self, client: httpx.Client, title: str, turns: list[str] = ()) -> str:
        """A session on the fake model with `turns` already exchanged (through the API)."""
        answer = client.post("/v1/sessions", json={
            "model": FAKE_MODEL, "context_window": WINDOW, "base_url": self.fake.openai_url,
            "title": title})
        answer.raise_for_status()
        session_id = answer.json()["session_id"]
        for text in turns:
            client.post(f"/v1/sessions/{session_id}/messages", json={"text": text}
                        ).raise_for_status()
        return session_id


def _stack(tmp: Path, fake: FakeServer, *, auth: bool, tenants: tuple[str, ...] = ()
           ) -> Iterator[Stack]:
    db = f"sqlite:///{tmp / 'service.db'}"
    tokens: dict[str, str] = {}
    if tenants:  # in a thread: Playwright's sync API keeps an event loop on this one
        with ThreadPoolExecutor(1) as pool:
            tokens = pool.submit(asyncio.run, create_tokens(db, *tenants)).result()
    summary_model = make_chat_model(FAKE_MODEL, base_url=fake.openai_url, api_key="test")
    gate = GatedSummarizer(LlmSummarizer(summary_model))
    stores: list[FailingCommits] = []

    def wrap(conv: Any) -> None:
        store = FailingCommits(conv.store)
        stores.append(store)
        conv.store = store

    config = ServiceConfig(db=db, auth=auth, allow_base_urls=(fake.openai_url,),
                           summarizer=gate, on_conversation=wrap, rate_limit=100_000)
    service = Service(config).start()
    try:
        yield Stack(service, gate, stores, fake, tokens)
    finally:
        gate.release()
        service.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake: FakeServer) -> Iterator[Stack]:
    """The service without --auth (every caller is tenant "default")."""
    yield from _stack(tmp_path_factory.mktemp("serve"), fake, auth=False)


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory, fake: FakeServer) -> Iterator[Stack]:
    """The service with --auth and two tenants, "acme" and "globex", one token each."""
    yield from _stack(tmp_path_factory.mktemp("serve-auth"), fake, auth=True,
                      tenants=("acme", "globex"))


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (its own sessionStorage) at 1280×800; page errors fail the test."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    # A test's route handlers may still be answering the page's last refresh: closing under
    # them raised in the *next* test's setup.
    page.unroute_all(behavior="ignoreErrors")
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
