"""An operator in real headless Chromium against a real `manage.py serve`: logs in, opens an
agent's releases in the admin, activates the older one and sees it active, then opens the
diff page between the two and sees the instruction line that changed.

The server takes a bearer token, so a loopback browser is nobody until it logs in; the agent's
second release is deployed with `manage.py deploy` next to the running server.
"""
from __future__ import annotations

import re
import subprocess
import sys
from typing import Iterator

import pytest

from tests.browser.test_playground_browser import WAIT_MS, chromium, expect
from tests.support import ROOT, Server, child_env, run_server

PASSWORD = "a-releases-password-1"
SETUP = f"""
from django.contrib.auth.models import User
User.objects.create_user("olga", password={PASSWORD!r}, is_staff=True, is_superuser=True)
"""
pytestmark = pytest.mark.timeout(120)


def manage(state, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=child_env(AGENTSITE_STATE_ROOT=str(state)))
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("release-agents")
    folder = agents / "desk"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("You answer the help desk.\nBe brief.\n")
    state = tmp_path_factory.mktemp("release-state")
    with run_server(state, "--agents", str(agents), "--bearer-token", "not-for-browsers") as server:
        (folder / "agent" / "instructions.md").write_text("You answer the help desk.\nBe thorough.\n")
        assert manage(state, "deploy", str(folder)).startswith("desk: v2 ")
        manage(state, "shell", "-c", SETUP)
        yield server


@pytest.fixture
def page(server):
    with chromium() as browser:
        context = browser.new_context(base_url=server.base_url, viewport={"width": 1400, "height": 900})
        context.set_default_timeout(WAIT_MS)
        yield context.new_page()


def row(page, version: int):
    return page.locator("#result_list tbody tr").filter(has_text=f"desk v{version}")


def test_an_operator_activates_the_older_release_and_reads_what_changed(page):
    page.goto("/accounts/login/?next=/admin/agents/deployment/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
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
