"""A release's allowed domains: which hostnames its outbound calls may reach, on top of the guard.

A list is checked when it is deployed (`check_allowed_domains`): at most
MAX_DOMAINS entries, each a lowercase hostname of at least two labels with an
alphabetic top-level domain, optionally with one leading `*.` that admits
subdomains only (`*.example.com` admits `a.example.com`, not `example.com`).
An empty list leaves the server's own rules (`AGENTSITE_OUTBOUND_ALLOW`) alone;
a list only ever narrows them.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Iterable

MAX_DOMAINS = 20
LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
TLD = re.compile(r"^[a-z]{2,63}$")


class DomainError(ValueError):
    """An allowed-domain entry breaks a rule; the message names the entry and the rule."""


def check_allowed_domain(entry: str) -> str:
    """`entry` if it follows the rules, else DomainError naming the one it breaks."""
    name = entry[2:] if entry.startswith("*.") else entry
    if "://" in entry:
        raise DomainError(f"{entry!r}: a domain, not a URL (no scheme)")
    if "/" in entry or "@" in entry:
        raise DomainError(f"{entry!r}: a domain only (no path or user)")
    if ":" in name.strip("[]") and not _is_ip(name.strip("[]")):
        raise DomainError(f"{entry!r}: no port")
    if _is_ip(name.strip("[]")):
        raise DomainError(f"{entry!r}: a hostname, not an IP address")
    if name.endswith("."):
        raise DomainError(f"{entry!r}: no trailing dot")
    if name != name.lower():
        raise DomainError(f"{entry!r}: lowercase only")
    if "*" in name:
        raise DomainError(f"{entry!r}: one wildcard at most, as a leading '*.'")
    labels = name.split(".")
    if len(labels) < 2:
        raise DomainError(f"{entry!r}: at least two labels (example.com)")
    if not all(LABEL.match(label) for label in labels) or len(name) > 253:
        raise DomainError(f"{entry!r}: labels of letters, digits and inner hyphens, 1 to 63 characters")
    if not TLD.match(labels[-1]):
        raise DomainError(f"{entry!r}: the top-level domain is letters only")
    return entry


def check_allowed_domains(entries: Iterable[str]) -> list[str]:
    """The entries, checked, without repeats; DomainError on the first that breaks a rule."""
    checked: list[str] = []
    for entry in entries:
        if check_allowed_domain(entry) not in checked:
            checked.append(entry)
    if len(checked) > MAX_DOMAINS:
        raise DomainError(f"{len(checked)} allowed domains: at most {MAX_DOMAINS}")
    return checked


def domain_admits(domains: Iterable[str], host: str) -> bool:
    """Whether `host` is one of `domains` (exactly, or a subdomain of a `*.` entry)."""
    host = host.lower().rstrip(".")
    for domain in domains:
        if domain.startswith("*."):
            if host.endswith(domain[1:]) and len(host) > len(domain) - 1:
                return True
        elif host == domain:
            return True
    return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
