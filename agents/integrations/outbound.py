"""The one outbound HTTP client for channels and tools, with an SSRF guard.

A webhook handler or a tool sends requests to URLs that other people can
influence (a GitHub Enterprise base URL, a redirect from an API, a URL in a
payload). `OutboundClient` refuses to reach anything that is not a public
address unless it is explicitly allowed:

1. The URL's host is parsed. An IP literal in a non-canonical spelling
   (`2130706433`, `0177.0.0.1`, `0x7f000001`, `127.1`) is refused outright:
   resolvers and HTTP stacks disagree on what such spellings mean.
2. A hostname is resolved, and *every* address it resolves to is checked
   (loopback, link-local and cloud metadata, private ranges, CGNAT,
   unspecified, multicast, reserved; IPv6 forms that embed an IPv4 address
   are judged by the embedded address).
3. The request is sent to the address that was checked, with the original
   `Host` header and TLS server name, so a second DNS answer (rebinding)
   never decides where the connection goes.
4. Redirects are followed here, one hop at a time, each hop checked again,
   up to `max_redirects`. Credentials are dropped when a hop changes origin.

The allowlist (`AGENTSITE_OUTBOUND_ALLOW`, a Django setting or a
comma-separated environment variable, or `allow=` on the client) names
networks (`10.20.0.0/16`, `127.0.0.1/32`) whose addresses are reachable
whatever their kind, and hostnames (`ghe.corp.example`) that may resolve to
private addresses (never to loopback, link-local or metadata addresses: name
the network for that).
"""
from __future__ import annotations

import ipaddress
import json as jsonlib
import os
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

ALLOW_SETTING = "AGENTSITE_OUTBOUND_ALLOW"
REDIRECT_STATUSES = {301, 302, 303, 307, 308}
USER_AGENT = "agentsite"

# Cloud metadata endpoints. Most are link-local already; these are named so
# a hostname allowlist entry (which admits private addresses) never admits them.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",   # AWS, GCP, Azure, OpenStack
    "169.254.170.2",     # AWS ECS task credentials
    "fd00:ec2::254",     # AWS over IPv6 (a unique-local address)
    "100.100.100.200",   # Alibaba Cloud (inside CGNAT space)
))
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7",
))
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
NAT64_NETWORKS = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


class OutboundError(Exception):
    """An outbound request that could not be made or finished."""


class OutboundRefused(OutboundError):
    """The guard refused a URL: its address is not one this server may reach."""

    def __init__(self, url: str, reason: str):
        super().__init__(f"refused to reach {url}: {reason}")
        self.url = url
        self.reason = reason


class OutboundHTTPError(OutboundError):
    """The remote answered with an error status."""

    def __init__(self, response: httpx.Response):
        text = response.text[:500]
        super().__init__(f"{response.request.method} {response.url} answered {response.status_code}: {text}")
        self.response = response
        self.status_code = response.status_code


@dataclass(frozen=True)
class Allowlist:
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    hostnames: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> "Allowlist":
        networks, hostnames = [], set()
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hostnames.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hostnames))

    @classmethod
    def from_settings(cls) -> "Allowlist":
        """The configured allowlist, read now (settings can change under tests)."""
        from django.conf import settings

        entries: Any = getattr(settings, ALLOW_SETTING, None) if settings.configured else None
        if entries is None:
            entries = os.environ.get(ALLOW_SETTING, "").split(",")
        elif isinstance(entries, str):
            entries = entries.split(",")
        return cls.parse(entries)

    def admits_network(self, address: IPAddress) -> bool:
        return any(address.version == n.version and address in n for n in self.networks)


@dataclass(frozen=True)
class Target:
    """Where a checked URL's request goes: the address that was checked."""

    url: httpx.URL
    host: str
    port: int
    address: str


def parse_inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """Decode the legacy numeric spellings C's inet_aton accepts, or None.

    One to four parts, each decimal, octal (leading 0) or hex (leading 0x);
    the last part fills the remaining bytes (`127.1` is 127.0.0.1,
    `2130706433` is 127.0.0.1).
    """
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        try:
            if part[:2].lower() == "0x":
                values.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part[1:], 8))
            elif part.isdigit():
                values.append(int(part))
            else:
                return None
        except ValueError:
            return None
    *leading, last = values
    if any(v > 255 for v in leading) or last >= 256 ** (4 - len(leading)):
        return None
    number = 0
    for v in leading:
        number = number * 256 + v
    number = number * 256 ** (4 - len(leading)) + last
    return ipaddress.IPv4Address(number)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, compatible, 6to4, NAT64, Teredo)."""
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if address.sixtofour:
        return address.sixtofour
    if address.teredo:
        return address.teredo[1]
    if any(address in n for n in NAT64_NETWORKS) or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_kind(address: IPAddress) -> str | None:
    """Why an address is not public ("loopback", "private", ...), or None if it is."""
    if address.version == 6:
        inner = embedded_ipv4(address)
        if inner is not None:
            kind = address_kind(inner)
            return f"{kind} (embedded in an IPv6 address)" if kind else None
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if address.is_unspecified or (address.version == 4 and address in THIS_NETWORK):
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if any(address.version == n.version and address in n for n in PRIVATE_NETWORKS):
        return "private"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


def refused_kind(address: IPAddress, *, host: str, allow: Allowlist) -> str | None:
    """The kind of address that makes `address` (reached as `host`) refused, or None."""
    kind = address_kind(address)
    if kind is None or allow.admits_network(address):
        return None
    if kind == "private" and host.lower().rstrip(".") in allow.hostnames:
        return None
    return kind


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for host, in its order, without repeats."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OutboundError(f"cannot resolve {host}: {exc}") from exc
    addresses: list[str] = []
    for info in infos:
        address = str(info[4][0]).split("%", 1)[0]
        if address not in addresses:
            addresses.append(address)
    return addresses


def parse_url(url: str | httpx.URL) -> httpx.URL:
    """`url` as an httpx.URL; one httpx cannot parse is refused, naming an encoded address if it is one."""
    try:
        return httpx.URL(url)
    except httpx.InvalidURL as exc:
        host = urlsplit(str(url)).hostname or ""
        decoded = parse_inet_aton(host.rstrip("."))
        if decoded is not None:
            raise OutboundRefused(str(url), f"{host} is a non-canonical spelling of the IP address {decoded}") from exc
        raise OutboundRefused(str(url), f"not a valid URL: {exc}") from exc


def check_url(url: str | httpx.URL, *, allow: Allowlist | None = None,
              resolver: Resolver | None = None) -> Target:
    """Resolve and check `url`; the Target names the one address to connect to.

    Raises OutboundRefused when the URL must not be reached.
    """
    url = parse_url(url)
    allow = allow if allow is not None else Allowlist.from_settings()
    if url.scheme not in ("http", "https"):
        raise OutboundRefused(str(url), f"scheme {url.scheme!r} is not http or https")
    host = url.host
    if not host:
        raise OutboundRefused(str(url), "no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    name = host.rstrip(".")

    literal: IPAddress | None
    try:
        literal = ipaddress.ip_address(name)
    except ValueError:
        literal = None
        decoded = parse_inet_aton(name)
        if decoded is not None:
            raise OutboundRefused(str(url), f"{host} is a non-canonical spelling of the IP address {decoded}")
    if literal is not None:
        kind = refused_kind(literal, host=name, allow=allow)
        if kind:
            raise OutboundRefused(str(url), f"{host} is a {kind} address")
        return Target(url, host, port, str(literal))

    addresses = (resolver or system_resolver)(name, port)
    if not addresses:
        raise OutboundError(f"{host} resolves to no address")
    for text in addresses:
        kind = refused_kind(ipaddress.ip_address(text), host=name, allow=allow)
        if kind:
            raise OutboundRefused(str(url), f"{host} resolves to a {kind} address ({text})")
    return Target(url, host, port, addresses[0])


class OutboundClient:
    """Guarded HTTP: every request and every redirect hop goes through `check_url`.

    `allow` overrides the configured allowlist (tests pass
    `["127.0.0.1/32"]` for their loopback fakes). Environment proxies are
    ignored on purpose: a proxy would connect to a name we never checked.
    """

    def __init__(self, *, allow: Iterable[str] | None = None, timeout: float = 10.0, max_redirects: int = 5,
                 max_response_bytes: int = 10 * 1024 * 1024, headers: Mapping[str, str] | None = None,
                 resolver: Resolver | None = None, verify: bool | str | ssl.SSLContext = True):
        self.allow = Allowlist.parse(allow) if allow is not None else None
        self.timeout = timeout
        self.max_redirects = max_redirects
        self.max_response_bytes = max_response_bytes
        self.headers = httpx.Headers({"user-agent": USER_AGENT, **(headers or {})})
        self.resolver = resolver
        self.verify = verify
        # One pool per origin: connections are keyed by the pinned address,
        # and two hostnames sharing an address must not share a TLS session.
        self._clients: dict[tuple[str, str, int], httpx.Client] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "OutboundClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def check(self, url: str | httpx.URL) -> Target:
        allow = self.allow if self.allow is not None else Allowlist.from_settings()
        return check_url(url, allow=allow, resolver=self.resolver)

    def request(self, method: str, url: str | httpx.URL, *, params: Any = None,
                headers: Mapping[str, str] | None = None, json: Any = None, content: bytes | str | None = None,
                data: Mapping[str, Any] | None = None) -> httpx.Response:
        """Send a request, following redirects through the guard; the body is read (bounded)."""
        first = httpx.Request(method, parse_url(url), params=params, headers=self._merged(headers), json=json,
                              content=content, data=data)
        body = first.read()
        method, current, hop_headers = first.method, first.url, first.headers
        for _ in range(self.max_redirects + 1):
            response = self._send(method, current, hop_headers, body)
            location = response.headers.get("location")
            if response.status_code not in REDIRECT_STATUSES or not location:
                return response
            following = current.join(location)
            if response.status_code == 303 or (response.status_code in (301, 302) and method not in ("GET", "HEAD")):
                method, body = ("HEAD" if method == "HEAD" else "GET"), b""
                hop_headers = httpx.Headers({k: v for k, v in hop_headers.items()
                                             if k.lower() not in ("content-type", "content-length")})
            if (following.scheme, following.host, following.port) != (current.scheme, current.host, current.port):
                hop_headers = httpx.Headers({k: v for k, v in hop_headers.items()
                                             if k.lower() not in ("authorization", "cookie", "private-token")})
            current = following
        raise OutboundError(f"more than {self.max_redirects} redirects from {url}")

    def get(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    def request_json(self, method: str, url: str | httpx.URL, **kwargs: Any) -> Any:
        """`request`, then the decoded JSON body; an error status raises OutboundHTTPError."""
        response = self.request(method, url, **kwargs)
        if response.status_code >= 400:
            raise OutboundHTTPError(response)
        if not response.content:
            return None
        try:
            return jsonlib.loads(response.content)
        except ValueError as exc:
            raise OutboundError(f"{method} {url} answered {response.status_code} with a body that is not JSON") from exc

    def _merged(self, headers: Mapping[str, str] | None) -> httpx.Headers:
        merged = httpx.Headers(self.headers)
        merged.update(headers or {})
        return merged

    def _client_for(self, target: Target) -> httpx.Client:
        key = (target.url.scheme, target.host, target.port)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = httpx.Client(timeout=self.timeout, follow_redirects=False, trust_env=False,
                                      verify=self.verify)
                self._clients[key] = client
            return client

    def _send(self, method: str, url: httpx.URL, headers: httpx.Headers, body: bytes) -> httpx.Response:
        target = self.check(url)
        pinned = url.copy_with(host=target.address)
        hop_headers = httpx.Headers(headers)
        hop_headers["host"] = url.netloc.decode("ascii")
        # httpcore verifies the certificate against the SNI name, not the address.
        extensions = {"sni_hostname": target.host} if url.scheme == "https" else {}
        request = httpx.Request(method, pinned, headers=hop_headers, content=body, extensions=extensions)
        try:
            response = self._client_for(target).send(request, stream=True)
            try:
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise OutboundError(f"{method} {url} answered more than {self.max_response_bytes} bytes")
                    chunks.append(chunk)
            finally:
                response.close()
        except httpx.HTTPError as exc:
            raise OutboundError(f"{method} {url} failed: {exc}") from exc
        # The body is decoded now; rebuild the response around the URL the
        # caller asked for (not the pinned address) without encoding headers.
        kept = [(k, v) for k, v in response.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(response.status_code, headers=kept, content=b"".join(chunks),
                              request=httpx.Request(method, url, headers=headers))
