"""PostgreSQL's transaction-scoped advisory locks: a lock on a name rather than a row.

For work that must be serialized per key where no row exists to lock yet (a
principal's count of active turns, a rate counter's window). It writes no
row and has no ORM form, so it lives here rather than in sessions.sql.
"""
from __future__ import annotations

import hashlib

from django.db import connections


def lock_id(key: str) -> int:
    """The advisory lock's 64-bit id for `key`, hashed here rather than by the server: a key
    may hold what a text parameter cannot (NUL separates the parts of the callers' keys)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_for_transaction(key: str, using: str = "default") -> None:
    """Hold an advisory lock on `key` until the current transaction ends (PostgreSQL; elsewhere nothing).

    On SQLite every write transaction already holds the database's lock
    (`transaction_mode: IMMEDIATE`), which serializes the same callers.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_id(key)])
