"""Which URLs this server may reach: `check_url` and the allowlist.

1. The URL's host is parsed. An IP literal in a non-canonical spelling
   (`2130706433`, `0177.0.0.1`, `0x7f000001`, `127.1`) is refused outright:
   resolvers and HTTP stacks disagree on what such spellings mean.
2. A hostname is resolved, and *every* address it resolves to is checked
   (loopback, link-local and cloud metadata, private ranges, CGNAT,
   unspecified, multicast, reserved; IPv6 forms that embed an IPv4 address
   are judged by the embedded address).
3. The `Target` names the one address that was checked; the client connects
   to it (`outbound.client`).

The allowlist (`AGENTSITE_OUTBOUND_ALLOW`, a Django setting or a
comma-separated environment variable, or `allow=` on the client) names
networks (`10.20.0.0/16`, `127.0.0.1/32`) whose addresses are reachable
whatever their kind, and hostnames (`ghe.corp.example`) that may resolve to
private addresses (never to loopback, link-local or metadata addresses: name
the network for that).
"""
from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import urlsplit

from agents.redaction import without_credentials

# httpx is imported where a URL is parsed or a request sent: with its command line's libraries it costs
# every Django process a sixth of a second, and most never send a request.
if TYPE_CHECKING:
    import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

ALLOW_SETTING = "AGENTSITE_OUTBOUND_ALLOW"

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
        super().__init__(f"refused to reach {without_credentials(str(url))}: {reason}")
        self.url = url
        self.reason = reason


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
    import httpx  # where a URL is parsed (see the top of the module)

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
