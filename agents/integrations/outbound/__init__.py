"""The one outbound HTTP client for channels and tools, with an SSRF guard.

A webhook handler or a tool sends requests to URLs that other people can
influence (a GitHub Enterprise base URL, a redirect from an API, a URL in a
payload). `OutboundClient` refuses to reach anything that is not a public
address unless it is explicitly allowed: `guard` decides which addresses may
be reached (`check_url`, the allowlist `AGENTSITE_OUTBOUND_ALLOW`), `client`
sends each request, each redirect hop and each auth round trip to the
address that was checked.

The names below are the package's interface; the modules inside import each other directly.
"""
from __future__ import annotations

from agents.integrations.outbound.client import OutboundClient, OutboundHTTPError, OutboundTimeout
from agents.integrations.outbound.domains import DomainError, check_allowed_domains, domain_admits
from agents.integrations.outbound.guard import (
    ALLOW_SETTING,
    Allowlist,
    OutboundError,
    OutboundRefused,
    Target,
    address_kind,
    check_url,
    parse_inet_aton,
    parse_url,
)

__all__ = [
    "ALLOW_SETTING", "Allowlist", "DomainError", "check_allowed_domains", "domain_admits", "OutboundClient", "OutboundError", "OutboundHTTPError", "OutboundRefused",
    "OutboundTimeout", "Target", "address_kind", "check_url", "parse_inet_aton", "parse_url",
]
