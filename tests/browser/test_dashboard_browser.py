"""The operators' dashboard in real headless Chromium against a real `manage.py serve`: a few
turns run through the API on the offline scripted model (a quick one, a slow one, a failing
one); an operator logs in, sees them counted and charted, and follows the slowest turn's link
to its waterfall in the playground. Spending written in the server's ledger (and sessions of
known cost) is charted by agent, with the window's total and the most expensive sessions."""
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
from tests.sessions.dashboard_support import make_spending
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
def server(tmp_path_factory, django_db_blocker) -> Iterator[tuple[Server, dict[str, dict], dict[str, str]]]:
    """The server, the turns run on it by name, and the sessions of known cost by name."""
    agents = tmp_path_factory.mktemp("dashboard-agents")
    shutil.copytree(ROOT / "examples" / "support" / "agent", agents / "desk" / "agent")
    state = tmp_path_factory.mktemp("dashboard-state")
    with run_server(state, "--agents", str(agents), "--bearer-token", TOKEN) as server:
        with on_server_database(state, django_db_blocker):
            User.objects.create_user("olga", password=PASSWORD).groups.add(Group.objects.get_or_create(name="operators")[0])
            costed = make_spending(agents={"alpha": "desk", "beta": "helper"})
        turns = {"quick": run_turn(server, "Hello!"), "slow": run_turn(server, "/sleep 1500\nThat took a while."),
                 "failing": run_turn(server, "/fail the model is down")}
        yield server, turns, costed


def test_an_operator_sees_the_turns_charted_and_follows_the_slowest_to_its_waterfall(new_context, server):
    server, turns, _ = server
    assert [turns[n]["status"] for n in ("quick", "slow", "failing")] == ["completed", "completed", "failed"]
    slow = turns["slow"]
    page, errors = open_signed_in(new_context, server.base_url, "/admin/dashboard/", "olga", PASSWORD,
                                  login=r"/accounts/login/\?next=/admin/dashboard/")

    expect(page.locator("svg.chart")).to_have_count(7)  # four of turns, three of spend
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


def test_an_operator_sees_the_spend_charted_by_agent_with_the_windows_total(new_context, server):
    server, _, costed = server
    page, errors = open_signed_in(new_context, server.base_url, "/admin/dashboard/", "olga", PASSWORD,
                                  login=r"/accounts/login/\?next=/admin/dashboard/")

    # the ledger's last two UTC days (tests/sessions/dashboard_support.py); the scripted turns cost nothing
    expect(page.locator('[data-figure="spendUsd"] b')).to_have_text("$4.60")
    chart = page.locator('#spend-agent svg.chart[data-by="agent"]')
    expect(chart).to_be_visible()
    expect(chart.locator('rect[data-key="desk"]')).to_have_count(2)  # yesterday and today
    expect(chart.locator('rect[data-key="helper"]')).to_have_count(2)
    expect(chart.locator('rect[data-key="desk"] title').last).to_contain_text("desk $2.25")
    assert chart.bounding_box()["width"] > 500 and chart.locator("rect").first.bounding_box()["height"] > 10
    expect(page.locator('#spend-agent tr[data-key="desk"]')).to_contain_text("$4.25")
    expect(page.locator('#spend-agent tr[data-key="helper"]')).to_contain_text("$0.35")
    expect(page.locator('#spend-model tr[data-key="local:unknown"]')).to_contain_text("$0.00")
    expect(page.locator("#unpriced")).to_contain_text("had no known price")
    sessions = page.locator("#expensive-sessions tbody tr")
    expect(sessions.first).to_have_attribute("data-session", costed["S2"])
    expect(sessions.first).to_contain_text("$7.50")
    expect(sessions.first.locator("a")).to_have_attribute("href", f"/playground/helper/session/{costed['S2']}")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#spend").screenshot(path=str(ARTIFACTS / "admin-dashboard-spend.png"))
    assert not errors, f"the page raised: {errors}"
