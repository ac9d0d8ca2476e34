"""GET /metrics: who may read it, what a scrape says, and requests counted by route."""
from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from channels_app.auth import bearer_auth
from tests.channels_app.roles_support import HOST, PEER, anonymous, people  # noqa: F401 (fixture)

METRICS_TOKEN = "scraper-secret-0123456789"


@pytest.fixture
def metrics_token(settings):
    from sessions.models import hash_token

    settings.AGENTSITE_METRICS_TOKEN_HASH = hash_token(METRICS_TOKEN)


def samples(body: bytes) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value, parsed by prometheus_client's own parser."""
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_operators_read_the_metrics_and_members_get_403(people, metrics_token):
    for operator in people.operators:
        answer = operator.client.get("/metrics")
        assert answer.status_code == 200, answer.content
        assert answer["Content-Type"].startswith("text/plain")
    refused = people.mia.client.get("/metrics")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "operators_only"


def test_a_logged_in_operator_reads_them_and_a_logged_in_member_does_not(people):
    browser = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER)
    browser.force_login(people.sam.user)
    assert browser.get("/metrics").status_code == 200
    browser.force_login(people.mia.user)
    assert browser.get("/metrics").status_code == 403


def test_anonymous_callers_get_401(people, metrics_token):
    answer = anonymous().get("/metrics")
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"].startswith("Bearer")
    assert answer.json()["error"]["code"] == "unauthorized"


def test_everyone_admitted_as_anonymous_is_still_refused(db, settings):
    from channels_app.auth import allow_all

    settings.AGENTSITE_AUTH_POLICIES = [allow_all()]
    assert Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER).get("/metrics").status_code == 401


def test_the_metrics_token_reads_them_and_a_wrong_one_does_not(db, metrics_token):
    scraper = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    answer = scraper.get("/metrics")
    assert answer.status_code == 200
    assert "agentsite_queue_depth" in answer.content.decode()
    for header in (f"Bearer {METRICS_TOKEN}x", "Bearer", f"Basic {METRICS_TOKEN}", "Bearer \u00e9\u00e9", "garbage"):
        assert Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, HTTP_AUTHORIZATION=header).get("/metrics").status_code == 401


def test_without_a_configured_token_no_bearer_reads_them(db, settings):
    settings.AGENTSITE_METRICS_TOKEN_HASH = ""
    assert Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, HTTP_AUTHORIZATION="Bearer ").get("/metrics").status_code == 401


def test_a_server_bearer_token_is_no_operator(db, settings):
    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth({"server-token-123": "ci"})]
    client = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, HTTP_AUTHORIZATION="Bearer server-token-123")
    assert client.get("/metrics").status_code == 403


def test_the_loopback_caller_reads_them(db, local):
    assert local.get("/metrics").status_code == 200
    # A proxy on this host forwarding someone else is not the local caller.
    forwarded = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert forwarded.get("/metrics").status_code == 401


def test_only_get_is_allowed(db, local):
    answer = local.post("/metrics", {"a": 1}, content_type="application/json")
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "method_not_allowed"
    assert local.head("/metrics").status_code == 200


def test_requests_are_counted_by_route_not_path(db, local, support_agent):
    before = samples(local.get("/metrics").content)
    for session_id in ("ses_aaaa", "ses_bbbb", "ses_cccc"):
        assert local.get(f"/support/v1/session/{session_id}").status_code == 404
    assert local.get("/no/such/place/123").status_code == 404
    # Refused by a middleware before Django resolved it: still counted under its route.
    foreign = local.post("/support/v1/session", {"message": "hi"}, content_type="application/json",
                         HTTP_ORIGIN="https://elsewhere.example")
    assert foreign.status_code == 403
    after = samples(local.get("/metrics").content)

    def moved(route: str, status: str) -> float:
        key = ("agentsite_http_requests_total", (("route", route), ("status", status)))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("<slug:slug>/v1/session/<str:session_id>", "404") == 3
    assert moved("unmatched", "404") == 1
    assert moved("<slug:slug>/v1/session", "403") == 1
    assert moved("metrics", "200") == 1  # the scrape before
    assert not [labels for name, labels in after if name == "agentsite_http_requests_total"
                and any("ses_" in value for _, value in labels)]


def test_an_operators_token_scoped_to_some_agents_does_not_read_every_agents_metrics(people):
    from sessions.models import PersonalToken

    _, secret = PersonalToken.issue(people.olga.user, "scoped", agents=["support"])
    scoped = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST=HOST, REMOTE_ADDR=PEER)
    assert scoped.get("/metrics").status_code == 403


def test_guessing_the_metrics_token_locks_the_guesser_out_even_for_the_right_one(db, settings, metrics_token):
    from agentsite.limits import Rate

    settings.AGENTSITE_AUTH_FAILURES_PER_ACCOUNT = Rate(3, 300, "3/5min")
    settings.AGENTSITE_AUTH_FAILURES_PER_ADDRESS = Rate(5, 300, "5/5min")
    guesser = "203.0.113.99"
    scraper = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    failures = ("agentsite_auth_failures_total", (("surface", "metrics"),))
    before = samples(scraper.get("/metrics").content).get(failures, 0)
    for guess in range(5):
        answer = Client(HTTP_HOST=HOST, REMOTE_ADDR=guesser, HTTP_AUTHORIZATION=f"Bearer guess-{guess}").get("/metrics")
        assert answer.status_code == 401, guess
    right = Client(HTTP_HOST=HOST, REMOTE_ADDR=guesser, HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}").get("/metrics")
    assert right.status_code == 429
    assert int(right["Retry-After"]) >= 1
    assert right.json()["error"]["code"] == "too_many_failures"
    elsewhere = scraper.get("/metrics")
    assert elsewhere.status_code == 200
    assert samples(elsewhere.content)[failures] - before == 5


def test_in_bearer_mode_a_wrong_metrics_token_counts_once(db, settings, metrics_token):
    from agentsite.limits import Rate

    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth({"server-token-123": "ci"})]
    settings.AGENTSITE_AUTH_FAILURES_PER_ACCOUNT = Rate(3, 300, "3/5min")
    settings.AGENTSITE_AUTH_FAILURES_PER_ADDRESS = Rate(50, 300, "50/5min")
    guesser = Client(HTTP_HOST=HOST, REMOTE_ADDR="203.0.113.98", HTTP_AUTHORIZATION="Bearer guess-0")
    assert [guesser.get("/metrics").status_code for _ in range(4)] == [401, 401, 401, 429]
