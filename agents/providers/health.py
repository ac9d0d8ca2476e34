"""Whether a provider answers: one cheap probe per endpoint (provider, base URL, key), cached, run in parallel.

The model directory (`GET /v1/models`) asks about every configured model at
once; models served by one endpoint share its probe. A result is kept in
Django's cache for PROBE_CACHE_SECONDS, so a directory read often costs no
request to any provider, and every web process (with Redis) shares it.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from django.core.cache import caches

from agents.providers.base import Endpoint, ProviderError

PROBE_CACHE_SECONDS = 60
# Short: the directory answers a person waiting for it, and a provider slower than this is not healthy.
PROBE_TIMEOUT_SECONDS = 3.0
MAX_PARALLEL_PROBES = 8


@dataclass(frozen=True)
class Health:
    # None: not probed (no credential is configured for it).
    reachable: bool | None
    checked_at: datetime | None = None
    error: str = ""


NOT_PROBED = Health(reachable=None)


def cache_key(endpoint: Endpoint) -> str:
    raw = f"{endpoint.provider}|{endpoint.base_url}|{endpoint.key_hash}"
    return "provider-health:" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def probe_once(probe: Callable[[], None]) -> Health:
    checked = datetime.now(timezone.utc)
    try:
        probe()
    except ProviderError as exc:
        return Health(False, checked, f"{exc.code}: {exc}")
    except Exception as exc:  # a probe reports, never raises: one odd provider must not fail the directory
        return Health(False, checked, f"probe failed: {type(exc).__name__}: {exc}")
    return Health(True, checked)


def check(probes: dict[Endpoint, Callable[[], None]]) -> dict[Endpoint, Health]:
    """Each endpoint's health: cached if probed recently, else probed now (in parallel).

    Endpoints without a credential are not probed (NOT_PROBED). `probes[e]`
    makes the request (with the credentials of whoever configured it).
    """
    cache = caches["default"]
    found: dict[Endpoint, Health] = {}
    keys = {e: cache_key(e) for e in probes if e.configured}
    cached = cache.get_many(list(keys.values())) if keys else {}
    due = []
    for endpoint in probes:
        if not endpoint.configured:
            found[endpoint] = NOT_PROBED
        elif keys[endpoint] in cached:
            found[endpoint] = Health(**cached[keys[endpoint]])
        else:
            due.append(endpoint)
    if due:
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_PROBES, len(due))) as pool:
            results = dict(zip(due, pool.map(lambda e: probe_once(probes[e]), due)))
        cache.set_many({keys[e]: {"reachable": h.reachable, "checked_at": h.checked_at, "error": h.error}
                        for e, h in results.items()}, PROBE_CACHE_SECONDS)
        found.update(results)
    return found
