"""Redis's "unreachable" errors without importing the Redis client.

Importing `redis` costs every Django process a fifth of a second of CPU, most of
which run on SQLite and a local cache with no Redis at all. A Redis error can only
be raised once some caller (the broker, the cache, the channel layer) has imported
the client, so until then there is nothing to catch.
"""
from __future__ import annotations

import sys


def redis_unreachable() -> tuple[type[BaseException], ...]:
    """Redis's connection and timeout errors, for `except` and `isinstance`; () while no Redis client is loaded."""
    exceptions = sys.modules.get("redis.exceptions")
    if exceptions is None:
        return ()
    return (exceptions.ConnectionError, exceptions.TimeoutError)
