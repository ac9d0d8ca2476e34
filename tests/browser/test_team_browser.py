"""A person of a team in real headless Chromium against a real `manage.py serve`:
logs in through the login page and lands on the playground, and as staff opens the
admin's team pages (users, groups, personal tokens).

The server takes a bearer token, so a loopback browser is nobody until it logs in.
"""
from __future__ import annotations

import re
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import expect
from tests.command_line import run_command_line
from tests.server_database import on_server_database
from tests.support import Server, run_server

PASSWORD = "a-team-password-1"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("team-agents")
    (agents / "greeter" / "agent").mkdir(parents=True)
    (agents / "greeter" / "agent" / "instructions.md").write_text("Greet the user.\n")
    state = tmp_path_factory.mktemp("team-state")
    # No turn runs: the server needs no workers.
    with run_server(state, "--agents", str(agents), "--no-workers", "--bearer-token", "not-for-browsers") as server:
        # `createsuperuser --noinput` as an operator runs it, its command line in this process.
        with on_server_database(state, django_db_blocker), pytest.MonkeyPatch.context() as patch:
            for name, value in (("USERNAME", "dana"), ("EMAIL", "dana@example.com"), ("PASSWORD", PASSWORD)):
                patch.setenv(f"DJANGO_SUPERUSER_{name}", value)
            code, out, err = run_command_line("createsuperuser", "--noinput")
            assert code == 0, out + err
        yield server


@pytest.fixture
def page(new_context, server):
    return new_context(base_url=server.base_url).new_page()


def test_a_person_logs_in_uses_the_playground_and_opens_the_admins_team_pages(page):
    page.goto("/playground/greeter")
    page.wait_for_url(re.compile(r"/accounts/login/\?next=/playground/greeter$"))
    page.fill("#id_username", "dana")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    expect(page.locator(".form-error")).to_contain_text("did not match")

    page.fill("#id_username", "dana")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/greeter$"))
    expect(page.locator("#who")).to_have_text("dana")
    expect(page.locator("#new-message")).to_be_visible()

    for path, heading in (("/admin/auth/user/", "Select user to change"),
                          ("/admin/auth/group/", "Select group to change"),
                          ("/admin/agent_sessions/personaltoken/", "Select personal token to change")):
        page.goto(path)
        expect(page.locator("#site-name")).to_have_text("agentsite administration")
        expect(page.locator("h1")).to_have_text(heading)
    expect(page.locator("#result_list, .paginator").first).to_be_visible()

    page.goto("/playground/")
    page.click("#logout")
    expect(page.locator("h1")).to_have_text("Logged out")
    page.goto("/playground/")
    page.wait_for_url(re.compile(r"/accounts/login/\?next=/playground/$"))
