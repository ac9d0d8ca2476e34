from __future__ import annotations

import pytest

from agents.integrations.outbound import (
    Allowlist,
    OutboundClient,
    OutboundError,
    OutboundHTTPError,
    OutboundRefused,
    check_url,
    parse_inet_aton,
)

from .fakeapi import Answer, FakeAPI

from .conftest import LOOPBACK


@pytest.fixture
def fake():
    with FakeAPI() as api:
        api.route("GET", "/hello", Answer(200, {"hello": "world"}))
        yield api


def refused(url: str, allow: list[str] | None = None) -> OutboundRefused:
    with OutboundClient(allow=allow or []) as client, pytest.raises(OutboundRefused) as caught:
        client.get(url)
    return caught.value


@pytest.mark.parametrize("url, kind", [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.9.9.9:8080/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://169.254.10.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://172.31.255.255/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://[fd12:3456::1]/", "private"),
    ("http://100.64.0.1/", "private"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://[::ffff:127.0.0.1]/", "loopback (embedded in an IPv6 address)"),
    ("http://[::ffff:169.254.169.254]/", "cloud metadata (embedded in an IPv6 address)"),
    ("http://[::127.0.0.1]/", "loopback (embedded in an IPv6 address)"),
    ("http://[64:ff9b::a00:1]/", "private (embedded in an IPv6 address)"),
    ("http://[2002:7f00:1::]/", "loopback (embedded in an IPv6 address)"),
])
def test_addresses_that_are_not_public_are_refused(url, kind):
    error = refused(url)
    assert f"a {kind} address" in error.reason


@pytest.mark.parametrize("host", ["2130706433", "0177.0.0.1", "0x7f000001", "0x7f.1", "127.1", "017700000001"])
def test_encoded_spellings_of_an_ip_address_are_refused(host):
    error = refused(f"http://{host}/")
    assert "non-canonical spelling of the IP address 127.0.0.1" in error.reason


def test_encoded_spellings_are_refused_even_when_the_address_is_allowed():
    error = refused("http://2130706433/", allow=LOOPBACK)
    assert "non-canonical" in error.reason


def test_a_hostname_resolving_to_loopback_is_refused():
    error = refused("http://localhost/")
    assert "localhost resolves to a loopback address" in error.reason


def test_every_resolved_address_is_checked_not_only_the_first():
    resolver = lambda host, port: ["93.184.215.14", "10.1.2.3"]
    with pytest.raises(OutboundRefused, match="resolves to a private address .10.1.2.3."):
        check_url("https://mixed.test/", allow=Allowlist(), resolver=resolver)


def test_public_addresses_pass_the_check():
    target = check_url("https://8.8.8.8/dns", allow=Allowlist())
    assert target.address == "8.8.8.8" and target.port == 443
    target = check_url("http://api.example.test:8080/", allow=Allowlist(),
                       resolver=lambda host, port: ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
    assert (target.host, target.port, target.address) == ("api.example.test", 8080, "93.184.215.14")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com/"])
def test_schemes_other_than_http_are_refused(url):
    assert "is not http or https" in refused(url).reason


def test_an_allowed_loopback_network_is_reachable(fake):
    with OutboundClient(allow=LOOPBACK) as client:
        response = client.get(f"{fake.url}/hello")
    assert response.status_code == 200 and response.json() == {"hello": "world"}
    assert str(response.url) == f"{fake.url}/hello"
    assert fake.requests[0].headers["host"] == f"127.0.0.1:{fake.port}"


def test_the_allowlist_comes_from_settings_when_the_client_names_none(fake, settings):
    settings.AGENTSITE_OUTBOUND_ALLOW = LOOPBACK
    with OutboundClient() as client:
        assert client.get(f"{fake.url}/hello").status_code == 200
    settings.AGENTSITE_OUTBOUND_ALLOW = []
    with OutboundClient() as client, pytest.raises(OutboundRefused):
        client.get(f"{fake.url}/hello")


def test_the_allowlist_comes_from_the_environment_without_a_setting(fake, settings, monkeypatch):
    del settings.AGENTSITE_OUTBOUND_ALLOW
    monkeypatch.setenv("AGENTSITE_OUTBOUND_ALLOW", "10.0.0.0/8, 127.0.0.1/32")
    with OutboundClient() as client:
        assert client.get(f"{fake.url}/hello").status_code == 200


def test_the_connection_goes_to_the_checked_address_with_the_original_host(fake):
    """A second resolution (DNS rebinding) can never pick the address: the
    request is sent to the one that was checked, named by the Host header."""
    answers = []

    def resolver(host: str, port: int) -> list[str]:
        answers.append(host)
        return ["127.0.0.1"]

    with OutboundClient(allow=LOOPBACK, resolver=resolver) as client:
        response = client.get(f"http://rebind.test:{fake.port}/hello")
    assert response.status_code == 200
    assert answers == ["rebind.test"]
    assert fake.requests[0].headers["host"] == f"rebind.test:{fake.port}"


def test_localhost_is_reachable_when_its_address_is_allowed(fake):
    with OutboundClient(allow=["127.0.0.0/8", "::1/128"]) as client:
        assert client.get(f"http://localhost:{fake.port}/hello").status_code == 200
    assert fake.requests[0].headers["host"] == f"localhost:{fake.port}"


def test_a_hostname_entry_admits_private_addresses_but_never_loopback_or_metadata():
    allow = Allowlist.parse(["ghe.corp.test"])
    assert check_url("https://ghe.corp.test/api/v3", allow=allow, resolver=lambda h, p: ["10.20.0.5"]).address == "10.20.0.5"
    with pytest.raises(OutboundRefused, match="loopback"):
        check_url("https://ghe.corp.test/", allow=allow, resolver=lambda h, p: ["127.0.0.1"])
    with pytest.raises(OutboundRefused, match="cloud metadata"):
        check_url("https://ghe.corp.test/", allow=allow, resolver=lambda h, p: ["fd00:ec2::254"])
    with pytest.raises(OutboundRefused, match="private"):
        check_url("https://other.corp.test/", allow=allow, resolver=lambda h, p: ["10.20.0.5"])


@pytest.mark.parametrize("location", [
    "http://169.254.169.254/latest/meta-data/iam/",
    "http://[::1]:{port}/hello",
    "http://0x7f000001:{port}/hello",
    "http://[::ffff:127.0.0.1]:{port}/hello",
    "http://10.0.0.1/",
    "http://localhost:{port}/hello",
])
def test_a_redirect_to_a_refused_address_is_refused(fake, location):
    fake.route("GET", "/go", Answer(302, headers={"location": location.format(port=fake.port)}))
    with OutboundClient(allow=LOOPBACK, resolver=lambda host, port: ["::1"]) as client, \
            pytest.raises(OutboundRefused):
        client.get(f"{fake.url}/go")
    assert [r.path for r in fake.requests] == ["/go"]


def test_redirects_are_followed_hop_by_hop_and_bounded(fake):
    fake.route("GET", "/a", Answer(301, headers={"location": "/b"}))
    fake.route("GET", "/b", Answer(302, headers={"location": f"{fake.url}/hello"}))
    fake.route("GET", "/loop", Answer(302, headers={"location": "/loop"}))
    with OutboundClient(allow=LOOPBACK, max_redirects=3) as client:
        assert client.get(f"{fake.url}/a").json() == {"hello": "world"}
        with pytest.raises(OutboundError, match="more than 3 redirects"):
            client.get(f"{fake.url}/loop")
    assert [r.path for r in fake.requests] == ["/a", "/b", "/hello"] + ["/loop"] * 4


def test_a_303_turns_a_post_into_a_get_and_307_keeps_it(fake):
    fake.route("POST", "/see-other", Answer(303, headers={"location": "/hello"}))
    fake.route("POST", "/temporary", Answer(307, headers={"location": "/echo"}))
    fake.route("POST", "/echo", lambda request, match: Answer(200, request.json()))
    with OutboundClient(allow=LOOPBACK) as client:
        assert client.post(f"{fake.url}/see-other", json={"x": 1}).json() == {"hello": "world"}
        assert client.post(f"{fake.url}/temporary", json={"x": 2}).json() == {"x": 2}
    hello = fake.requests[1]
    assert (hello.method, hello.body) == ("GET", b"")
    assert "content-type" not in hello.headers


def test_credentials_are_dropped_when_a_redirect_changes_origin(fake):
    with FakeAPI() as other:
        other.route("GET", "/landing", Answer(200, {"ok": True}))
        fake.route("GET", "/same", Answer(302, headers={"location": "/hello"}))
        fake.route("GET", "/away", Answer(302, headers={"location": f"{other.url}/landing"}))
        with OutboundClient(allow=LOOPBACK) as client:
            client.get(f"{fake.url}/same", headers={"authorization": "Bearer secret-1"})
            client.get(f"{fake.url}/away", headers={"authorization": "Bearer secret-2"})
        assert fake.requests[1].headers["authorization"] == "Bearer secret-1"
        assert "authorization" not in other.requests[0].headers


def test_environment_proxies_are_ignored(fake, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with OutboundClient(allow=LOOPBACK) as client:
        assert client.get(f"{fake.url}/hello").status_code == 200


def test_a_response_larger_than_the_limit_is_refused(fake):
    fake.route("GET", "/big", Answer(200, b"x" * 5000))
    with OutboundClient(allow=LOOPBACK, max_response_bytes=1000) as client, \
            pytest.raises(OutboundError, match="more than 1000 bytes"):
        client.get(f"{fake.url}/big")


def test_request_json_raises_on_an_error_status(fake):
    fake.route("GET", "/broken", Answer(422, {"message": "Validation Failed"}))
    with OutboundClient(allow=LOOPBACK) as client:
        assert client.request_json("GET", f"{fake.url}/hello") == {"hello": "world"}
        with pytest.raises(OutboundHTTPError) as caught:
            client.request_json("GET", f"{fake.url}/broken")
    assert caught.value.status_code == 422 and "Validation Failed" in str(caught.value)


@pytest.mark.parametrize("text, expected", [
    ("2130706433", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"),
    ("127.1", "127.0.0.1"), ("10.1.2", "10.1.0.2"), ("0", "0.0.0.0"),
    ("cafe.be", None), ("1e100.net", None), ("256.1.1.1", None), ("1.2.3.4.5", None), ("08.1.1.1", None),
])
def test_inet_aton_spellings_decode_like_the_c_library(text, expected):
    decoded = parse_inet_aton(text)
    assert (str(decoded) if decoded else None) == expected


def self_signed_certificate(directory, name: str) -> tuple[str, str]:
    """A certificate for `name` (and its key), as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_https_to_the_pinned_address_verifies_the_certificate_against_the_hostname(tmp_path, fake):
    import ssl

    cert, key = self_signed_certificate(tmp_path, "api.provider.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    fake.httpd.socket = context.wrap_socket(fake.httpd.socket, server_side=True)
    resolver = lambda host, port: ["127.0.0.1"]
    with OutboundClient(allow=LOOPBACK, resolver=resolver, verify=ssl.create_default_context(cafile=cert)) as client:
        assert client.get(f"https://api.provider.test:{fake.port}/hello").json() == {"hello": "world"}
        # The same server reached under another name fails verification.
        with pytest.raises(OutboundError, match="certificate|[Hh]ostname"):
            client.get(f"https://other.provider.test:{fake.port}/hello")


def test_a_refusal_names_the_url_without_its_credentials():
    error = refused("http://deployer:S3cret-Passw0rd@10.0.0.1/orders")

    assert "refused to reach http://10.0.0.1/orders" in str(error)
    assert "S3cret" not in str(error) and "deployer" not in str(error)
