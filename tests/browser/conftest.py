"""One headless Chromium per browser test module, and fresh browser contexts (their own cookies, storage
and cache) per test, so the tests stay independent.

Not one per test process: while Playwright's sync API is open, its event loop counts as running in this
thread, and Django's ORM then refuses to run here (SynchronousOnlyOperation), for every later module
on the same worker too. So the browser starts after the module's server and its rows are set up, and
closes with the module."""
from __future__ import annotations

import re

import pytest

from tests.browser.test_playground_browser import WAIT_MS, chromium


@pytest.fixture(scope="module")
def browser(server):
    with chromium() as launched:
        yield launched


@pytest.fixture
def new_context(browser):
    """`browser.new_context(**options)` with the bounded wait; each context it made closes when the test ends."""
    opened = []

    def new(**options):
        context = browser.new_context(**options)
        context.set_default_timeout(WAIT_MS)
        opened.append(context)
        return context

    yield new
    for context in opened:
        context.close()


def sign_in(page, username: str, password: str) -> None:
    """Fill the login form the page is on and submit it (the caller waits for where it should land)."""
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def open_signed_in(new_context, base_url: str, path: str, username: str, password: str, *, login: str):
    """A new page on `path`, which sends an anonymous visitor to the login form (its URL matches `login`),
    signed in as `username` and back on `path`; with the list the page's script errors are collected in."""
    errors: list[str] = []
    page = new_context(base_url=base_url, viewport={"width": 1280, "height": 900}).new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path)
    page.wait_for_url(re.compile(login))
    sign_in(page, username, password)
    page.wait_for_url(re.compile(re.escape(path) + "$"))
    return page, errors
