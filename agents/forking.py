"""What a process closes before it forks children that use the database.

No database connection, and no pool thread, may cross a fork: an SQLite file
open in the parent (its locks and shared memory are the process's) gives the
child's own connection to it "disk I/O error" or "database disk image is
malformed", and a PostgreSQL pool's threads, caught mid-connect, could leave
a lock held forever in the child. `serve` calls this before it forks its
children, and `qcluster` before django-q2 forks its sentinel and workers.
"""
from __future__ import annotations

from django.db import connections


def close_database_before_fork() -> None:
    """Close this process's connections and PostgreSQL pools (reopened on next use)."""
    connections.close_all()
    for connection in connections.all(initialized_only=True):
        if connection.alias in getattr(type(connection), "_connection_pools", {}):  # (`.pool` would open one)
            connection.close_pool()
