"""Handing work to django-q2: the one place that decides between a queued task and a call in this process.

Tasks are named by dotted path, never by function object: queued tasks outlive
a deploy, so a task function keeps its path (or stays importable there).
Under AGENTSITE_INLINE_TURNS (`manage.py run`, benchmarks) the function runs
at once in this process, found by its path as a worker finds it.

With Redis as the broker, a Redis that is restarting refuses connections for
a moment: an enqueue is tried again for up to ENQUEUE_RETRY_SECONDS. Past that,
a turn is left to the recovery sweep, which enqueues again every turn queued
for longer than AGENTSITE_REQUEUE_SECONDS (sessions.turn.recovery): its row has
committed, so the caller's 201 stands and the turn runs once the queue is
back. Any other task raises `QueueUnavailable` (HTTP 503): never returning as
if it were queued.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string
from django_q.conf import Conf
from django_q.tasks import async_task

from agents import taskdoor
from sessions.plumbing.broker import shared_broker
from sessions.plumbing.redisdown import redis_unreachable


log = logging.getLogger(__name__)

# How long an enqueue keeps trying a broker that refuses connections (a Redis restart takes a second or two).
ENQUEUE_RETRY_SECONDS = 3.0
# Tasks the recovery sweep enqueues again when their row sits queued (sessions.turn.lifecycle.RUN_TURN_TASK).
SWEPT_TASKS = frozenset({"sessions.turn.engine.run_turn"})


class QueueUnavailable(Exception):
    """The task queue could not be reached: the caller answers 503 and the client tries again."""

    code = "queue_unavailable"
    status = 503


def inline() -> bool:
    """Whether `enqueue` calls the function here instead of queueing it."""
    return bool(getattr(settings, "AGENTSITE_INLINE_TURNS", False))


def runs_inline() -> bool:
    """Whether an enqueued task runs at once in this process (`manage.py run`, or django-q2's sync mode)."""
    return inline() or bool(Conf.SYNC)


def enqueue(task: str, *args: Any, task_name: str, **options: Any) -> None:
    """Run `task(*args)` on a worker (at the cluster's door when it is the door's task and an idle
    worker of this machine takes it, else django-q2 through the shared broker), or here when inline."""
    if inline():
        import_string(task)(*args)
        return
    if task == settings.AGENTSITE_DOOR_TASK and len(args) == 1 and not Conf.SYNC and taskdoor.knock(args[0]):
        return
    deadline = time.monotonic() + ENQUEUE_RETRY_SECONDS
    pause = 0.05
    while True:
        try:
            async_task(task, *args, task_name=task_name, broker=shared_broker(), **options)
            return
        except redis_unreachable() as exc:
            if time.monotonic() + pause > deadline:
                if task in SWEPT_TASKS:
                    log.error("could not enqueue %s (%s): the task queue is unreachable; the recovery sweep "
                              "enqueues it again once it is back: %s", task, task_name, exc)
                    return
                log.error("could not enqueue %s (%s): the task queue is unreachable: %s", task, task_name, exc)
                raise QueueUnavailable("the task queue is unreachable; try again shortly") from exc
            log.warning("enqueue of %s (%s) failed, trying again: %s", task, task_name, exc)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
