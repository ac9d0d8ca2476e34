"""Forwarding headers count only from a peer in AGENTSITE_TRUSTED_PROXIES.

From a trusted proxy they become the client address, the scheme and the host
that Django, the auth chain and the websocket consumer read; from anyone else
they are ignored (and the loopback policy still refuses a request carrying them).
"""
from __future__ import annotations

import io

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIRequest

from channels_app.auth import RequestInfo, local_dev_strict
from channels_app.proxies import (
    warn_of_unlisted_proxy, behind_trusted_proxies, forwarded_hop, parse_networks, rewrite_scope)

PROXY = "10.0.0.5"
FORGED = [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-proto", b"https"),
          (b"x-forwarded-host", b"agents.example.com")]


@pytest.fixture
def trusted(settings):
    settings.AGENTSITE_TRUSTED_PROXIES = ["127.0.0.1", "10.0.0.0/24", "::1"]


def scope(peer: str, headers=FORGED, kind: str = "http") -> dict:
    return {"type": kind, "scheme": "ws" if kind == "websocket" else "http", "client": (peer, 51234),
            "path": "/healthz", "method": "GET", "query_string": b"", "root_path": "",
            "headers": [(b"host", b"127.0.0.1:8000"), *headers]}


def django_request(s: dict) -> ASGIRequest:
    return ASGIRequest(s, io.BytesIO())


def test_from_a_trusted_proxy_the_client_scheme_and_host_come_from_its_headers(trusted):
    request = django_request(rewrite_scope(scope(PROXY)))

    assert request.META["REMOTE_ADDR"] == "203.0.113.9"
    assert request.scheme == "https"
    assert request.META["HTTP_HOST"] == "agents.example.com"


@pytest.mark.parametrize("peer", ["192.0.2.7", "10.0.1.5", "127.0.0.2"])
def test_from_an_untrusted_peer_forwarding_headers_change_nothing(trusted, peer):
    request = django_request(rewrite_scope(scope(peer)))

    assert request.META["REMOTE_ADDR"] == peer
    assert request.scheme == "http"
    assert request.META["HTTP_HOST"] == "127.0.0.1:8000"


def test_with_no_trusted_proxies_configured_every_peer_is_untrusted(settings):
    settings.AGENTSITE_TRUSTED_PROXIES = []

    assert rewrite_scope(scope("127.0.0.1")) == scope("127.0.0.1")


def test_the_client_is_the_rightmost_hop_that_is_not_a_trusted_proxy(trusted):
    # The client forged the first two entries; our proxies appended the last two.
    headers = {"x-forwarded-for": "127.0.0.1, 198.51.100.1, 203.0.113.9, 10.0.0.7"}

    assert forwarded_hop(PROXY, headers).client == "203.0.113.9"
    assert forwarded_hop(PROXY, {"x-forwarded-for": "10.0.0.8, 10.0.0.7"}).client == "10.0.0.8"


def test_rfc_7239_forwarded_is_read_when_there_is_no_x_forwarded_for(trusted):
    hop = forwarded_hop("::1", {"forwarded": 'for=192.0.2.60;proto=http, for="[2001:db8::17]:4711";proto=https;host=a.example'})

    assert (hop.client, hop.proto, hop.host) == ("[2001:db8::17]:4711", "https", "a.example")
    assert rewrite_scope(scope("::1", [(b"forwarded", b'for="[2001:db8::17]:4711";proto=https')]))["client"][0] == "2001:db8::17"


def test_a_websocket_through_a_trusted_proxy_ending_tls_is_wss(trusted):
    assert rewrite_scope(scope(PROXY, kind="websocket"))["scheme"] == "wss"
    assert rewrite_scope(scope("192.0.2.7", kind="websocket"))["scheme"] == "ws"


def test_a_request_through_a_trusted_proxy_on_this_host_is_still_not_local(trusted):
    # nginx on loopback forwarding a loopback client: the proxy could be forwarding anyone.
    headers = [(b"x-forwarded-for", b"127.0.0.1"), (b"x-forwarded-proto", b"http")]

    info = RequestInfo.from_scope(rewrite_scope(scope("127.0.0.1", headers)))

    assert info.peer == "127.0.0.1"
    assert local_dev_strict()(info) is None


def test_the_asgi_middleware_hands_the_rewritten_scope_on(trusted):
    seen = []

    async def app(s, receive, send):
        seen.append(s)

    async def run():
        await behind_trusted_proxies(app)(scope(PROXY), None, None)
        await behind_trusted_proxies(app)(scope("192.0.2.7"), None, None)
        await behind_trusted_proxies(app)({"type": "lifespan"}, None, None)

    async_to_sync(run)()

    assert [s.get("client", ("-",))[0] for s in seen] == ["203.0.113.9", "192.0.2.7", "-"]


def test_a_bad_trusted_proxy_entry_is_refused_by_name():
    with pytest.raises(ImproperlyConfigured, match="'nginx.local'"):
        parse_networks(("127.0.0.1", "nginx.local"))


def test_a_proxy_on_this_host_left_unlisted_is_said_once_per_process(settings, caplog):
    settings.AGENTSITE_TRUSTED_PROXIES = []
    warn_of_unlisted_proxy.cache_clear()
    with caplog.at_level("WARNING", logger="channels_app.proxies"):
        rewrite_scope(scope("127.0.0.1", headers=[]))  # loopback, nothing forwarded: nothing to say
        rewrite_scope(scope("10.0.0.9"))  # a remote peer's headers: not a proxy of this host
        assert caplog.records == []
        for _ in range(3):
            assert rewrite_scope(scope("127.0.0.1"))["client"] == ("127.0.0.1", 51234)
        rewrite_scope(scope("::1", headers=[(b"x-real-ip", b"203.0.113.9")]))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1
    assert "AGENTSITE_TRUSTED_PROXIES is unset" in said[0] and "every client counts as the proxy's address" in said[0]
    assert "\n" not in said[0]
