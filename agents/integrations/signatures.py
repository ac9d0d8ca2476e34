"""Webhook signature checks shared by the providers, all in constant time."""
from __future__ import annotations

import hashlib
import hmac

from agents.integrations.events import SignatureError


def as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def hmac_sha256_hex(secret: str | bytes, message: bytes) -> str:
    return hmac.new(as_bytes(secret), message, hashlib.sha256).hexdigest()


def verify_sha256_header(secret: str | bytes | None, body: bytes, value: str | None, *, header_name: str) -> None:
    """Check a `sha256=<hex>` header (GitHub's X-Hub-Signature-256, Bitbucket's
    X-Hub-Signature) against an HMAC-SHA256 of the raw body."""
    if not secret:
        raise SignatureError("no webhook secret is configured, so no delivery can be verified")
    if not value:
        raise SignatureError(f"the delivery has no {header_name} header")
    algorithm, _, digest = value.strip().partition("=")
    if algorithm.lower() != "sha256" or not digest:
        raise SignatureError(f"{header_name} is not of the form sha256=<hex>")
    expected = hmac_sha256_hex(secret, body)
    if not hmac.compare_digest(expected.encode(), digest.strip().lower().encode()):
        raise SignatureError(f"{header_name} does not match the body")


def verify_shared_token(expected: str | None, presented: str | None, *, header_name: str) -> None:
    """Check a plain shared token (GitLab's X-Gitlab-Token)."""
    if not expected:
        raise SignatureError("no webhook token is configured, so no delivery can be verified")
    if not presented:
        raise SignatureError(f"the delivery has no {header_name} header")
    if not hmac.compare_digest(as_bytes(expected), as_bytes(presented)):
        raise SignatureError(f"{header_name} does not match")
