"""Y8 in Chromium: a page served from a name that rebinds to 127.0.0.1 (DNS rebinding) and a
page of another site get nothing from the service and change nothing, while the real page,
under its CSP and hardening headers, still works.

The rebinding is simulated the way it happens: Chromium resolves `rebind.test` to
127.0.0.1 (`--host-resolver-rules`), the attacker's document for
`http://rebind.test:<port>/` is served by the test (Playwright's route: the attacker's
server before the name switched), and the page's own same-origin `fetch()` calls then go
to the service, with `Host: rebind.test:<port>`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import Stack
from .harness import CHROMIUM, CHROMIUM_ARGS, DESKTOP

SECRET = "REBIND-SECRET-launch-codes"
ATTACK = """<!doctype html><title>cat pictures</title><script>
async function attempt(path, options) {
  try {
    const r = await fetch(path, options);
    return [r.status, await r.text()];
  } catch (e) { return ["network", String(e)]; }
}
window.stolen = (async () => ({
  list: await attempt("/v1/sessions"),
  page: await attempt("/index.html"),
  create: await attempt("/v1/sessions", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({title: "rebound"})}),
  upload: await attempt("/v1/import?title=rebound", {method: "POST",
    headers: {"Content-Type": "application/octet-stream"}, body: "{}"}),
}))();
</script>"""
# A text/plain form sends `name=value`: this one is a valid message list, so an import
# endpoint that took it would store a session of the attacker's choosing.
CROSS_SITE = """<!doctype html><title>free prizes</title>
<form id="f" method="post" enctype="text/plain" action="TARGET/v1/import?title=cross-site">
<input name='[{"role":"user","content":"planted' value='"}]'></form><script>
window.sent = fetch("TARGET/v1/sessions", {method: "POST", mode: "no-cors",
  headers: {"Content-Type": "text/plain"}, body: '{"title": "cross-site"}'})
  .then(() => "sent", (e) => String(e));
</script>"""


@pytest.fixture(scope="module")
def rebinding(browser: Any) -> Iterator[Any]:
    """A Chromium in which rebind.test and evil.test resolve to 127.0.0.1."""
    chromium = browser.browser_type.launch(
        executable_path=str(CHROMIUM),
        args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP rebind.test 127.0.0.1, "
              "MAP evil.test 127.0.0.1",
              # Recent Chromium asks before a public page reaches a loopback address (Local
              # Network Access); Firefox, Safari and older Chromium do not. The service must
              # hold without that help, so the test turns it off.
              "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
              "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults"])
    yield chromium
    chromium.close()


def _titles(stack: Stack) -> list[str]:
    with stack.client() as client:
        return [s["title"] for s in client.get("/v1/sessions").json()["sessions"]]


def test_y8_a_rebinding_page_gets_nothing_and_creates_nothing(rebinding: Any,
                                                              stack: Stack) -> None:
    with stack.client() as client:
        stack.new_session(client, "private", [f"Remember {SECRET}."])
    before = _titles(stack)
    port = stack.url.rsplit(":", 1)[1]
    context = rebinding.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.route(f"http://rebind.test:{port}/", lambda route: route.fulfill(
            status=200, content_type="text/html", body=ATTACK))
        page.goto(f"http://rebind.test:{port}/")
        stolen = page.evaluate("window.stolen")
    finally:
        context.close()
    for what in ("list", "page", "create", "upload"):
        status, body = stolen[what]
        assert status == 421, (what, status, body[:200])
        assert SECRET not in body and "private" not in body
    assert _titles(stack) == before  # nothing was created


def test_y8_another_sites_page_cannot_post_to_the_service(rebinding: Any,
                                                          stack: Stack) -> None:
    before = _titles(stack)
    context = rebinding.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.route("http://evil.test:9999/", lambda route: route.fulfill(
            status=200, content_type="text/html",
            body=CROSS_SITE.replace("TARGET", stack.url)))
        page.goto("http://evil.test:9999/")
        assert page.evaluate("window.sent") == "sent"  # opaque: the browser let it go out
        with page.expect_navigation():
            page.evaluate("document.getElementById('f').submit()")
        assert "forbidden_origin" in page.content()  # the form post was refused
    finally:
        context.close()
    assert _titles(stack) == before


def test_y8_the_real_page_still_works_under_its_csp(rebinding: Any, stack: Stack) -> None:
    with stack.client() as client:
        sid = stack.new_session(client, "still works", [f"Remember {SECRET}."])
    errors: list[str] = []
    context = rebinding.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text)
                if "Content Security Policy" in msg.text else None)
        answer = page.goto(f"{stack.url}/#session={sid}")
        assert answer is not None and "script-src 'self'" in answer.headers[
            "content-security-policy"]
        expect(page.locator("#messages")).to_contain_text(SECRET)
        page.fill("#draft", "one more question")
        page.press("#draft", "Enter")
        expect(page.locator("#messages .msg.user").last).to_contain_text("one more question")
        expect(page.locator("#messages .msg.assistant")).to_have_count(2)
        # Counted before the click: read after it, the server may not have the new
        # session yet while the page, once its POST returned, lists it (a race, not Y8).
        sessions = len(_titles(stack))
        page.click("#new-session")
        expect(page.locator("#session-select option")).to_have_count(sessions + 1)
        assert len(_titles(stack)) == sessions + 1
    finally:
        context.close()
    assert not errors, errors
