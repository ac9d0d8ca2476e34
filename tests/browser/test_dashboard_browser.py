"""The operators' dashboard in real headless Chromium against a real `manage.py serve`: a few
turns run through the API on the offline scripted model (a quick one, a slow one, a failing
one); an operator logs in, sees them counted and charted, and follows the slowest turn's link
to its waterfall in the playground."""
from __future__ import annotations

import re
import shutil
import time
from typing import Iterator

import httpx
import pytest
from django.contrib.auth.models import Group, User

from tests.browser.conftest import open_signed_in
from tests.browser.test_playground_browser import ARTIFACTS, expect
from tests.server_database import on_server_database
from tests.support import ROOT, Server, run_server

TOKEN = "dashboard-caller-token"
PASSWORD = "an-operators-password-1"
pytestmark = pytest.mark.timeout(90)


def run_turn(server: Server, message: str) -> dict:
    """A session whose first turn has ended: its detail's `lastTurn`."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    created = httpx.post(f"{server.base_url}/desk/v1/session", json={"message": message}, headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    session_id = created.json()["sessionId"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        last = httpx.get(f"{server.base_url}/desk/v1/session/{session_id}", headers=headers, timeout=10).json()["lastTurn"]
        if last and last["status"] in ("completed", "failed", "interrupted"):
            return {**last, "sessionId": session_id}
        time.sleep(0.1)
    raise AssertionError(f"the turn of {session_id} did not end:\n{server.output()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[tuple[Server, dict[str, dict]]]:
    """The server, and the turns run on it by name."""
    agents = tmp_path_factory.mktemp("dashboard-agents")
    shutil.copytree(ROOT / "examples" / "support" / "agent", agents / "desk" / "agent")
    state = tmp_path_factory.mktemp("dashboard-state")
    with run_server(state, "--agents", str(agents), "--bearer-token", TOKEN) as server:
        with on_server_database(state, django_db_blocker):
            User.objects.create_user("olga", password=PASSWORD).groups.add(Group.objects.get_or_create(name="operators")[0])
        turns = {"quick": run_turn(server, "Hello!"), "slow": run_turn(server, "/sleep 1500\nThat took a while."),
                 "failing": run_turn(server, "/fail the model is down")}
        yield server, turns


def test_an_operator_sees_the_turns_charted_and_follows_the_slowest_to_its_waterfall(new_context, server):
    server, turns = server
    assert [turns[n]["status"] for n in ("quick", "slow", "failing")] == ["completed", "completed", "failed"]
    slow = turns["slow"]
    page, errors = open_signed_in(new_context, server.base_url, "/admin/dashboard/", "olga", PASSWORD,
                                  login=r"/accounts/login/\?next=/admin/dashboard/")

    expect(page.locator("svg.chart")).to_have_count(4)
    for name, count in (("turns", "3"), ("completed", "2"), ("failed", "1")):
        expect(page.locator(f'[data-figure="{name}"] b')).to_have_text(count)
    chart = page.locator("#turns-over-time svg.chart")
    expect(chart.locator('rect[data-status="completed"]')).not_to_have_count(0)
    expect(chart.locator('rect[data-status="failed"]')).not_to_have_count(0)
    expect(page.locator('#duration-over-time polyline[data-line="totalP95"]')).to_have_count(1)
    expect(page.locator("#tokens svg.chart g[data-row]")).to_have_count(1)
    expect(page.locator("#failures tr.failure")).to_contain_text("the model is down")
    first = page.locator("#slowest tbody tr").first
    expect(first).to_have_attribute("data-turn", slow["id"])
    assert page.locator("#turns-over-time svg.chart").bounding_box()["width"] > 500  # drawn, not collapsed
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)

    first.locator("a").first.click()
    page.wait_for_url(re.compile(rf"/playground/desk/session/{slow['sessionId']}/trace#{slow['id']}$"))
    waterfall = page.locator(f'section[data-turn="{slow["id"]}"] .waterfall')
    expect(waterfall).to_be_visible()
    expect(waterfall.locator('.lane[data-kind="model"]')).to_have_count(1)
    expect(waterfall.locator(".totals")).to_contain_text("total")
    assert not errors, f"the pages raised: {errors}"
