"""Django's PostgreSQL backend with a pool that survives a database restart.

After a restart (or a crash of any backend, which makes PostgreSQL end every
connection) each idle pooled connection is dead. Django's health check makes
psycopg_pool test a connection before handing it out, but the pool backs off
exponentially between failed checks (1 s, 2 s, 4 s, ...), so a process with
many dead idle connections would stall for seconds, or time out, on its
first query. Here the first failed check sweeps every idle connection of the
pool at once (`ConnectionPool.check()` tests them without backoff and
replaces the dead ones), so the next attempt gets a working connection.

The check itself costs no round trip when the connection's socket has nothing
to read, which is what a healthy idle connection looks like; only a readable
socket (the server said something, or hung up) gets a test query.

`pool` is Django 5.2's property with the check replaced (requirements.txt pins
django>=5.2,<5.3); tests/test_upstream_copies.py fails when Django's changes.
"""
from __future__ import annotations

import select

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


def idle_and_quiet(conn) -> bool:
    """True when an idle connection has nothing to read: the common case, answered
    without a round trip. A server that ended the connection (a restart, a killed
    backend) leaves its socket readable (an error message, then EOF), and so does
    anything else unexpected; those get the full check, a query to the server."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        # As Django's, except for the check (Django 5.2, django/db/backends/postgresql/base.py).
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == base.NO_DB_ALIAS or not pool_options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True
            holder: list[ConnectionPool] = []

            def check(conn) -> None:
                if idle_and_quiet(conn):
                    return
                try:
                    ConnectionPool.check_connection(conn)
                except Exception:
                    if holder:
                        holder[0].check()  # the others are likely dead too: drop them all now
                    raise

            pool = ConnectionPool(
                kwargs=connect_kwargs,
                open=False,
                configure=self._configure_connection,
                check=check,
                **({} if pool_options is True else pool_options),
            )
            holder.append(pool)
            self._connection_pools.setdefault(self.alias, pool)
        return self._connection_pools[self.alias]
