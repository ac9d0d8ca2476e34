"""django-q2's ORM broker with a doorbell: the embedded default's task queue.

The stock ORM broker sleeps `poll` seconds whenever the queue is empty, so
a turn waits up to that long before a worker sees it. Here enqueueing rings
the pusher's doorbell and an empty dequeue waits on it: dispatch is
immediate, and the idle poll can be long (it is only the fallback).

Its statements are written out (the same rows and conditions as the stock
broker's): on this stack the ORM's query building, and `QuerySet.delete()`'s
collector above all, cost several times what the database spends.
"""
from __future__ import annotations

import contextlib
import functools
import os

from django import db
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from sessions import doorbell


class DoorbellORM(ORM):
    bell: doorbell.Bell | None = None

    def enqueue(self, task):
        with _cursor() as (cursor, conn, sql):
            params = [self.list_key or Conf.CLUSTER_NAME, task, _lock(timezone.now(), conn)]
            if conn.features.can_return_columns_from_insert:
                cursor.execute(f"{sql.insert} RETURNING {sql.id}", params)
                pk = cursor.fetchone()[0]
            else:
                cursor.execute(sql.insert, params)
                pk = conn.ops.last_insert_id(cursor, OrmQ._meta.db_table, "id")
        doorbell.ring("broker")
        return pk

    def dequeue(self):
        # As the stock broker: take each ready task with a conditional update of its
        # lock, which another cluster's claim has moved into the future.
        with _cursor() as (cursor, conn, sql):
            now = _lock(timezone.now(), conn)
            cursor.execute(sql.ready, [self.list_key, now, Conf.BULK])
            tasks = cursor.fetchall()
            claimed = []
            for pk, payload in tasks:
                cursor.execute(sql.claim, [_lock(self.timeout(None), conn), pk, now])
                if cursor.rowcount:
                    claimed.append((pk, payload))
        if tasks:
            return claimed
        if self.bell is None or self.bell.pid != os.getpid():
            self.bell = doorbell.Bell("broker")
        self.bell.wait(Conf.POLL)
        return None

    def delete(self, task_id):
        with _cursor() as (cursor, _, sql):
            cursor.execute(sql.delete, [task_id])


class _Statements:
    def __init__(self, quote):
        table, self.id = quote(OrmQ._meta.db_table), quote("id")
        key, payload, lock = quote("key"), quote("payload"), quote("lock")
        self.insert = f"INSERT INTO {table} ({key}, {payload}, {lock}) VALUES (%s, %s, %s)"
        self.ready = f"SELECT {self.id}, {payload} FROM {table} WHERE {key} = %s AND {lock} < %s LIMIT %s"
        self.claim = f"UPDATE {table} SET {lock} = %s WHERE {self.id} = %s AND {lock} < %s"
        self.delete = f"DELETE FROM {table} WHERE {self.id} = %s"


@functools.lru_cache(maxsize=4)
def _statements(vendor: str) -> _Statements:
    return _Statements(connections[Conf.ORM].ops.quote_name)


@contextlib.contextmanager
def _cursor():
    # As the stock broker's get_connection(): outside a transaction, drop a stale connection first.
    if transaction.get_autocommit(using=Conf.ORM):
        db.close_old_connections()
    conn = connections[Conf.ORM]
    with conn.cursor() as cursor:
        yield cursor, conn, _statements(conn.vendor)


_LOCK = OrmQ._meta.get_field("lock")


def _lock(when, conn):
    return _LOCK.get_db_prep_value(when, conn)


_by_pid: dict[int, Broker] = {}


def shared_broker() -> Broker:
    """This process's broker. django-q2 builds a new one per task unless given one,
    and with Redis that is a new connection (and its handshake) per enqueued turn.
    Keyed by pid: a forked child builds its own rather than use its parent's."""
    pid = os.getpid()
    broker = _by_pid.get(pid)
    if broker is None:
        broker = _by_pid.setdefault(pid, get_broker())
    return broker
