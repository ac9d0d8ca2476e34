"""The hosts running web and worker processes, each holding a lease its processes renew.

Processes name what they hold `host:pid` (sessions.plumbing.processes). A process can
tell whether a holder on its own host is alive, not one on another host: for
that, every long-running process renews its host's lease, and a host whose
every lease lapsed is lost, so the turns, calls and handlers its processes held
are theirs no more.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, models, transaction
from django.db.models import Max


class HostQuerySet(models.QuerySet):
    def lapsed(self, now: datetime) -> models.QuerySet:
        """The hosts none of whose leases is held, one row (`host_id`) each; a host never seen is not
        lost: it is unknown."""
        return self.values("host_id").annotate(until=Max("lease_until")).filter(until__lt=now)

    def lost(self, now: datetime) -> set[str]:
        """Ids of the lapsed hosts."""
        return set(self.lapsed(now).values_list("host_id", flat=True))

    def is_lost(self, host_id: str, now: datetime) -> bool:
        until = self.filter(host_id=host_id).aggregate(until=Max("lease_until"))["until"]
        return until is not None and until < now


class Host(models.Model):
    class Kind(models.TextChoices):
        WEB = "web"
        WORKER = "worker"

    host_id = models.CharField(max_length=80, help_text="AGENTSITE_HOST_ID of its processes.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    processes = models.JSONField(default=dict, help_text="pid → when that process last renewed the lease.")
    started_at = models.DateTimeField(help_text="When the lease was taken (again, after it lapsed).")
    last_seen = models.DateTimeField()
    lease_until = models.DateTimeField()

    objects = HostQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host_id", "kind"], name="host_kind_unique")]

    def __str__(self) -> str:
        return f"{self.host_id} ({self.kind})"

    @classmethod
    def renew(cls, host_id: str, kind: str, pid: int, seconds: float, now: datetime) -> bool:
        """Extend the lease of `host_id`'s `kind` processes on behalf of process `pid`.

        1. Read the row (made on the first renewal: racing creators, one wins).
        2. Write it back conditional on the `last_seen` read, so two processes of
           the host renewing at once do not drop each other's pid; the loser reads
           again. A lease that had lapsed starts over: `started_at` and the
           process list are new.
        Returns False when the lease was new or had lapsed (the host was lost
        meanwhile, and what its processes held may have been ended).
        """
        until = now + timedelta(seconds=seconds)
        for _ in range(5):
            row = cls.objects.filter(host_id=host_id, kind=kind).first()
            if row is None:
                try:
                    with transaction.atomic():
                        cls.objects.create(host_id=host_id, kind=kind, processes={str(pid): now.isoformat()},
                                           started_at=now, last_seen=now, lease_until=until)
                    return False
                except IntegrityError:
                    continue
            held = row.lease_until >= now
            recent = now - timedelta(seconds=seconds)
            processes = {p: seen for p, seen in row.processes.items()
                         if held and datetime.fromisoformat(seen) >= recent}
            processes[str(pid)] = now.isoformat()
            changes = {"processes": processes, "last_seen": now, "lease_until": max(until, row.lease_until)}
            if not held:
                changes["started_at"] = now
            if cls.objects.filter(pk=row.pk, last_seen=row.last_seen).update(**changes):
                return held
        # Lost every race to its own host's processes: the others just renewed the lease.
        cls.objects.filter(host_id=host_id, kind=kind, lease_until__lt=until).update(lease_until=until, last_seen=now)
        return True
