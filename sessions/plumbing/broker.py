"""django-q2's ORM broker with a doorbell: the embedded default's task queue.

The stock ORM broker sleeps `poll` seconds whenever the queue is empty, so
a turn waits up to that long before a worker sees it. Here enqueueing rings
the pusher's doorbell and an empty dequeue waits on it: dispatch is
immediate, and the idle poll can be long (it is only the fallback).

Its statements are written out (sessions.sql.queue: the same rows and
conditions as the stock broker's). It replaces the stock broker's `enqueue`,
`dequeue` and `delete` (django-q2==1.11.1 is pinned); tests/test_upstream_copies.py
fails when django-q2 changes those, `get_connection` (whose stale-connection
rule `_connection` repeats) or `acknowledge` and `fail` (which must still go
through `delete`).
"""
from __future__ import annotations

import os

from django import db
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from sessions.eventlog import doorbell
from sessions.sql import queue


class DoorbellORM(ORM):
    bell: doorbell.Bell | None = None

    def enqueue(self, task):
        pk = queue.enqueue(_connection(), self.list_key or Conf.CLUSTER_NAME, task, timezone.now())
        doorbell.ring("broker")
        return pk

    def dequeue(self):
        # As the stock broker: take each ready task with a conditional update of its
        # lock, which another cluster's claim has moved into the future.
        conn, now = _connection(), timezone.now()
        tasks = queue.ready(conn, self.list_key, now, Conf.BULK)
        if tasks:
            return [(pk, payload) for pk, payload in tasks if queue.claim(conn, pk, self.timeout(None), now)]
        if self.bell is None or self.bell.pid != os.getpid():
            self.bell = doorbell.Bell("broker")
        self.bell.wait(Conf.POLL)
        return None

    def delete(self, task_id):
        queue.delete(_connection(), task_id)


def _connection() -> BaseDatabaseWrapper:
    # As the stock broker's get_connection(): outside a transaction, drop a stale connection first.
    if transaction.get_autocommit(using=Conf.ORM):
        db.close_old_connections()
    return connections[Conf.ORM]


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
