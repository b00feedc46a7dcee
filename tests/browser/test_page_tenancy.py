"""W1 in the browser: with --auth, a page never shows another tenant's data.

Two tenants ("acme", "globex"), one token each. Each tenant's sessions hold a secret word;
whatever the page is asked to show, the other tenant's secret never appears in it.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from .conftest import Stack

SECRETS = {"acme": "ACME-SECRET-merger-plan", "globex": "GLOBEX-SECRET-volcano-base"}


def seed(stack: Stack) -> dict[str, str]:
    """One session per tenant, its secret in the first message; tenant -> session id."""
    ids = {}
    for tenant, secret in SECRETS.items():
        with stack.client(tenant) as client:
            ids[tenant] = stack.new_session(client, f"{tenant} plans", [f"Remember {secret}."])
    return ids


def use_token(page: Any, token: str) -> None:
    page.fill("#token-input", token)
    page.press("#token-input", "Enter")


def test_w1_page_asks_for_a_token_and_shows_nothing_without_one(page: Any,
                                                                 auth_stack: Stack) -> None:
    seed(auth_stack)
    page.goto(auth_stack.url + "/")
    expect(page.locator("#banner")).to_contain_text("needs a token")
    expect(page.locator("#token-input")).to_be_focused()
    expect(page.locator("#send")).to_be_disabled()
    body = page.locator("body").inner_text()
    assert not any(secret in body for secret in SECRETS.values())


def test_w1_two_tokens_two_tenants_never_mixed(page: Any, auth_stack: Stack) -> None:
    ids = seed(auth_stack)
    page.goto(auth_stack.url + "/")
    use_token(page, auth_stack.tokens["acme"])
    expect(page.locator("#messages")).to_contain_text(SECRETS["acme"])
    options = page.locator("#session-select option")
    assert ids["acme"] in options.evaluate_all("os => os.map(o => o.value)")
    assert ids["globex"] not in options.evaluate_all("os => os.map(o => o.value)")
    # The token went into sessionStorage and the Authorization header, never the URL.
    assert auth_stack.tokens["acme"] not in page.url

    # Another tenant's session id, asked for directly, is "not found" and shows nothing.
    page.goto(f"{auth_stack.url}/#session={ids['globex']}")
    page.reload()
    expect(page.locator("#banner")).to_contain_text("No such session")
    expect(page.locator("#messages")).not_to_contain_text(SECRETS["globex"])
    assert SECRETS["globex"] not in page.locator("body").inner_text()

    # Switching the token in the same tab drops everything of the first tenant.
    use_token(page, auth_stack.tokens["globex"])
    page.goto(f"{auth_stack.url}/#session={ids['globex']}")
    expect(page.locator("#messages")).to_contain_text(SECRETS["globex"])
    for pane in ("#messages", "#tree", "#projection", "#session-select"):
        expect(page.locator(pane)).not_to_contain_text(SECRETS["acme"])
    values = page.locator("#session-select option").evaluate_all("os => os.map(o => o.value)")
    assert ids["acme"] not in values
    assert SECRETS["acme"] not in page.content()


def test_w1_forgetting_the_token_clears_the_page(page: Any, auth_stack: Stack) -> None:
    seed(auth_stack)
    page.goto(auth_stack.url + "/")
    use_token(page, auth_stack.tokens["acme"])
    expect(page.locator("#messages")).to_contain_text(SECRETS["acme"])
    page.click("#token-clear")
    expect(page.locator("#banner")).to_contain_text("needs a token")
    assert SECRETS["acme"] not in page.content()
    assert page.evaluate("sessionStorage.getItem('contextfold.token')") is None
