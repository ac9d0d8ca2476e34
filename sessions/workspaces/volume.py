"""One workspaces directory for every host, or a refusal.

A local runtime's workspace is a directory under AGENTSITE_WORKSPACES_ROOT,
and a session's next turn may run on any worker host while the playground on
any web host lists its files. So with several hosts that directory must be one
volume mounted on each (docs/scale-out.md): nothing else carries a session's
files from host to host, and a turn that found no directory would build a
fresh workspace and carry on as if the files had never been there.

Each host leaves a mark on the volume (`.agentsite-hosts/<host id>`). A
process sees the volume shared when it finds the mark of every other host
holding a lease. Otherwise it refuses: a web process at start, a worker's
turn on a local runtime before it touches a workspace.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone
from django_q.conf import Conf

from sessions.models.host import Host
from sessions.plumbing.processes import host_id
from sessions.timers.ticker import ensure_ticker

log = logging.getLogger(__name__)

MARKS = ".agentsite-hosts"
# A host that took its lease this recently may not have left its mark yet: wait for it this long.
NEW_HOST_GRACE_SECONDS = 5.0
RECHECK_SECONDS = 10.0  # a worker looks at the hosts again at most this often


class VolumeNotShared(Exception):
    """The workspaces directory is not the one the other hosts use."""


def mark_path(root: Path, host: str) -> Path:
    return root / MARKS / host


def leave_mark(root: Path, host: str) -> None:
    """Write this host's mark (whole, then renamed into place), once."""
    path = mark_path(root, host)
    if path.is_file():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{host}.{os.getpid()}.tmp")
    tmp.write_text(host + "\n")
    os.replace(tmp, path)


def unmarked_hosts(root: Path, me: str) -> dict[str, bool]:
    """The other live hosts without a mark on `root`, each with whether it took its lease just now."""
    now = timezone.now()
    recent = now - timedelta(seconds=NEW_HOST_GRACE_SECONDS)
    missing: dict[str, bool] = {}
    for host, started in Host.objects.filter(lease_until__gte=now).exclude(host_id=me).values_list(
            "host_id", "started_at"):
        if not mark_path(root, host).is_file():
            missing[host] = missing.get(host, False) or started >= recent
    return missing


def check(root: Path | None = None) -> None:
    """Leave this host's mark and find every other live host's; VolumeNotShared names those missing."""
    root = Path(root or settings.AGENTSITE_WORKSPACES_ROOT)
    me = host_id()
    leave_mark(root, me)
    deadline = time.monotonic() + NEW_HOST_GRACE_SECONDS
    missing = unmarked_hosts(root, me)
    while any(missing.values()) and time.monotonic() < deadline:
        time.sleep(0.25)  # a host starting beside this one leaves its mark right after its lease
        missing = unmarked_hosts(root, me)
    if missing:
        names = ", ".join(sorted(missing))
        raise VolumeNotShared(
            f"AGENTSITE_WORKSPACES_ROOT ({root}) is not shared with host(s) {names}: their mark "
            f"({MARKS}/<host id>) is not in it. With several hosts, mount one shared volume there on every "
            f"web and worker host (see docs/scale-out.md), or the sessions' files would differ by host.")


_checked_at = 0.0
_lock = threading.Lock()


def check_recently() -> None:
    """`check`, at most every RECHECK_SECONDS while it passes (a worker calls it before each local turn)."""
    global _checked_at
    with _lock:
        if time.monotonic() - _checked_at < RECHECK_SECONDS:
            return
        check()
        _checked_at = time.monotonic()


def refuse_unshared_volume() -> bool:
    """At a web process's start: exit with the message if the volume is not shared.

    False when the database could not be asked (down, not migrated yet, or a
    test importing the module): each local turn checks again.
    """
    try:
        check()
    except VolumeNotShared as exc:
        raise SystemExit(str(exc)) from None
    except Exception as exc:
        log.warning("could not check that AGENTSITE_WORKSPACES_ROOT is shared: %s", exc)
        return False
    return True


def worker_spawned(sender=None, **kwargs) -> None:
    """django-q2's post_spawn: every worker process ticks (sessions.timers.ticker), so a dead one is
    covered by the others.

    The worker leaves its host's mark on the workspaces volume before it takes the lease: a live
    host without its mark there makes the other hosts refuse local turns.
    """
    if Conf.SYNC:
        return  # tests running tasks in their own process: no worker was spawned
    try:
        leave_mark(Path(settings.AGENTSITE_WORKSPACES_ROOT), host_id())
    except OSError as exc:
        log.error("cannot leave this host's mark in AGENTSITE_WORKSPACES_ROOT: %s", exc)
    ensure_ticker(Host.Kind.WORKER)
    try:
        check()
    except VolumeNotShared as exc:
        log.error("%s Local-runtime turns on this host are refused until it is.", exc)
    except Exception:
        log.exception("could not check that AGENTSITE_WORKSPACES_ROOT is shared")
