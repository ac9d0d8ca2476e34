"""The playground's A/B page in real headless Chromium against a real `manage.py serve`: sessions
of both variants run through the API, then a person logs in, goes from the agent's page to the
experiment's and sees a chart per metric with each variant's mean."""
from __future__ import annotations

import re
import time
from typing import Iterator

import httpx
import pytest
from django.contrib.auth.models import User

from tests.browser.conftest import open_signed_in
from tests.browser.test_playground_browser import expect
from tests.server_database import on_server_database
from tests.sessions.experiment_support import write_ab_agent
from tests.support import Server, run_server

TOKEN = "ab-page-caller-token"
PASSWORD = "a-members-password-1"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("ab-agents")
    write_ab_agent(agents, agents / "samples.jsonl")
    state = tmp_path_factory.mktemp("ab-state")
    with run_server(state, "--no-examples", "--agents", str(agents), "--bearer-token", TOKEN) as server:
        with on_server_database(state, django_db_blocker):
            User.objects.create_user("mia", password=PASSWORD)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for variant in ("terse", "terse", "control", "control"):
            created = httpx.post(f"{server.base_url}/abtest/v1/session", headers=headers, timeout=10,
                                 json={"message": f"[ab:{variant}]\n/call which_variant {{}}"})
            assert created.status_code == 201, created.text
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.base_url}/abtest/v1/abs", headers=headers,
                        timeout=10).json()["experiments"][0]["sessions"] < 4:
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.2)
        yield server


def test_a_member_opens_the_experiments_page_and_sees_a_chart_per_metric(new_context, server):
    page, errors = open_signed_in(new_context, server.base_url, "/playground/abtest", "mia", PASSWORD,
                                  login=r"/accounts/login/")

    page.click("a.experiment")
    page.wait_for_url(re.compile(r"/playground/abtest/abs/tone$"))
    expect(page.locator("section.ab-metric")).to_have_count(10)  # 9 built-in metrics and one derived
    expect(page.locator('tr[data-variant="terse"] td').nth(2)).to_have_text("2")
    calls = page.locator('section[data-metric="toolCalls"]')
    expect(calls.locator("svg.ab-intervals circle.mean")).to_have_count(2)
    expect(calls.locator("svg.ab-time polyline")).to_have_count(2)
    expect(calls.locator("p.ab-diff")).to_contain_text("terse − control: 0.00")
    assert errors == []
