"""The production switch, `AGENTSITE_ENV=production`: what it requires and what it turns on.

`agentsite.settings` calls `production_settings(os.environ)` and applies what it
returns, so every process that loads the settings (`manage.py serve`, `check`,
`qcluster`, the ASGI app) refuses to start the same way: with
`ProductionSettingsMissing`, whose message names each missing setting and how
to set it. `manage.py` and `agentsite.asgi` print that message alone and exit
non-zero; a traceback would bury it.
"""
from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlsplit

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX, SECRET_KEY_MIN_LENGTH, SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from agents.secrets.keys import SecretsKeyError, parse_keys
from channels_app.proxies import parse_networks

ENVIRONMENTS = ("development", "production")
# What SECRET_KEY is when AGENTSITE_SECRET_KEY is unset. Long enough that Django's
# own deploy check does not flag it, and published in this file: refused in production.
FALLBACK_SECRET_KEY = "agentsite-insecure-dev-key-set-AGENTSITE_SECRET_KEY"
# A year: what browsers' preload lists ask for, and long enough to matter.
DEFAULT_HSTS_SECONDS = 365 * 24 * 3600

KEY_HINT = ("set it to a long random string, the same in every process of this deployment, e.g.\n"
            "      export AGENTSITE_SECRET_KEY=\"$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')\"")
SECRETS_HINT = ("set it to one or more Fernet keys, comma-separated (the first encrypts agents' secrets, "
                "all decrypt), the same in every process, e.g.\n"
                "      export AGENTSITE_SECRETS_KEYS=\"$(python3 -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')\"")
URL_HINT = ("set it to the address people and programs reach this server at, e.g.\n"
            "      export AGENTSITE_PUBLIC_URL=https://agents.example.com")
ALLOW_ALL_REFUSED = ("(serve --allow-anonymous) admits every caller, from anywhere, as the anonymous principal: in "
                     "production people log in or send a token; unset AGENTSITE_AUTH (or set it to bearer) and give "
                     "people accounts and tokens (docs/running-for-a-team.md)")


class ProductionSettingsMissing(ImproperlyConfigured):
    """Production mode lacks a setting it cannot run without."""


# A scraper's secret, which a guesser may try at /metrics: long enough that the lockout's
# few guesses an hour never find it (`secrets.token_urlsafe(32)` makes 43 characters).
METRICS_TOKEN_MIN_LENGTH = 32
METRICS_TOKEN_HINT = ("make one with  python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")


def environment(environ: Mapping[str, str]) -> str:
    """`AGENTSITE_ENV`, checked: a misspelt "production" must not fall back to development."""
    value = environ.get("AGENTSITE_ENV", "").strip().lower() or "development"
    if value not in ENVIRONMENTS:
        raise ProductionSettingsMissing(
            f"AGENTSITE_ENV={environ['AGENTSITE_ENV']!r} is not one of {', '.join(ENVIRONMENTS)}: "
            "set AGENTSITE_ENV=production on a server a team uses, or leave it unset")
    return value


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _host_pattern(hostname: str) -> str:
    """A URL's host as ALLOWED_HOSTS matches it: an IPv6 address in brackets."""
    return f"[{hostname}]" if ":" in hostname else hostname


def weak_secret_key(key: str) -> str | None:
    """What makes `key` guessable by Django's own rule (`check --deploy`'s security.W009), or None."""
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"starts with {SECRET_KEY_INSECURE_PREFIX!r}, the prefix of keys Django makes for development"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"is {len(key)} characters long, fewer than {SECRET_KEY_MIN_LENGTH}"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"has {len(set(key))} different characters, fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS}"
    return None


def production_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings production mode overrides, or `ProductionSettingsMissing` naming every problem.

    1. Check the required settings: a secret key that is not the fallback and
       passes Django's own deploy check (`weak_secret_key`), a public URL with a
       scheme and a host, Fernet keys for agents' secrets, no `*` among the
       allowed hosts, no `allow_all` auth (every remote caller admitted as
       anonymous), trusted proxies that are addresses or networks of proxies
       (`channels_app.proxies.parse_networks`), not the whole internet, and a metrics
       token, if set, of at least METRICS_TOKEN_MIN_LENGTH characters.
    2. Turn debug off and allow only the public URL's host and the listed ones.
    3. When the public URL is https: secure cookies, HSTS and the redirect to
       https (over plain http they would lock people out of their logins).
       A proxy that ends TLS says the request came over https in X-Forwarded-Proto,
       which counts from AGENTSITE_TRUSTED_PROXIES only (channels_app.proxies), never
       Django's SECURE_PROXY_SSL_HEADER, which believes it from any peer.
    """
    problems: list[str] = []
    secret_key = environ.get("AGENTSITE_SECRET_KEY", "")
    if not secret_key:
        problems.append(f"AGENTSITE_SECRET_KEY is not set: {KEY_HINT}")
    elif secret_key == FALLBACK_SECRET_KEY:
        problems.append(f"AGENTSITE_SECRET_KEY is the built-in development key, which anyone can read: {KEY_HINT}")
    elif weakness := weak_secret_key(secret_key):
        problems.append(f"AGENTSITE_SECRET_KEY {weakness}, so sessions and signed links could be forged: {KEY_HINT}")
    public_url = environ.get("AGENTSITE_PUBLIC_URL", "").strip()
    public = urlsplit(public_url)
    if not public_url:
        problems.append(f"AGENTSITE_PUBLIC_URL is not set: {URL_HINT}")
    elif public.scheme not in ("http", "https") or not public.hostname:
        problems.append(f"AGENTSITE_PUBLIC_URL={public_url!r} is not an http(s) URL with a host: {URL_HINT}")
    secrets_keys = environ.get("AGENTSITE_SECRETS_KEYS", "")
    if not secrets_keys.strip():
        problems.append(f"AGENTSITE_SECRETS_KEYS is not set: {SECRETS_HINT}")
    else:
        try:
            parse_keys(secrets_keys)
        except SecretsKeyError as exc:
            problems.append(str(exc))
    extra_hosts = [h.strip() for h in environ.get("AGENTSITE_ALLOWED_HOSTS", "").split(",") if h.strip()]
    if "*" in extra_hosts:
        problems.append("AGENTSITE_ALLOWED_HOSTS lists '*': in production list the host names this server "
                        "answers to (the public URL's host is allowed already)")
    if environ.get("AGENTSITE_AUTH", "").strip() == "allow_all":
        problems.append(f"AGENTSITE_AUTH=allow_all {ALLOW_ALL_REFUSED}")
    metrics_token = environ.get("AGENTSITE_METRICS_TOKEN", "").strip()
    if metrics_token and len(metrics_token) < METRICS_TOKEN_MIN_LENGTH:
        problems.append(f"AGENTSITE_METRICS_TOKEN is {len(metrics_token)} characters long, fewer than "
                        f"{METRICS_TOKEN_MIN_LENGTH}, so it could be guessed: {METRICS_TOKEN_HINT}")
    proxies = tuple(p.strip() for p in environ.get("AGENTSITE_TRUSTED_PROXIES", "").split(",") if p.strip())
    try:
        parse_networks(proxies)
    except ImproperlyConfigured as exc:
        problems.append(str(exc))
    if problems:
        raise ProductionSettingsMissing(
            "agentsite will not start with AGENTSITE_ENV=production:\n" + "\n".join(f"  - {p}" for p in problems))

    overrides: dict[str, Any] = {
        "SECRET_KEY": secret_key,
        "DEBUG": False,
        "ALLOWED_HOSTS": list(dict.fromkeys([_host_pattern(public.hostname), *extra_hosts])),
    }
    if public.scheme == "https":
        include_subdomains = _flag(environ, "AGENTSITE_HSTS_INCLUDE_SUBDOMAINS")
        preload = _flag(environ, "AGENTSITE_HSTS_PRELOAD")
        overrides.update(
            SESSION_COOKIE_SECURE=True,
            CSRF_COOKIE_SECURE=True,
            SECURE_SSL_REDIRECT=True,
            SECURE_HSTS_SECONDS=int(environ.get("AGENTSITE_HSTS_SECONDS", "") or DEFAULT_HSTS_SECONDS),
            SECURE_HSTS_INCLUDE_SUBDOMAINS=include_subdomains,
            SECURE_HSTS_PRELOAD=preload,
            # HSTS for every subdomain, or a place on the browsers' preload list, binds
            # hosts this server does not run: the operator opts in, and having not is no warning.
            SILENCED_SYSTEM_CHECKS=[*([] if include_subdomains else ["security.W005"]),
                                    *([] if preload else ["security.W021"])],
        )
    return overrides
