"""No process uses a connection it inherited through fork().

django-q2 forks its sentinel from the qcluster process, and workers (also
every replacement of a recycled or dead worker) from the sentinel. A forked
child inherits its parent's open sockets: the database pool with its idle
connections, channel-layer and cache clients. Parent and child, or two
sibling workers, would then interleave their messages on one socket and
corrupt the protocol for both.

After a fork the child closes the file descriptors of the database
connections it can reach (the pools' idle ones and its own thread's) and
forgets every such client; it opens its own on first use. It never calls
their close(): that would send the server a goodbye, or a rollback, on the
parent's socket. The forgotten objects are kept referenced for the life of
the child, so no finaliser ever runs on them (a pool's would wait on locks
that a parent thread may have held at the fork). redis-py re-checks its pid
and replaces inherited connections itself. The parent keeps its
connections: only it uses them.
"""
from __future__ import annotations

import gc
import os
import sys

_installed = False
# What the child inherited and must neither use nor finalise.
_inherited: list[object] = []


def forget_inherited_clients() -> None:
    from asgiref.local import Local
    from django.core.cache import caches
    from django.db import connections

    # Every thread's database wrappers, including the parent's threads that do not exist here.
    sockets = [wrapper.connection for wrapper in connections.all(initialized_only=True) if wrapper.connection]
    _inherited.append(connections._connections)
    connections._connections = Local(connections.thread_critical)
    postgresql = sys.modules.get("django.db.backends.postgresql.base")
    if postgresql is not None:
        pools = postgresql.DatabaseWrapper._connection_pools
        _inherited.append(pools)
        for pool in pools.values():
            sockets.extend(getattr(pool, "_pool", ()))  # its idle connections
        postgresql.DatabaseWrapper._connection_pools = {}
    for conn in sockets:
        _close_descriptor(conn)
    caches._connections = Local(caches.thread_critical)
    layers = sys.modules.get("channels.layers")
    if layers is not None:
        layers.channel_layers.backends = {}


def _close_descriptor(conn: object) -> None:
    """Release the child's copy of a connection's socket, without a word to the server."""
    try:
        fd = conn.pgconn.socket  # psycopg; an SQLite connection is left open but unused
        os.close(fd)
    except Exception:  # not psycopg, or already broken: nothing to release
        pass


def install() -> None:
    """Run once per process (AppConfig.ready); the hook then covers every later fork."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        # Frozen objects are left out of the cyclic collector, so a child's collections
        # never write to the pages it shares with its parent: each of django-q2's forks
        # then keeps sharing the parent's loaded code and objects instead of copying them.
        os.register_at_fork(before=gc.freeze, after_in_child=forget_inherited_clients)
        _installed = True
