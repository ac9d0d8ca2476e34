"""Failed logins and bearer tokens lock their client out: wrong passwords at /accounts/login/ and
/admin/login/, wrong personal tokens and server bearer tokens over HTTP and the websocket, counted
per client address and account, then 429 with Retry-After until the window ends; other addresses
go on as before, and the counts are in /metrics.

The cross-process test (two processes on one Redis) is in tests/agentsite/test_shared_cache.py.
"""
from __future__ import annotations

import json
import time

import pytest
import time_machine
from asgiref.sync import async_to_sync
from channels.testing import HttpCommunicator
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from agentsite.asgi import application
from agentsite.limits import Rate
from sessions.models import PersonalToken, hash_token
from tests.channels_app.test_websocket import socket, ws_path

HOST = "127.0.0.1:8000"
ATTACKER, NEIGHBOUR = "203.0.113.66", "198.51.100.7"
PASSWORD = "right-horse-battery-9"


@pytest.fixture
def limits(settings):
    """Three failures per address and account, five per address, in windows of five minutes."""
    settings.AGENTSITE_AUTH_FAILURES_PER_ACCOUNT = Rate(3, 300, "3/5min")
    settings.AGENTSITE_AUTH_FAILURES_PER_ADDRESS = Rate(5, 300, "5/5min")


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password=PASSWORD, is_staff=True)


def browser(address: str = ATTACKER) -> Client:
    return Client(HTTP_HOST=HOST, REMOTE_ADDR=address)


def log_in(client: Client, password: str, username: str = "carol", path: str = "/accounts/login/",
           next_: str = "/playground/"):
    return client.post(path, {"username": username, "password": password, "next": next_})


def assert_locked_out_page(response) -> int:
    assert response.status_code == 429, response.content
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 300
    assert b"Too many attempts" in response.content and b"for the right password too" in response.content
    return retry_after


def assert_locked_out_json(response, limit: str, setting: str) -> int:
    assert response.status_code == 429, response.content
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 300
    error = response.json()["error"]
    assert error["code"] == "too_many_failures"
    assert limit in error["message"] and setting in error["message"]
    assert error["details"] == {"limit": limit, "retryAfter": retry_after}
    return retry_after


def test_wrong_passwords_lock_the_address_out_of_that_account_even_for_the_right_password(limits, carol):
    attacker = browser()
    for _ in range(3):
        refused = log_in(attacker, "guess")
        assert refused.status_code == 200 and b"did not match" in refused.content
    assert_locked_out_page(log_in(attacker, "guess"))
    # The lockout covers the right password too: a guesser must not learn it hit.
    assert_locked_out_page(log_in(attacker, PASSWORD))
    assert "_auth_user_id" not in attacker.session
    # The same person from another address is not locked out.
    assert log_in(browser(NEIGHBOUR), PASSWORD).status_code == 302


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_the_account_limit_holds_for_a_username_spelled_another_unicode_way(limits, carol, path):
    attacker = browser()
    for _ in range(3):  # full-width letters: Django logs in (and counts) as "carol" after NFKC
        assert log_in(attacker, "guess", username="\uff43\uff41\uff52\uff4f\uff4c", path=path).status_code == 200
    for spelling in ("carol", "\uff43arol", "CAROL"):
        assert_locked_out_page(log_in(attacker, PASSWORD, username=spelling, path=path))
    assert "_auth_user_id" not in attacker.session


def test_the_right_password_works_once_the_window_is_over(limits, carol):
    attacker = browser()
    with time_machine.travel(time.time(), tick=True) as clock:
        for _ in range(3):
            assert log_in(attacker, "guess").status_code == 200
        retry_after = assert_locked_out_page(log_in(attacker, PASSWORD))
        clock.shift(retry_after - 2)
        assert_locked_out_page(log_in(attacker, PASSWORD))
        clock.shift(3)  # past the Retry-After the answer named
        logged_in = log_in(attacker, PASSWORD)
    assert logged_in.status_code == 302 and logged_in["Location"] == "/playground/"
    assert attacker.session["_auth_user_id"] == str(carol.pk)


def test_spraying_usernames_from_one_address_hits_the_address_bound(limits, carol):
    attacker = browser()
    for n in range(5):  # under each account's bound, but five failures from one address
        assert log_in(attacker, "guess", username=f"user{n}").status_code == 200
    assert_locked_out_page(log_in(attacker, PASSWORD))
    assert_locked_out_page(log_in(attacker, "guess", username="someone-new"))
    assert log_in(browser(NEIGHBOUR), PASSWORD).status_code == 302


def test_the_admin_login_is_locked_out_the_same_way(limits, carol):
    attacker = browser()
    for _ in range(3):
        refused = log_in(attacker, "guess", path="/admin/login/?next=/admin/")
        assert refused.status_code == 200 and b"errornote" in refused.content
    assert_locked_out_page(log_in(attacker, PASSWORD, path="/admin/login/?next=/admin/"))
    # One lockout for both doors: the failures at the admin count at /accounts/login/ too.
    assert_locked_out_page(log_in(attacker, PASSWORD))
    admitted = log_in(browser(NEIGHBOUR), PASSWORD, path="/admin/login/", next_="/admin/")
    assert admitted.status_code == 302 and admitted["Location"] == "/admin/"


def test_limits_are_on_by_default(carol):
    attacker = browser()
    for _ in range(10):
        assert log_in(attacker, "guess").status_code == 200
    assert_locked_out_page(log_in(attacker, PASSWORD))


def test_turned_off_they_never_lock_out(settings, carol):
    settings.AGENTSITE_AUTH_FAILURES_PER_ACCOUNT = None
    settings.AGENTSITE_AUTH_FAILURES_PER_ADDRESS = None
    attacker = browser()
    for _ in range(12):
        assert log_in(attacker, "guess").status_code == 200
    assert log_in(attacker, PASSWORD).status_code == 302


# --- bearer tokens ----------------------------------------------------------------------


def bearer(secret: str, address: str = ATTACKER) -> Client:
    return Client(HTTP_HOST=HOST, REMOTE_ADDR=address, HTTP_AUTHORIZATION=f"Bearer {secret}")


@pytest.fixture
def token(carol, support_agent) -> tuple[PersonalToken, str]:
    return PersonalToken.issue(carol, "laptop")


def test_guessing_one_tokens_secret_gets_429_while_the_real_secret_is_served(limits, token):
    row, secret = token
    wrong = secret[:-6] + "xxxxxx"
    for _ in range(3):
        assert bearer(wrong).get("/v1/agents").status_code == 401
    assert_locked_out_json(bearer(wrong).get("/v1/agents"), "3/5min", "AGENTSITE_AUTH_FAILURES_PER_ACCOUNT")
    assert_locked_out_json(bearer(wrong).get("/v1/agents"), "3/5min", "AGENTSITE_AUTH_FAILURES_PER_ACCOUNT")
    # 256 random bits are not guessed: the real token is served, from that address too.
    assert bearer(secret).get("/v1/agents").status_code == 200
    _, other = PersonalToken.issue(row.user, "desktop")
    assert bearer(other).get("/v1/agents").status_code == 200
    assert bearer(wrong, NEIGHBOUR).get("/v1/agents").status_code == 401


def test_spraying_tokens_from_one_address_gets_429_everywhere_and_a_neighbour_gets_401(limits, token):
    for n in range(5):
        assert bearer(f"ast_{n:012x}_{'s' * 40}").get("/v1/agents").status_code == 401
    sprayed = bearer(f"ast_{9:012x}_{'s' * 40}")
    assert_locked_out_json(sprayed.get("/v1/agents"), "5/5min", "AGENTSITE_AUTH_FAILURES_PER_ADDRESS")
    # Outside DRF too: the stream, the playground's JSON and the metrics route answer the same 429.
    for path in ("/support/v1/session/ses_x/stream", "/metrics"):
        assert_locked_out_json(sprayed.get(path), "5/5min", "AGENTSITE_AUTH_FAILURES_PER_ADDRESS")
    # The pages: the playground, the API document's viewer, the dashboard, the A/B page, MCP OAuth.
    for path in ("/playground/", "/playground/support", "/api/docs/", "/admin/dashboard/",
                 "/playground/support/abs/brief-replies", "/playground/support/mcp/docs/authorize"):
        page = sprayed.post(path) if path.endswith("/authorize") else sprayed.get(path)
        assert page.status_code == 429, path
        assert 1 <= int(page["Retry-After"]) <= 300, path
        assert b"Too many attempts" in page.content and b"the right one too" in page.content, path
    # A forwarding header from an untrusted peer names nobody: still the same address.
    spoofed = Client(HTTP_HOST=HOST, REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=NEIGHBOUR,
                     HTTP_AUTHORIZATION=f"Bearer ast_{10:012x}_{'s' * 40}")
    assert spoofed.get("/v1/agents").status_code == 429
    assert bearer(f"ast_{9:012x}_{'s' * 40}", NEIGHBOUR).get("/v1/agents").status_code == 401
    assert bearer(token[1]).get("/v1/agents").status_code == 200


def test_an_ipv6_client_counts_as_its_64(limits, token):
    guess = f"ast_{99:012x}_{'s' * 40}"
    for n in range(5):
        assert bearer(f"ast_{n:012x}_{'s' * 40}", f"2001:db8:1:2::{n + 1}").get("/v1/agents").status_code == 401
    assert bearer(guess, "2001:db8:1:2:ffff::9").get("/v1/agents").status_code == 429
    assert bearer(guess, "2001:db8:1:3::1").get("/v1/agents").status_code == 401


def test_the_servers_bearer_tokens_are_locked_out_too(limits, settings, support_agent):
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("the-team-token-123")]
    for n in range(5):
        assert bearer(f"guess-{n}").get("/v1/agents").status_code == 401
    assert_locked_out_json(bearer("the-team-token-123").get("/v1/agents"), "5/5min",
                           "AGENTSITE_AUTH_FAILURES_PER_ADDRESS")
    assert bearer("the-team-token-123", NEIGHBOUR).get("/v1/agents").status_code == 200


def test_the_metrics_token_on_other_routes_is_refused_without_counting_as_a_guess(limits, settings, support_agent):
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("the-team-token-123")]
    settings.AGENTSITE_METRICS_TOKEN_HASH = hash_token("the-scraper-token-456")
    for _ in range(8):
        assert bearer("the-scraper-token-456").get("/v1/agents").status_code == 401
    assert bearer("the-scraper-token-456").get("/metrics").status_code == 200
    assert bearer("the-team-token-123").get("/v1/agents").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_behind_a_trusted_proxy_the_client_it_names_is_counted_not_the_proxy(limits, settings):
    settings.AGENTSITE_TRUSTED_PROXIES = ["10.9.9.9"]
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("the-team-token-123")]

    async def through_proxy(client: str, secret: str) -> int:
        communicator = HttpCommunicator(application, "GET", "/v1/agents", headers=[
            (b"host", HOST.encode()), (b"authorization", f"Bearer {secret}".encode()),
            (b"x-forwarded-for", f"{NEIGHBOUR}, {client}".encode())])  # the left hop is the client's own say
        communicator.scope["client"] = ("10.9.9.9", 40000)
        return (await communicator.get_response(timeout=15))["status"]

    for n in range(5):
        assert async_to_sync(through_proxy)(ATTACKER, f"guess-{n}") == 401
    assert async_to_sync(through_proxy)(ATTACKER, "the-team-token-123") == 429
    assert async_to_sync(through_proxy)("192.0.2.44", "the-team-token-123") == 200


@pytest.mark.django_db(transaction=True)
def test_a_locked_out_websocket_closes_4429_after_saying_when_to_return(limits, support_agent):
    async def attempt(secret: str) -> tuple[list[dict], int]:
        communicator = socket(ws_path("ses_nothere"), token=secret, peer=ATTACKER)
        communicator.scope["headers"].append((b"upgrade", b"websocket"))
        connected, _ = await communicator.connect(timeout=15)
        assert connected
        frames = []
        while True:
            message = await communicator.receive_output(timeout=15)
            if message["type"] == "websocket.close":
                await communicator.disconnect(code=message["code"], timeout=15)
                return frames, message["code"]
            frames.append(json.loads(message["text"]))

    for n in range(3):
        assert async_to_sync(attempt)(f"ast_{0:012x}_{'w' * 40}") == ([], 4401)
    frames, code = async_to_sync(attempt)(f"ast_{0:012x}_{'w' * 40}")
    assert code == 4429
    assert frames[0]["error"]["code"] == "too_many_failures"
    assert 1 <= frames[0]["error"]["details"]["retryAfter"] <= 300


# --- the counts in /metrics -------------------------------------------------------------


def scrape() -> dict[tuple[str, tuple], float]:
    body = Client(HTTP_HOST=HOST, REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert body.status_code == 200, body.content
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.content.decode()) for s in family.samples}


def test_failures_and_lockouts_are_counted_in_metrics_by_surface(limits, token):
    def value(found, name, **labels):
        return found.get((name, tuple(sorted(labels.items()))), 0)

    before = scrape()
    for _ in range(4):
        log_in(browser(), "guess")
    for _ in range(4):
        bearer("ast_000000000000_" + "m" * 40, NEIGHBOUR).get("/v1/agents")
    after = scrape()
    assert value(after, "agentsite_auth_failures_total", surface="login") - \
        value(before, "agentsite_auth_failures_total", surface="login") == 3
    assert value(after, "agentsite_auth_failures_total", surface="bearer") - \
        value(before, "agentsite_auth_failures_total", surface="bearer") == 3
    for surface in ("login", "bearer"):
        assert value(after, "agentsite_auth_locked_out_total", surface=surface, limit="account") - \
            value(before, "agentsite_auth_locked_out_total", surface=surface, limit="account") == 1


def test_with_the_counters_unreachable_tokens_are_still_checked_and_served(limits, settings, token):
    settings.CACHES = {**settings.CACHES, "limits": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                                     "LOCATION": "redis://127.0.0.1:1/0"}}
    for _ in range(4):
        assert bearer("ast_000000000000_" + "u" * 40).get("/v1/agents").status_code == 401
    assert bearer(token[1]).get("/v1/agents").status_code == 200
