"""Which process holds something: `host:pid` ids, whether such a process is gone, and its host's lease.

A turn's claim, a direct call's lock and a run-form reminder's handler all
name the process holding them this way (the host is AGENTSITE_HOST_ID), so
recovery can tell a holder that died from one that is alive. On this host a
pid is checked directly; a holder on another host is gone when that host is
lost: none of its processes renewed its `Host` lease for
AGENTSITE_HOST_LEASE_SECONDS. Every long-running process renews its host's
lease from a thread, every third of that time: each process running a ticker
(qcluster workers, processes holding a reminder's handler) takes it with its
ticker, and a web process by calling `ensure_host_lease` as it starts.
Short-lived commands (`run`, `call`) take none: a host never seen is not lost,
and their turns end with them or by their own lease.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.conf import Conf

from sessions.models.host import Host

log = logging.getLogger(__name__)


def host_id() -> str:
    return settings.AGENTSITE_HOST_ID


def process_id() -> str:
    return f"{host_id()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_gone(holder: str) -> bool:
    """True when the process `holder` names is known gone: on this host, its pid is; elsewhere, its host is lost.

    A holder on a host that never took a lease is not known gone (its turn's own lease still ends it).
    """
    host, _, pid = holder.rpartition(":")
    if not pid.isdigit():
        return False
    if host == host_id():
        return not _pid_alive(int(pid))
    return Host.objects.is_lost(host, timezone.now())


_lease_lock = threading.Lock()
_lease_pid = 0
_lease_kind = Host.Kind.WEB


def renew_host_lease() -> bool:
    """One renewal of this process's host lease; False if it had lapsed (or was new)."""
    return Host.renew(host_id(), _lease_kind, os.getpid(), settings.AGENTSITE_HOST_LEASE_SECONDS, timezone.now())


def ensure_host_lease(kind: str | None = None) -> None:
    """Take this process's host lease (once per process) and keep it renewed from a thread.

    `kind` is the process's role (a qcluster worker says so; any other is web).
    The first renewal is made before returning, so a process restarted on a host
    whose lease lapsed is not taken for lost once it holds something. Tests
    running tasks in their own process (django-q2's sync mode) keep no lease.
    """
    global _lease_pid, _lease_kind
    if Conf.SYNC:
        return
    with _lease_lock:
        if _lease_pid == os.getpid():
            return
        _lease_kind = kind or _lease_kind
        try:
            with transaction.atomic():  # a savepoint: a failure here leaves the caller's transaction usable
                renew_host_lease()
        except Exception:  # the thread takes it; never fail the caller's claim on it
            log.exception("taking the host lease of %s failed", host_id())
        _lease_pid = os.getpid()
        threading.Thread(target=_keep_lease, name="host-lease", daemon=True).start()


def _keep_lease() -> None:
    while True:
        time.sleep(max(0.5, settings.AGENTSITE_HOST_LEASE_SECONDS / 3))
        try:
            if not renew_host_lease():
                log.warning("host %s: its lease had lapsed; what its processes held may have been ended", host_id())
        except Exception:  # a missed renewal only shortens the lease
            log.exception("renewing the host lease of %s failed", host_id())
        finally:
            connection.close()  # back to the pool: a write every few seconds need not hold a connection
