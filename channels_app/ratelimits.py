"""Per-principal rate limits on starting sessions and sending messages.

A fixed window per limit: the count of a principal's requests in the current
window of the rate's length, incremented atomically in the `limits` cache
(Redis when it is configured, else a table of the server's database), so
every web process of one server counts against the same budget. Over the
limit, the request is refused with 429 before anything is written; the
refused request does not count against the next window.
"""
from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.db import DatabaseCache
from django.db import router, transaction

from channels_app.errors import APIError
from sessions.plumbing.pglocks import lock_for_transaction

SESSIONS = "sessions"
MESSAGES = "messages"
SETTING = {SESSIONS: "AGENTSITE_RATE_SESSIONS", MESSAGES: "AGENTSITE_RATE_MESSAGES"}
WHAT = {SESSIONS: "sessions started", MESSAGES: "messages sent"}


def check_rate(principal, kind: str, now: float | None = None) -> None:
    """Count one request of `kind` by `principal`; APIError 429 (with Retry-After) when it is over the limit."""
    rate = getattr(settings, SETTING[kind])
    if rate is None:
        return
    now = time.time() if now is None else now
    window = int(now // rate.seconds)
    who = hashlib.sha256(f"{principal.authenticator}\0{principal.principal_id}".encode()).hexdigest()[:32]
    count = increment(f"rate:{kind}:{rate.seconds}:{who}:{window}", rate.seconds)
    if count > rate.count:
        retry_after = max(1, math.ceil((window + 1) * rate.seconds - now))
        raise APIError(429, "rate_limited",
                       f"too many {WHAT[kind]}: the limit is {rate} per principal ({SETTING[kind]}); "
                       f"retry in {retry_after} s",
                       {"limit": str(rate), "retryAfter": retry_after},
                       headers={"Retry-After": str(retry_after)})


def increment(key: str, window_seconds: int) -> int:
    """The key's count after adding one; the key expires with its window.

    Redis's INCR is atomic; the database cache's `incr` is a read and a write,
    so it runs in a transaction that serializes callers of the same key: on
    SQLite every write transaction takes the database's lock at BEGIN
    (`transaction_mode: IMMEDIATE`), on PostgreSQL a transaction-scoped advisory lock.
    """
    cache = caches["limits"]
    if not isinstance(cache, DatabaseCache):
        return _add_one(cache, key, window_seconds)
    alias = router.db_for_write(cache.cache_model_class)
    with transaction.atomic(using=alias):
        lock_for_transaction(key, using=alias)
        return _add_one(cache, key, window_seconds)


def _add_one(cache, key: str, window_seconds: int) -> int:
    # A second beyond the window, so a late increment never finds it expired mid-window.
    cache.add(key, 0, timeout=window_seconds + 1)
    try:
        return cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.add(key, 0, timeout=window_seconds + 1)
        return cache.incr(key)
