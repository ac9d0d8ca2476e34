"""Per-principal rate limits on starting sessions and sending messages, in process.

The live tests (two web processes sharing one budget) are in test_live_rate_limits.py.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import time_machine

from agentsite.limits import LimitSettingInvalid, Rate, parse_cap, parse_count, parse_per_minute, parse_rate
from tests.support import ROOT, child_env


def post(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


@pytest.fixture
def limited(settings, support_agent):
    settings.AGENTSITE_RATE_SESSIONS = Rate(2, 60, "2/min")
    settings.AGENTSITE_RATE_MESSAGES = Rate(2, 60, "2/min")
    # The windows are fixed minutes: start at one's beginning, so a slow machine cannot carry
    # a test's requests across a boundary (where the count starts again) before it ends.
    with time_machine.travel((int(time.time()) // 60 + 1) * 60 + 0.01, tick=True):
        yield


def assert_rate_limited(response, limit: str, setting: str) -> None:
    assert response.status_code == 429, response.content
    assert 1 <= int(response["Retry-After"]) <= 60
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert limit in error["message"] and setting in error["message"]
    assert error["details"] == {"limit": limit, "retryAfter": int(response["Retry-After"])}


def test_rates_parse_per_second_minute_and_hour_and_off():
    assert parse_rate("X", "30/min", "60/min") == Rate(30, 60, "30/min")
    assert parse_rate("X", " 5 / SEC ", "60/min") == Rate(5, 1, "5/sec")
    assert parse_rate("X", "100/hour", "60/min") == Rate(100, 3600, "100/hour")
    assert parse_rate("X", None, "60/min") == Rate(60, 60, "60/min")
    assert parse_rate("X", "off", "60/min") is None and parse_rate("X", "", "60/min") is None
    assert parse_rate("X", "10/5min", "60/min") == Rate(10, 300, "10/5min")
    assert parse_rate("X", "3 / 2 hour", "60/min") == Rate(3, 7200, "3/2hour")
    assert parse_cap("X", None, "4") == 4 and parse_cap("X", "off", "4") == 0 and parse_cap("X", "0", "4") == 0
    for bad in ("30", "30/fortnight", "-1/min", "x/min", "1.5/min", "10/0min", "10/5", "10/-5min"):
        with pytest.raises(LimitSettingInvalid, match="X="):
            parse_rate("X", bad, "60/min")
    with pytest.raises(LimitSettingInvalid):
        parse_cap("X", "many", "4")


def test_the_loop_guards_between_agents_parse_a_count_and_a_rate_per_minute():
    assert parse_count("X", None, "4") == 4 and parse_count("X", " 7 ", "4") == 7
    for bad in ("0", "off", "", "-2", "many", "2.5"):
        with pytest.raises(LimitSettingInvalid, match="X="):
            parse_count("X", bad, "4")
    assert parse_per_minute("X", "30", "30/min") == Rate(30, 60, "30/min")
    assert parse_per_minute("X", "5/sec", "30/min") == Rate(5, 1, "5/sec")
    assert parse_per_minute("X", None, "30/min") == Rate(30, 60, "30/min")
    assert parse_per_minute("X", "off", "30/min") is None
    with pytest.raises(LimitSettingInvalid, match="X="):
        parse_per_minute("X", "lots", "30/min")


@pytest.mark.parametrize("name,value", [("AGENTSITE_RATE_SESSIONS", "30/fortnight"),
                                        ("AGENTSITE_MAX_RUNNING_TURNS", "lots"),
                                        ("AGENTSITE_AGENT_HOP_LIMIT", "0"),
                                        ("AGENTSITE_AGENT_TURN_BUDGET", "off"),
                                        ("AGENTSITE_AGENT_MESSAGE_RATE", "30/fortnight"),
                                        ("AGENTSITE_AUTH_FAILURES_PER_ACCOUNT", "10/0min")])
def test_a_bad_limit_setting_stops_the_server_starting_with_a_message(name, value):
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "check"], cwd=ROOT, capture_output=True,
                          text=True, env=child_env(**{name: value}), timeout=60)
    assert done.returncode != 0
    assert f"{name}={value!r}" in done.stderr and "Traceback" not in done.stderr


def test_the_session_over_the_limit_gets_429_with_retry_after(limited, alice):
    for _ in range(2):
        assert post(alice, "/support/v1/session", {"message": "hi"}).status_code == 201
    assert_rate_limited(post(alice, "/support/v1/session", {"message": "hi"}), "2/min", "AGENTSITE_RATE_SESSIONS")


def test_messages_by_route_and_by_continuation_token_share_one_limit(limited, alice):
    created = post(alice, "/support/v1/session", {"message": "hi"}).json()
    session = created["sessionId"]
    first = post(alice, f"/support/v1/session/{session}/message", {"message": "one"})
    assert first.status_code == 202
    followed = post(alice, "/support/v1/session", {"message": "two",
                                                   "continuationToken": first.json()["continuationToken"]})
    assert followed.status_code == 202, followed.content
    assert_rate_limited(post(alice, f"/support/v1/session/{session}/message", {"message": "three"}),
                        "2/min", "AGENTSITE_RATE_MESSAGES")
    assert_rate_limited(post(alice, "/support/v1/session", {
        "message": "four", "continuationToken": followed.json()["continuationToken"]}),
        "2/min", "AGENTSITE_RATE_MESSAGES")


def test_principals_do_not_share_a_budget(limited, alice, bob):
    for _ in range(2):
        assert post(alice, "/support/v1/session", {"message": "hi"}).status_code == 201
    assert post(alice, "/support/v1/session", {"message": "hi"}).status_code == 429
    assert post(bob, "/support/v1/session", {"message": "hi"}).status_code == 201


def test_a_refused_request_is_not_counted(limited, alice):
    """A request refused before the limit (a bad body) does not spend the caller's budget."""
    for _ in range(3):
        assert post(alice, "/support/v1/session", {"message": ""}).status_code == 400
    for _ in range(2):
        assert post(alice, "/support/v1/session", {"message": "hi"}).status_code == 201


def test_off_means_no_limit(settings, support_agent, alice):
    settings.AGENTSITE_RATE_SESSIONS = None
    for _ in range(5):
        assert post(alice, "/support/v1/session", {"message": "hi"}).status_code == 201


def test_the_openapi_document_lists_the_429_with_retry_after(db, local):
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = document["paths"]
    for path in ("/{slug}/v1/session", "/{slug}/v1/session/{session_id}/message"):
        answer = paths[path]["post"]["responses"]["429"]
        assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
        assert "Retry-After" in answer["headers"]
        assert "429" not in paths[path].get("get", {}).get("responses", {})
