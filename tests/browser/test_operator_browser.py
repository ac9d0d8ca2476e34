"""An operator in real headless Chromium against a real `manage.py serve`: logs in, lists every
session of an agent (a member's and a schedule's among them), opens a member's session,
approves its parked call and stops another, and sees each act in the conversation as who did
what. A member, logged in the same way, sees none of those sessions and is refused them.

The server takes a bearer token, so a loopback browser is nobody until it logs in; the
member's sessions are started over HTTP with her personal token. The users, the token and the
schedule's firing are made in the server's database by this test's process.
"""
from __future__ import annotations

import re
import shutil
from typing import Iterator

import httpx
import pytest
from django.contrib.auth.models import Group, User

from sessions.models import PersonalToken, Schedule
from sessions.timers.schedules import fire_schedule_now
from tests.browser.conftest import sign_in
from tests.browser.test_playground_browser import expect
from tests.server_database import on_server_database
from tests.support import ROOT, Server, run_server

PASSWORD = "an-operators-password-1"
SWEEP = "---\ncron: \"0 3 * * *\"\ntitle: Nightly sweep\n---\nSweep the order queue.\n"
pytestmark = pytest.mark.timeout(120)


def setup() -> tuple[str, str]:
    """Users (olga an operator by the operators group; mia and max members), mia's personal token,
    and one firing of the desk's schedule, as the scheduler fires it: the token and the session."""
    operators = Group.objects.get_or_create(name="operators")[0]
    for name in ("olga", "mia", "max"):
        User.objects.create_user(name, password=PASSWORD)
    User.objects.get(username="olga").groups.add(operators)
    token = PersonalToken.issue(User.objects.get(username="mia"), "browser")[1]
    schedule = Schedule.objects.select_related("agent__active_deployment").get(agent__slug="desk", schedule_id="sweep")
    return token, fire_schedule_now(schedule)[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[tuple[Server, str, str]]:
    """The server, mia's token and the schedule's session."""
    agents = tmp_path_factory.mktemp("operator-agents")
    shutil.copytree(ROOT / "examples" / "support" / "agent", agents / "desk" / "agent")  # cancel_order waits for approval
    (agents / "desk" / "agent" / "schedules").mkdir()
    (agents / "desk" / "agent" / "schedules" / "sweep.md").write_text(SWEEP)
    state = tmp_path_factory.mktemp("operator-state")
    with run_server(state, "--agents", str(agents), "--bearer-token", "not-for-browsers") as server:
        with on_server_database(state, django_db_blocker):
            token, scheduled = setup()
        yield server, token, scheduled


def logged_in(new_context, base_url: str, username: str, path: str, errors: list[str]):
    """A page of a new browser context, logged in as `username` through the login page, at `path`;
    whatever the page raises goes to `errors`."""
    page = new_context(base_url=base_url, viewport={"width": 1280, "height": 900}).new_page()
    page.on("pageerror", lambda error: errors.append(f"{username}: {error}"))
    page.goto(path)
    page.wait_for_url(re.compile(r"/accounts/login/\?next="))
    sign_in(page, username, PASSWORD)
    expect(page.locator("#who")).to_have_text(username)
    return page


def start_as_mia(server: Server, token: str, message: str) -> str:
    created = httpx.post(f"{server.base_url}/desk/v1/session", json={"message": message},
                         headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert created.status_code == 201, created.text
    return created.json()["sessionId"]


def test_an_operator_follows_decides_and_stops_a_members_session_and_a_member_cannot(new_context, server):
    server, token, scheduled = server
    parked = start_as_mia(server, token, '/call cancel_order {"order_id": "A102"}')
    slow = start_as_mia(server, token, "/sleep 60000\nToo late.")

    errors: list[str] = []
    page = logged_in(new_context, server.base_url, "olga", "/playground/desk", errors)
    expect(page.locator("table.sessions tbody tr")).to_have_count(0)
    page.click("#all-sessions")
    page.wait_for_url(re.compile(r"/playground/desk\?all=1$"))
    for session_id in (parked, slow, scheduled):
        expect(page.locator(f'tr[data-session="{session_id}"]')).to_be_visible()
    expect(page.locator(f'tr[data-session="{parked}"] .started-by')).to_contain_text("mia")
    expect(page.locator(f'tr[data-session="{scheduled}"] .started-by')).to_contain_text("schedule:desk/sweep")

    # Mia's parked call: the operator follows the session live and approves it.
    page.click(f'tr[data-session="{parked}"] a')
    page.wait_for_url(re.compile(rf"/playground/desk/session/{parked}$"))
    expect(page.locator("#following")).to_contain_text("mia")
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.locator("#follow-up")).to_have_count(0)
    approval = page.locator(".approval")
    expect(approval).to_contain_text("Approval needed: cancel_order")
    approval.get_by_role("button", name="Approve").click()
    expect(approval).to_have_count(0)
    act = page.locator(".operator-act")
    expect(act).to_have_count(1)
    expect(act).to_have_text(re.compile(r"^olga \(operator\) approved call call_\w+$"))
    expect(page.locator(".tool-call .badge")).to_have_text("approved by olga")
    expect(page.locator("#status")).to_have_text("waiting")

    # Mia's slow turn: the operator stops it.
    page.goto(f"/playground/desk/session/{slow}")
    expect(page.locator("#status")).to_have_text("running")
    page.click("#stop")
    expect(page.locator(".operator-act")).to_have_text("olga (operator) stopped the session")
    expect(page.locator(".turn-meta.failed")).to_have_text("turn failed: turn interrupted")
    page.reload()  # replayed from the log: the same entry, once
    expect(page.locator(".operator-act")).to_have_text("olga (operator) stopped the session")

    # The schedule's session opens too.
    page.goto(f"/playground/desk/session/{scheduled}")
    expect(page.locator("#following")).to_contain_text("schedule:desk/sweep")
    expect(page.locator(".msg.user")).to_contain_text("Sweep the order queue.")

    # A member sees none of them and is refused each.
    member = logged_in(new_context, server.base_url, "max", "/playground/desk", errors)
    expect(member.locator("#no-sessions")).to_be_visible()
    expect(member.locator("#all-sessions")).to_have_count(0)
    member.goto("/playground/desk?all=1")
    expect(member.locator("h1")).to_have_text("Operators only")
    for session_id in (parked, scheduled):
        member.goto(f"/playground/desk/session/{session_id}")
        expect(member.locator("h1")).to_have_text("Not your session")
    assert not errors, f"the pages raised: {errors}"
