from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlencode

import pytest
from django.core.cache import caches
from django.core.cache.backends.filebased import FileBasedCache
from django.core.exceptions import ImproperlyConfigured

from agents.integrations.events import SignatureError
from agents.integrations.slack import parse_interaction, replay_cache_is_shared, verify_request

from .conftest import Clock, fixture_bytes

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def slack_headers(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    base = f"v0:{timestamp}:".encode() + body
    return {"X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()}


@pytest.fixture(autouse=True)
def fresh_cache():
    caches["default"].clear()
    yield
    caches["default"].clear()


@pytest.fixture
def body() -> bytes:
    return fixture_bytes("slack/app_mention.json")


def test_slacks_published_example_verifies():
    """The example request from Slack's "Verifying requests" guide."""
    body = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
            b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
            b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
            b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    headers = {"X-Slack-Request-Timestamp": "1531420618",
               "X-Slack-Signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"}
    verify_request(SECRET, headers, body, clock=Clock(1531420618 + 10))


def test_a_valid_request_verifies(body, clock):
    verify_request(SECRET, slack_headers(body, int(clock())), body, clock=clock)


def test_an_altered_body_is_refused(body, clock):
    headers = slack_headers(body, int(clock()))
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(SECRET, headers, body.replace(b"safe", b"sane"), clock=clock)


def test_an_altered_signature_or_timestamp_is_refused(body, clock):
    headers = slack_headers(body, int(clock()))
    flipped = dict(headers, **{"X-Slack-Signature": headers["X-Slack-Signature"][:-1] + "x"})
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(SECRET, flipped, body, clock=clock)
    moved = dict(headers, **{"X-Slack-Request-Timestamp": str(int(clock()) - 1)})
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(SECRET, moved, body, clock=clock)


def test_another_secret_is_refused(body, clock):
    with pytest.raises(SignatureError, match="does not match"):
        verify_request(SECRET, slack_headers(body, int(clock()), "another-secret"), body, clock=clock)


@pytest.mark.parametrize("drop", ["X-Slack-Request-Timestamp", "X-Slack-Signature"])
def test_a_missing_header_is_refused(body, clock, drop):
    headers = slack_headers(body, int(clock()))
    del headers[drop]
    with pytest.raises(SignatureError, match="no X-Slack-Request-Timestamp or X-Slack-Signature"):
        verify_request(SECRET, headers, body, clock=clock)


def test_a_timestamp_that_is_not_a_number_is_refused(body, clock):
    with pytest.raises(SignatureError, match="not a number"):
        verify_request(SECRET, {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}, body, clock=clock)


@pytest.mark.parametrize("age, message", [(301, "too old"), (3600, "too old"), (-301, "in the future")])
def test_requests_outside_five_minutes_either_way_are_refused(body, clock, age, message):
    with pytest.raises(SignatureError, match=message):
        verify_request(SECRET, slack_headers(body, int(clock()) - age), body, clock=clock)


@pytest.mark.parametrize("age", [299, -299, 300, -300])
def test_requests_inside_five_minutes_either_way_verify(body, clock, age):
    verify_request(SECRET, slack_headers(body, int(clock()) - age), body, clock=clock)


def test_a_replayed_request_is_refused(body, clock):
    headers = slack_headers(body, int(clock()))
    verify_request(SECRET, headers, body, clock=clock)
    clock.advance(30)
    with pytest.raises(SignatureError, match="replayed"):
        verify_request(SECRET, headers, body, clock=clock)
    # The same body signed again at another time is another request.
    verify_request(SECRET, slack_headers(body, int(clock())), body, clock=clock)


def test_a_refused_signature_is_not_remembered(body, clock):
    headers = slack_headers(body, int(clock()))
    with pytest.raises(SignatureError):
        verify_request(SECRET, headers, body + b" ", clock=clock)
    verify_request(SECRET, headers, body, clock=clock)


def test_replays_are_seen_across_processes_through_a_shared_cache(body, clock, tmp_path):
    """Two cache objects on one shared store stand for two web processes."""
    first = FileBasedCache(str(tmp_path), {})
    second = FileBasedCache(str(tmp_path), {})
    headers = slack_headers(body, int(clock()))
    verify_request(SECRET, headers, body, clock=clock, cache=first)
    with pytest.raises(SignatureError, match="replayed"):
        verify_request(SECRET, headers, body, clock=clock, cache=second)
    assert replay_cache_is_shared(second)


def test_the_replay_cache_is_the_configured_alias(body, clock, settings, tmp_path):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "slack": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(tmp_path)},
    }
    settings.AGENTSITE_SLACK_REPLAY_CACHE = "slack"
    assert replay_cache_is_shared()
    headers = slack_headers(body, int(clock()))
    verify_request(SECRET, headers, body, clock=clock)
    with pytest.raises(SignatureError, match="replayed"):
        verify_request(SECRET, headers, body, clock=clock, cache=FileBasedCache(str(tmp_path), {}))


def test_the_default_memory_cache_is_reported_as_per_process():
    assert not replay_cache_is_shared(caches["default"])


def test_a_dummy_cache_is_refused_rather_than_silently_allowing_replays(body, clock):
    from django.core.cache.backends.dummy import DummyCache

    with pytest.raises(ImproperlyConfigured, match="dummy cache"):
        verify_request(SECRET, slack_headers(body, int(clock())), body, clock=clock, cache=DummyCache("x", {}))


@pytest.mark.parametrize("secret", [None, ""])
def test_without_a_signing_secret_nothing_verifies(body, clock, secret):
    with pytest.raises(SignatureError, match="no Slack signing secret"):
        verify_request(secret, slack_headers(body, int(clock()), "x"), body, clock=clock)


def test_interactivity_requests_are_signed_over_the_form_body(clock):
    payload = fixture_bytes("slack/block_actions.json").decode()
    body = urlencode({"payload": payload}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", **slack_headers(body, int(clock()))}
    verify_request(SECRET, headers, body, clock=clock)
    assert parse_interaction(body)["type"] == "block_actions"
