"""A scheduled backup's run: one row per slot of AGENTSITE_BACKUP_SCHEDULE.

The row is the slot's claim: `slot` is unique, so of the processes (on any host sharing the
database) that insert it, one wins and takes the backup (agentsite.backups.scheduled). It lives
in this app, not in agentsite, because the dashboard and the metrics read it and they are in
this layer, which cannot import agentsite's.

    running ──succeed()──► succeeded
       └─────fail()──────► failed
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, models, transaction
from django.utils import timezone


class BackupRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    slot = models.DateTimeField(unique=True)  # the schedule's time this run is for (UTC)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    taken_by = models.CharField(max_length=100)  # host:pid of the process that claimed the slot
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    file = models.CharField(max_length=1000, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-slot"]

    def __str__(self) -> str:
        return f"backup of {self.slot:%Y-%m-%d %H:%M} UTC ({self.status})"

    @classmethod
    def claim(cls, slot: datetime, taken_by: str) -> BackupRun | None:
        """The slot's row, inserted by this caller; None if another process inserted it first.

        Its own savepoint: the losing insert leaves a caller's transaction usable.
        """
        try:
            with transaction.atomic():
                return cls.objects.create(slot=slot, taken_by=taken_by)
        except IntegrityError:
            return None

    def succeed(self, file: str, size_bytes: int, duration_seconds: float) -> bool:
        return self._finish(status=self.Status.SUCCEEDED, file=file, size_bytes=size_bytes,
                            duration_seconds=duration_seconds)

    def fail(self, error: str, duration_seconds: float | None) -> bool:
        return self._finish(status=self.Status.FAILED, error=error, duration_seconds=duration_seconds)

    def _finish(self, **fields) -> bool:
        """running → an end; False if the row was no longer running (or is gone)."""
        fields["finished_at"] = timezone.now()
        won = BackupRun.objects.filter(pk=self.pk, status=self.Status.RUNNING).update(**fields) == 1
        if won:
            for name, value in fields.items():
                setattr(self, name, value)
        return won

    @classmethod
    def end_restored(cls) -> int:
        """Runs a restored database holds as running (its archive caught them, this one's among them):
        no process here is taking them, so they end as failed; how many."""
        return cls.objects.filter(status=cls.Status.RUNNING).update(
            status=cls.Status.FAILED, finished_at=timezone.now(),
            error="still running when the backup this database was restored from was taken")

    @classmethod
    def end_abandoned(cls, gone: Callable[[str], bool]) -> int:
        """Runs whose process `gone(taken_by)` says has ended (killed while its thread wrote the archive): no
        one will finish them, so they end as failed, naming the process; how many."""
        ended = 0
        for run in cls.objects.filter(status=cls.Status.RUNNING):
            if gone(run.taken_by):
                ended += run.fail(f"the process taking it ({run.taken_by}) ended before it finished", None)
        return ended

    @classmethod
    def last_success(cls) -> BackupRun | None:
        return cls.objects.filter(status=cls.Status.SUCCEEDED).order_by("-finished_at").first()

    @classmethod
    def beyond_kept(cls, keep: int) -> tuple[list[BackupRun], models.QuerySet]:
        """The successful runs older than the newest `keep` ones (their archives to delete), and every run
        older than the oldest kept success (the rows to delete once their files are gone)."""
        succeeded = cls.objects.filter(status=cls.Status.SUCCEEDED).order_by("-slot")
        oldest_kept = succeeded.values_list("slot", flat=True)[keep - 1: keep].first()
        if oldest_kept is None:
            return [], cls.objects.none()
        return list(succeeded[keep:]), cls.objects.filter(slot__lt=oldest_kept).exclude(status=cls.Status.RUNNING)
