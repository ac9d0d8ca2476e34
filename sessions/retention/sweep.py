"""Retention: deleting the sessions that have been idle for longer than their agent keeps them.

How long: `Agent(retention_days=N)` of the agent's active release, else
`AGENTSITE_RETENTION_DAYS`; an agent's 0 keeps its sessions forever even when
the server has a retention. Neither set (the default): sessions are kept.

Idle since: the later of a session's last event and its `updated_at`
(`SessionQuerySet.idle_before`), so a long conversation someone still answers
is never cut off by its age.

A session with a queued or running turn is skipped, and looked at again the
next time. A session parked on an approval (a person's decision still owed)
is spared, however old, unless the purge is told to include it
(`purge --include-pending`); the configured retention always spares it. Everything else of a session goes with it (`delete_session`): its
events, turns, tool calls, artifacts, session-scoped key-value entries,
reminders and workspace directory. Candidates are read `BATCH` at a time and
each is deleted in a transaction of its own, so a large purge never holds
more than one session's lock.

The ticker (sessions.timers.ticker) runs `retention_tick` in every worker process;
each applies the retention at most once every `INTERVAL_SECONDS`. Two
processes reaching the same session is harmless: the second finds it gone.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from sessions.retention.deletion import delete_session
from sessions.models import Session

log = logging.getLogger(__name__)

BATCH = 100
INTERVAL_SECONDS = 3600

_next_run = 0.0


@dataclass(frozen=True)
class IdleSession:
    session_id: str
    agent: str
    last_active: datetime


@dataclass
class Purge:
    """What one pass did (or, dry, would do): sessions deleted, those skipped for a turn in flight,
    and those spared for a decision pending."""

    deleted: list[IdleSession] = field(default_factory=list)
    skipped: list[IdleSession] = field(default_factory=list)
    spared: list[IdleSession] = field(default_factory=list)

    def extend(self, other: Purge) -> None:
        self.deleted += other.deleted
        self.skipped += other.skipped
        self.spared += other.spared


def purge_idle(cutoff: datetime, *, agent_ids: Iterable[int] | None = None, dry_run: bool = False,
               include_pending: bool = False) -> Purge:
    """Delete the sessions (of `agent_ids`, else of every agent) idle since before `cutoff`; those
    parked on an approval only with `include_pending`."""
    done = Purge()
    after = ""
    while True:
        rows = Session.objects.idle_before(cutoff).filter(pk__gt=after)
        if agent_ids is not None:
            rows = rows.filter(agent_id__in=list(agent_ids))
        batch = list(rows.select_related("agent").order_by("pk")[:BATCH])
        for session in batch:
            found = IdleSession(session.id, session.agent.slug, session.last_active)
            if session.in_flight:
                done.skipped.append(found)
            elif session.pending and not include_pending:
                done.spared.append(found)
            elif dry_run:
                done.deleted.append(found)
            elif delete_session(session, unless_in_flight=True):
                done.deleted.append(found)
            elif Session.objects.filter(pk=session.pk).exists():
                done.skipped.append(found)  # a turn was admitted since the batch was read
        if len(batch) < BATCH:
            return done
        after = batch[-1].pk


def retention_days(agent_retention: int | None) -> int | None:
    """The days an agent keeps its sessions, given its `retention_days`; None: forever."""
    if agent_retention is None:
        return settings.AGENTSITE_RETENTION_DAYS or None
    return agent_retention or None


def apply_retention(now: datetime | None = None) -> Purge:
    """One pass of the configured retention over every agent."""
    now = now or timezone.now()
    done = Purge()
    by_days: dict[int, list[int]] = {}
    # The manifest's one key, not the manifest: with retention off this is all the pass reads.
    for agent_id, declared in Agent.objects.values_list("pk", "active_deployment__manifest__retentionDays"):
        if days := retention_days(declared):
            by_days.setdefault(days, []).append(agent_id)
    for days, agent_ids in sorted(by_days.items()):
        done.extend(purge_idle(now - timedelta(days=days), agent_ids=agent_ids))
    return done


def retention_tick() -> Purge | None:
    """The ticker's retention job: a pass at most once every INTERVAL_SECONDS in this process."""
    global _next_run
    if time.monotonic() < _next_run:
        return None
    _next_run = time.monotonic() + INTERVAL_SECONDS
    done = apply_retention()
    if done.deleted or done.skipped or done.spared:
        log.info("retention deleted %d idle session(s); %d skipped with a turn in flight, %d spared with a "
                 "decision pending", len(done.deleted), len(done.skipped), len(done.spared))
    return done
