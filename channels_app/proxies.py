"""Reverse proxies in front of this server: whose forwarding headers count.

A proxy that ends TLS talks plain http to this server from its own address,
and says in headers who the client was (`X-Forwarded-For`, or RFC 7239's
`Forwarded`), which scheme it came in over (`X-Forwarded-Proto`) and which
host it asked for (`X-Forwarded-Host`). Anyone can send those headers, so they
count only when the direct peer is listed in `AGENTSITE_TRUSTED_PROXIES`
(addresses and CIDR networks). Then `behind_trusted_proxies`, an ASGI
middleware around the whole application, rewrites the scope's client, scheme
and `host` header before Django or Channels sees it, so HTTP, streams and
websockets, the auth chain, ALLOWED_HOSTS, the cross-site guard and the https
redirect all read the forwarded values. From any other peer the headers are
left as they came and read by nobody, except the loopback policy, which
refuses a request carrying them (`channels_app.auth.FORWARDING_HEADERS`); it
keeps refusing a proxied request, since the headers stay in the scope.

The client is the rightmost `X-Forwarded-For` hop that is not itself a trusted
proxy: every hop left of it was written by someone we do not trust.
"""
from __future__ import annotations

import functools
import ipaddress
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Headers a proxy or a CDN adds to name the client it forwards: from a loopback peer any of
# them means a proxy on this host, so the caller is not local whatever the peer address says.
FORWARDING_HEADERS = (
    "x-forwarded-for", "forwarded", "x-forwarded-host",
    "x-real-ip", "x-client-ip", "true-client-ip", "cf-connecting-ip", "x-originating-ip",
    "x-cluster-client-ip", "client-ip", "fastly-client-ip",
)

log = logging.getLogger(__name__)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SCHEMES = {"http": ("http", "ws"), "https": ("https", "wss")}
# The widest public network of proxies taken, by family: a /16 is 65,536 IPv4 addresses and a
# /32 of IPv6 an ISP's whole allocation, wider than the ranges hosted load balancers publish;
# wider (8.0.0.0/8, 2002::/16 which is 6to4 and so all of IPv4, ::/0) is other people's hosts,
# any of which could then say who the client was. A private network may be wider (10.0.0.0/8).
WIDEST_PREFIX = {4: 16, 6: 32}


@functools.lru_cache(maxsize=8)
def parse_networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    """`AGENTSITE_TRUSTED_PROXIES`' entries as networks; ImproperlyConfigured names a bad one."""
    networks = []
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry.strip().strip("[]"), strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"AGENTSITE_TRUSTED_PROXIES lists {entry!r}, which is not an IP address or network "
                "(e.g. 127.0.0.1, 10.0.0.0/8, ::1)") from None
        widest = WIDEST_PREFIX[network.version]
        if network.prefixlen < widest and not network.is_private:
            raise ImproperlyConfigured(
                f"AGENTSITE_TRUSTED_PROXIES lists {entry!r}, which covers "
                f"2^{network.max_prefixlen - network.prefixlen} public addresses: "
                f"any of them could say who the client was. List your proxies' own addresses or networks "
                f"(public networks /{WIDEST_PREFIX[4]} (IPv4) or /{WIDEST_PREFIX[6]} (IPv6) or narrower, "
                f"e.g. 127.0.0.1, 10.0.0.0/8, 203.0.113.0/24)")
        networks.append(network)
    return tuple(networks)


def trusted_networks() -> tuple[Network, ...]:
    """`AGENTSITE_TRUSTED_PROXIES`, read at call time (tests change it)."""
    return parse_networks(tuple(getattr(settings, "AGENTSITE_TRUSTED_PROXIES", ()) or ()))


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    value = value.strip().strip('"')
    if value.startswith("["):  # "[2001:db8::1]:443" in Forwarded
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:  # "192.0.2.1:443"
        value = value.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    return getattr(address, "ipv4_mapped", None) or address


def is_trusted_proxy(peer: str, networks: Sequence[Network] | None = None) -> bool:
    address = _address(peer)
    return address is not None and any(address in n for n in (trusted_networks() if networks is None else networks))


@dataclass(frozen=True)
class Hop:
    client: str
    proto: str | None = None
    host: str | None = None


def _list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _forwarded_hops(value: str) -> list[Hop]:
    """RFC 7239 `Forwarded: for=192.0.2.1;proto=https;host=example.com, for=...`."""
    hops = []
    for element in _list(value):
        pairs = {}
        for pair in element.split(";"):
            name, _, val = pair.partition("=")
            pairs[name.strip().lower()] = val.strip().strip('"')
        hops.append(Hop(pairs.get("for", ""), pairs.get("proto") or None, pairs.get("host") or None))
    return hops


def _x_forwarded_hops(headers: Mapping[str, str]) -> list[Hop]:
    """X-Forwarded-For, with the Proto and Host of the same hop when each proxy appended one,
    else the single value the nearest proxy set (nginx sets, it does not append)."""
    clients = _list(headers.get("x-forwarded-for"))
    protos, hosts = _list(headers.get("x-forwarded-proto")), _list(headers.get("x-forwarded-host"))

    def at(values: list[str], i: int) -> str | None:
        if len(values) == len(clients):
            return values[i]
        return values[-1] if values else None

    return [Hop(c, at(protos, i), at(hosts, i)) for i, c in enumerate(clients)]


def forwarded_hop(peer: str, headers: Mapping[str, str], networks: Sequence[Network] | None = None) -> Hop | None:
    """What a trusted peer says about the client, or None (untrusted peer, or nothing forwarded).

    `headers` has lower-case names. `X-Forwarded-For` is read when present
    (what nginx and most proxies send), else `Forwarded`. A proxied request
    with no client list still has its scheme and host taken from the proxy.
    """
    networks = trusted_networks() if networks is None else networks
    if not networks or not is_trusted_proxy(peer, networks):
        return None
    if "x-forwarded-for" in headers:
        hops = _x_forwarded_hops(headers)
    elif "forwarded" in headers:
        hops = _forwarded_hops(headers["forwarded"])
    else:
        hops = []
    if not hops:
        proto, host = _list(headers.get("x-forwarded-proto")), _list(headers.get("x-forwarded-host"))
        if not proto and not host:
            return None
        return Hop(peer, proto[-1] if proto else None, host[-1] if host else None)
    for hop in reversed(hops):
        if not is_trusted_proxy(hop.client, networks):
            return hop
    return hops[0]  # every hop is a proxy of ours: the first one is as far as we can see


def rewrite_scope(scope: Mapping[str, Any], networks: Sequence[Network] | None = None) -> Mapping[str, Any]:
    """The scope as the client sent it to the proxy, when the peer is a trusted proxy; else as is."""
    if scope.get("type") not in ("http", "websocket"):
        return scope
    networks = trusted_networks() if networks is None else networks
    peer = (scope.get("client") or ("", 0))[0] or ""
    if not networks or not is_trusted_proxy(peer, networks):  # the common case: nothing to decode
        if not networks:
            _unlisted_local_proxy(peer, scope.get("headers", ()))
        return scope
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    hop = forwarded_hop(peer, headers, networks)
    if hop is None:
        return scope
    changed = dict(scope)
    address = _address(hop.client)
    if address is not None:
        changed["client"] = (str(address), 0)
    if hop.proto and hop.proto.lower() in SCHEMES:
        http, ws = SCHEMES[hop.proto.lower()]
        changed["scheme"] = ws if scope["type"] == "websocket" else http
    if hop.host:
        changed["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() != b"host"]
        changed["headers"].append((b"host", hop.host.encode("latin-1")))
    return changed


def _unlisted_local_proxy(peer: str, headers: Sequence[tuple[bytes, bytes]]) -> None:
    """A loopback peer forwarding a client while no proxy is listed: say so, once per process."""
    if not _loopback(peer) or not any(k.decode("latin-1").lower() in FORWARDING_HEADERS for k, _ in headers):
        return
    warn_of_unlisted_proxy()


def _loopback(peer: str) -> bool:
    address = _address(peer)
    return address is not None and address.is_loopback


@functools.cache
def warn_of_unlisted_proxy() -> None:
    log.warning("a proxy on this host forwards requests (forwarding headers from a loopback peer) but "
                "AGENTSITE_TRUSTED_PROXIES is unset, so every client counts as the proxy's address for the "
                "login lockout and the rate limits: set AGENTSITE_TRUSTED_PROXIES=127.0.0.1,::1 (the proxy's "
                "address) so the client it names is counted instead")


def behind_trusted_proxies(app: Callable) -> Callable:
    """ASGI middleware: `rewrite_scope` for every connection. Checks the list as it wraps,
    so a web process with a bad entry refuses to start."""
    trusted_networks()

    async def middleware(scope, receive, send):
        return await app(rewrite_scope(scope), receive, send)

    return middleware
