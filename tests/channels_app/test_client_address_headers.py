"""The loopback policy refuses a request that a proxy or a CDN forwarded, whichever header names the client."""
from __future__ import annotations

import pytest

from channels_app.auth import FORWARDING_HEADERS, LOCAL_PRINCIPAL, RequestInfo, local_dev, local_dev_strict

CLIENT_ADDRESS_HEADERS = [
    "X-Forwarded-For", "Forwarded", "X-Forwarded-Host",
    "X-Real-IP", "X-Client-IP", "True-Client-IP", "CF-Connecting-IP", "X-Originating-IP",
    "X-Cluster-Client-IP", "Client-IP", "Fastly-Client-IP",
]


@pytest.fixture
def default_chain(settings):
    """The chain `serve` uses with no auth flags: local_dev_strict()."""
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"


def value_of(header: str) -> str:
    return "for=203.0.113.9" if header == "Forwarded" else "203.0.113.9"


def test_every_header_here_is_one_the_policy_refuses():
    assert {h.lower() for h in CLIENT_ADDRESS_HEADERS} == set(FORWARDING_HEADERS)


@pytest.mark.django_db
@pytest.mark.parametrize("header", CLIENT_ADDRESS_HEADERS)
def test_a_loopback_request_carrying_a_client_address_header_is_not_local(default_chain, support_agent, local, header):
    meta = "HTTP_" + header.upper().replace("-", "_")

    response = local.get("/v1/agents", **{meta: value_of(header)})

    assert response.status_code == 401, response.content
    assert local.get("/v1/agents").status_code == 200


@pytest.mark.parametrize("header", CLIENT_ADDRESS_HEADERS)
@pytest.mark.parametrize("policy", [local_dev, local_dev_strict])
def test_a_websocket_scope_from_loopback_carrying_a_client_address_header_is_not_local(policy, header):
    headers = [(b"host", b"localhost:8000"), (header.encode(), value_of(header).encode())]

    got = RequestInfo.from_scope({"client": ("127.0.0.1", 51234), "headers": headers})

    assert policy()(got) is None
    assert policy()(RequestInfo.from_scope({"client": ("127.0.0.1", 51234), "headers": headers[:1]})) == LOCAL_PRINCIPAL
