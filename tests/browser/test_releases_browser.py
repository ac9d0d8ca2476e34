"""An operator in real headless Chromium against a real `manage.py serve`: logs in, opens an
agent's releases in the admin, activates the older one and sees it active, then opens the
diff page between the two and sees the instruction line that changed.

The server takes a bearer token, so a loopback browser is nobody until it logs in; the agent's
second release is deployed with `manage.py deploy` next to the running server (its command line
in this test's process, on the server's database).
"""
from __future__ import annotations

import re
from typing import Iterator

import pytest
from django.contrib.auth.models import User

from tests.browser.conftest import sign_in
from tests.browser.test_playground_browser import expect
from tests.command_line import run_command_line
from tests.server_database import on_server_database
from tests.support import Server, run_server

PASSWORD = "a-releases-password-1"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("release-agents")
    folder = agents / "desk"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("You answer the help desk.\nBe brief.\n")
    state = tmp_path_factory.mktemp("release-state")
    # No turn runs: the server needs no workers.
    with run_server(state, "--agents", str(agents), "--no-workers", "--bearer-token", "not-for-browsers") as server:
        (folder / "agent" / "instructions.md").write_text("You answer the help desk.\nBe thorough.\n")
        with on_server_database(state, django_db_blocker):
            code, out, err = run_command_line("deploy", str(folder))
            assert code == 0 and out.startswith("desk: v2 "), out + err
            User.objects.create_user("olga", password=PASSWORD, is_staff=True, is_superuser=True)
        yield server


@pytest.fixture
def page(new_context, server):
    return new_context(base_url=server.base_url, viewport={"width": 1400, "height": 900}).new_page()


def row(page, version: int):
    return page.locator("#result_list tbody tr").filter(has_text=f"desk v{version}")


def test_an_operator_activates_the_older_release_and_reads_what_changed(page):
    page.goto("/accounts/login/?next=/admin/agents/deployment/")
    sign_in(page, "olga", PASSWORD)
    page.wait_for_url(re.compile(r"/admin/agents/deployment/$"))
    expect(row(page, 2).locator("img[alt=True]")).to_be_visible()  # the active release
    expect(row(page, 1).locator("img[alt=False]")).to_be_visible()

    row(page, 1).locator("input.action-select").check()
    page.select_option("select[name=action]", "activate")
    page.click("button[name=index]")

    expect(page.locator(".messagelist")).to_contain_text(re.compile(r"desk: v1 is active\.", re.I))  # shown capitalized
    expect(row(page, 1).locator("img[alt=True]")).to_be_visible()
    expect(row(page, 2).locator("img[alt=False]")).to_be_visible()

    row(page, 2).locator("a.release-diff").click()
    expect(page.locator("#summary")).to_have_text("Changed from v1 to v2: instructions, files.")
    instructions = page.locator("#section-instructions table.diff")
    expect(instructions.locator(".diff_sub, .diff_chg").first).to_be_visible()
    expect(instructions).to_contain_text("Be brief.")
    expect(instructions).to_contain_text("Be thorough.")
    expect(page.locator("#section-tools")).to_contain_text("(unchanged)")
