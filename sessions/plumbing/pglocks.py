"""PostgreSQL's transaction-scoped advisory locks: a lock on a name rather than a row.

For work that must be serialized per key where no row exists to lock yet (a
principal's count of active turns, a rate counter's window). It writes no
row and has no ORM form, so it lives here rather than in sessions.sql.
"""
from __future__ import annotations

import hashlib

from django.db import connections


def advisory_key(key: str) -> int:
    """The signed 64-bit lock number of `key`.

    Hashed here rather than by PostgreSQL's `hashtext`: a text parameter may not
    hold a NUL (a principal's key does), and 32 bits would make unrelated
    principals share a lock far sooner than 64.
    """
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


def lock_for_transaction(key: str, using: str = "default") -> None:
    """Hold an advisory lock on `key` until the current transaction ends (PostgreSQL; elsewhere nothing).

    On SQLite every write transaction already holds the database's lock
    (`transaction_mode: IMMEDIATE`), which serializes the same callers.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(key)])
