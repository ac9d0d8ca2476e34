"""OutboundClient takes httpx's request arguments, runs auth flows through the guard,
and bounds each whole call by its `timeout`, against real loopback servers."""
from __future__ import annotations

import base64
import time

import httpx
import pytest

from agents.integrations.outbound import OutboundClient, OutboundError, OutboundRefused, OutboundTimeout

from .conftest import LOOPBACK
from .fakeapi import Answer, FakeAPI


@pytest.fixture
def fake():
    with FakeAPI() as api:
        api.route("GET", "/hello", Answer(200, {"hello": "world"}))
        yield api


def slow(seconds: float, answer: Answer):
    def reply(request, match):
        time.sleep(seconds)
        return answer
    return reply


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_params_headers_cookies_and_a_json_body_reach_the_server(fake):
    fake.route("POST", "/items", Answer(201, {"created": True}))
    with OutboundClient(allow=LOOPBACK) as client:
        response = client.post(f"{fake.url}/items", params={"page": "2", "tag": ["a", "b"]},
                               headers={"X-Trace": "t-1"}, cookies={"flavour": "oat"}, json={"name": "widget"},
                               timeout=3)
    assert response.status_code == 201 and response.json() == {"created": True}
    (seen,) = fake.requests
    assert seen.query == {"page": ["2"], "tag": ["a", "b"]}
    assert seen.headers["x-trace"] == "t-1" and seen.headers["cookie"] == "flavour=oat"
    assert seen.headers["content-type"] == "application/json" and seen.json() == {"name": "widget"}
    assert seen.headers["user-agent"] == "agentsite"


def test_form_data_raw_content_and_files_are_sent_as_httpx_encodes_them(fake):
    with OutboundClient(allow=LOOPBACK) as client:
        client.put(f"{fake.url}/form", data={"a": "1", "b": "two words"})
        client.patch(f"{fake.url}/raw", content=b"\x00raw bytes", headers={"content-type": "application/octet-stream"})
        client.request("POST", f"{fake.url}/upload", files={"report": ("report.txt", b"all good\n", "text/plain")})
        client.delete(f"{fake.url}/form", params={"id": "7"})
    form, raw, upload, delete = fake.requests
    assert (form.method, form.form()) == ("PUT", {"a": ["1"], "b": ["two words"]})
    assert (raw.method, raw.body) == ("PATCH", b"\x00raw bytes")
    assert upload.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert b'filename="report.txt"' in upload.body and b"all good\n" in upload.body
    assert (delete.method, delete.query) == ("DELETE", {"id": ["7"]})


def test_an_argument_httpx_does_not_take_is_a_type_error():
    with OutboundClient(allow=LOOPBACK) as client, pytest.raises(TypeError):
        client.get("http://127.0.0.1:9/", verify=False)


def test_a_user_and_password_pair_is_basic_auth(fake):
    with OutboundClient(allow=LOOPBACK) as client:
        assert client.get(f"{fake.url}/hello", auth=("ada", "s3cret")).status_code == 200
    assert fake.requests[0].headers["authorization"] == basic("ada", "s3cret")


def test_an_auth_flow_sends_each_of_its_requests_through_the_guard(fake):
    def challenge(request, match):
        if "authorization" not in request.headers:
            return Answer(401, headers={"www-authenticate": 'Digest realm="api", nonce="abc123", qop="auth"'})
        return Answer(200, {"in": True})

    fake.route("GET", "/private", challenge)
    with OutboundClient(allow=LOOPBACK) as client:
        response = client.get(f"{fake.url}/private", auth=httpx.DigestAuth("ada", "s3cret"))
    assert response.json() == {"in": True}
    first, second = fake.requests
    assert "authorization" not in first.headers
    assert second.headers["authorization"].startswith('Digest username="ada", realm="api"')

    with OutboundClient(allow=[]) as client, pytest.raises(OutboundRefused):
        client.get(f"{fake.url}/private", auth=httpx.DigestAuth("ada", "s3cret"))
    assert len(fake.requests) == 2


def test_auth_is_dropped_when_a_redirect_changes_origin(fake):
    with FakeAPI() as other:
        other.route("GET", "/landing", Answer(200, {"ok": True}))
        fake.route("GET", "/away", Answer(302, headers={"location": f"{other.url}/landing"}))
        with OutboundClient(allow=LOOPBACK) as client:
            assert client.get(f"{fake.url}/away", auth=("ada", "s3cret")).json() == {"ok": True}
    assert fake.requests[0].headers["authorization"] == basic("ada", "s3cret")
    assert "authorization" not in other.requests[0].headers


def test_follow_redirects_false_answers_the_redirect_itself(fake):
    fake.route("GET", "/go", Answer(302, headers={"location": "http://169.254.169.254/latest/meta-data/"}))
    with OutboundClient(allow=LOOPBACK) as client:
        response = client.get(f"{fake.url}/go", follow_redirects=False)
    assert response.status_code == 302 and response.headers["location"].startswith("http://169.254.169.254/")
    assert len(fake.requests) == 1


def test_a_timeout_bounds_a_slow_answer(fake):
    fake.route("GET", "/slow", slow(3, Answer(200, {"late": True})))
    started = time.monotonic()
    with OutboundClient(allow=LOOPBACK) as client, pytest.raises(OutboundTimeout, match="within 0.5s"):
        client.get(f"{fake.url}/slow", timeout=0.5)
    assert time.monotonic() - started < 1.5


def test_a_timeout_bounds_the_whole_call_not_each_hop(fake):
    """Each hop answers well within the timeout; together they do not."""
    for hop in range(5):
        fake.route("GET", f"/hop{hop}", slow(0.4, Answer(302, headers={"location": f"/hop{hop + 1}"})))
    fake.route("GET", "/hop5", Answer(200, {"arrived": True}))
    with OutboundClient(allow=LOOPBACK) as client:
        assert client.get(f"{fake.url}/hop0", timeout=5).json() == {"arrived": True}
        started = time.monotonic()
        with pytest.raises(OutboundTimeout):
            client.get(f"{fake.url}/hop0", timeout=1)
        assert time.monotonic() - started < 1.5
    time.sleep(0.5)  # the abandoned call stops at its deadline too: no hop after it
    later = [r.path for r in fake.requests][6:]
    assert len(later) <= 3 and later == [f"/hop{hop}" for hop in range(len(later))]


def test_a_timeout_bounds_resolving_the_hostname(fake):
    def stuck_resolver(host: str, port: int) -> list[str]:
        time.sleep(3)
        return ["127.0.0.1"]

    started = time.monotonic()
    with OutboundClient(allow=LOOPBACK, resolver=stuck_resolver) as client, pytest.raises(OutboundTimeout):
        client.get(f"http://api.example.test:{fake.port}/hello", timeout=0.5)
    assert time.monotonic() - started < 1.5


def test_the_clients_timeout_is_the_default_and_none_means_no_limit(fake):
    fake.route("GET", "/slow", slow(0.6, Answer(200, {"late": True})))
    with OutboundClient(allow=LOOPBACK, timeout=0.3) as client:
        with pytest.raises(OutboundTimeout):
            client.get(f"{fake.url}/slow")
        assert client.get(f"{fake.url}/slow", timeout=None).json() == {"late": True}
        assert client.get(f"{fake.url}/slow", timeout=2).json() == {"late": True}


@pytest.mark.parametrize("timeout, error", [(httpx.Timeout(3), TypeError), ("3", TypeError), (0, ValueError)])
def test_a_timeout_is_a_positive_number_of_seconds(timeout, error):
    with OutboundClient(allow=LOOPBACK) as client, pytest.raises(error):
        client.get("http://127.0.0.1:9/", timeout=timeout)


def test_errors_are_outbound_errors_never_httpx_errors():
    with OutboundClient(allow=LOOPBACK) as client, pytest.raises(OutboundError) as caught:
        client.get("http://127.0.0.1:9/", timeout=3)  # the discard port: nothing listens
    assert not isinstance(caught.value, OutboundRefused) and isinstance(caught.value.__cause__, httpx.HTTPError)
