"""Scheduled backups: each slot of AGENTSITE_BACKUP_SCHEDULE taken once, by whichever worker claims it.

`backup_tick` is a ticker job (agentsite.apps registers it when a schedule is set), so it runs in the
qcluster worker holding the state root's ticker lock; on several hosts, one worker per host.

1. The schedule's latest slot at or before now. A slot this process already saw claimed is passed
   over without a query: nearly every tick ends here.
2. `BackupRun.claim` inserts the slot's row; the slot is unique, so of every process on every host
   that tries, one insert wins. A slot missed while no worker ran (the server was down) is taken
   once when one comes back, as schedules catch up (sessions.timers.schedules); missed slots
   are not replayed one by one.
3. The winner takes the backup in a thread of its own (`take_scheduled`), so the ticker's other
   jobs (timers are due every second) never wait for an archive. While that thread runs, this
   process claims no newer slot: the next one is taken when it ends, never two at once.
4. The archive is `agentsite-scheduled-<slot>.tar.gz` in AGENTSITE_BACKUP_DIR; the row records its
   file, size and duration, or the error. Then the successful runs beyond AGENTSITE_BACKUP_KEEP
   lose their archives and, with the failures older than the oldest kept one, their rows.

A process that ends while its thread writes leaves its row `running` and a `.backup-*` scratch
folder in the directory; the archive itself is moved into place only when whole. The recovery sweep
(`end_abandoned`) ends such a row as failed once the process is known gone, as it ends a lost
worker's turn: the dashboard then shows the failure instead of a backup running forever.
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.utils import timezone

from agentsite.backups.archive import BackupError
from agentsite.backups.cadence import latest_slot
from agentsite.backups.take import take_backup
from sessions.metrics import families as metrics
from sessions.models import BackupRun
from sessions.plumbing.processes import process_gone, process_id

log = logging.getLogger(__name__)

PREFIX = "agentsite-scheduled-"
_seen_slot: datetime | None = None  # the newest slot this process knows is claimed
_running: threading.Thread | None = None


def archive_name(slot: datetime) -> str:
    return f"{PREFIX}{slot:%Y%m%dT%H%MZ}.tar.gz"


def claim_due(now: datetime | None = None) -> BackupRun | None:
    """Claim the schedule's latest slot if no process has; the run this process now owns, or None."""
    global _seen_slot
    expression = settings.AGENTSITE_BACKUP_SCHEDULE
    if not expression:
        return None
    slot = latest_slot(expression, now or timezone.now())
    if _seen_slot is not None and slot <= _seen_slot:
        return None
    run = BackupRun.claim(slot, process_id())
    _seen_slot = slot  # won or lost, the slot is claimed now
    return run


def take_scheduled(run: BackupRun) -> bool:
    """Write the run's archive, record how it went, prune; whether it succeeded."""
    folder = Path(settings.AGENTSITE_BACKUP_DIR)
    out = folder / archive_name(run.slot)
    started = time.monotonic()
    try:
        take_backup(out)
    except Exception as exc:  # any failure is the run's result, shown on the dashboard; the schedule goes on
        if not isinstance(exc, BackupError):
            log.exception("the scheduled backup of %s failed", run.slot)
        run.fail(str(exc) if isinstance(exc, BackupError) else f"{type(exc).__name__}: {exc}",
                 round(time.monotonic() - started, 3))
        metrics.backup_failed()
        return False
    run.succeed(str(out), out.stat().st_size, round(time.monotonic() - started, 3))
    prune(settings.AGENTSITE_BACKUP_KEEP)
    return True


def prune(keep: int) -> int:
    """Delete the archives of successful runs beyond the newest `keep`, then the rows older than the oldest
    kept; how many archives were deleted. Only files this feature named in its own directory go."""
    folder = Path(settings.AGENTSITE_BACKUP_DIR).resolve()
    beyond, rows = BackupRun.beyond_kept(keep)
    deleted = 0
    for run in beyond:
        path = Path(run.file)
        if path.parent.resolve() == folder and path.name.startswith(PREFIX) and path.exists():
            path.unlink(missing_ok=True)  # another host's prune may take it first
            deleted += 1
    rows.delete()
    return deleted


def end_abandoned(now: datetime | None = None) -> int:
    """The recovery sweep's step: end the runs of processes known gone (this host's by pid, a lost host's)."""
    ended = BackupRun.end_abandoned(process_gone)
    if ended:
        log.warning("ended %d scheduled backup run(s) whose process died while writing", ended)
    return ended


def backup_tick(now: datetime | None = None) -> None:
    """The ticker's job: claim a due slot and take its backup in a thread of its own."""
    global _running
    if _running is not None and _running.is_alive():
        return
    run = claim_due(now)
    if run is None:
        return
    _running = threading.Thread(target=_in_thread, args=(run,), name=f"backup-{run.slot:%Y%m%dT%H%M}", daemon=True)
    _running.start()


def _in_thread(run: BackupRun) -> None:
    try:
        take_scheduled(run)
    finally:
        connections.close_all()  # this thread's own connections: it ends here
