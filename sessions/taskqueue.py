"""Handing work to django-q2: the one place that decides between a queued task and a call in this process.

Tasks are named by dotted path, never by function object: queued tasks outlive
a deploy, so a task function keeps its path (or stays importable there).
Under AGENTSITE_INLINE_TURNS (`manage.py run`, benchmarks) the function runs
at once in this process, found by its path as a worker finds it.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string
from django_q.conf import Conf
from django_q.tasks import async_task

from sessions.broker import shared_broker


def inline() -> bool:
    """Whether `enqueue` calls the function here instead of queueing it."""
    return bool(getattr(settings, "AGENTSITE_INLINE_TURNS", False))


def runs_inline() -> bool:
    """Whether an enqueued task runs at once in this process (`manage.py run`, or django-q2's sync mode)."""
    return inline() or bool(Conf.SYNC)


def enqueue(task: str, *args: Any, task_name: str, **options: Any) -> None:
    """Run `task(*args)` on a worker (django-q2 through the shared broker), or here when inline."""
    if inline():
        import_string(task)(*args)
        return
    async_task(task, *args, task_name=task_name, broker=shared_broker(), **options)
