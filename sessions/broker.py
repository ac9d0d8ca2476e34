"""django-q2's ORM broker with a doorbell: the embedded default's task queue.

The stock ORM broker sleeps `poll` seconds whenever the queue is empty, so
a turn waits up to that long before a worker sees it. Here enqueueing rings
the pusher's doorbell and an empty dequeue waits on it: dispatch is
immediate, and the idle poll can be long (it is only the fallback).
"""
from __future__ import annotations

import os

from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from sessions import doorbell


class DoorbellORM(ORM):
    bell: doorbell.Bell | None = None

    def enqueue(self, task):
        pk = super().enqueue(task)
        doorbell.ring("broker")
        return pk

    def dequeue(self):
        # As the stock broker: take each task with a conditional update on its lock.
        tasks = self.get_connection().filter(key=self.list_key, lock__lt=timezone.now())[0:Conf.BULK]
        if tasks:
            claimed = []
            for task in tasks:
                if self.get_connection().filter(id=task.id, lock=task.lock).update(lock=self.timeout(task)):
                    claimed.append((task.pk, task.payload))
            return claimed
        if self.bell is None or self.bell.pid != os.getpid():
            self.bell = doorbell.Bell("broker")
        self.bell.wait(Conf.POLL)
        return None


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
