from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from agents.discovery.folder import MAX_RETENTION_DAYS
from agents.management.database import migrate_if_needed
from agents.models import Agent
from sessions.retention.sweep import purge_idle


def days(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_RETENTION_DAYS:
        raise ValueError(value)
    return int(value)


days.__name__ = "whole number of days (1 or more)"  # what argparse names in its error


class Command(BaseCommand):
    help = ("Delete the sessions idle for more than DAYS days (by their last event), with their events, turns, "
            "tool calls, artifacts, reminders, key-value entries and workspaces, whatever the retention settings. "
            "Sessions with a turn queued or running are skipped; those parked on an approval someone has not "
            "decided are spared unless --include-pending is given.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=days, required=True, metavar="DAYS",
                            help="delete sessions whose last activity is more than DAYS days old")
        parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
        parser.add_argument("--agent", metavar="SLUG", help="only this agent's sessions")
        parser.add_argument("--include-pending", action="store_true",
                            help="delete sessions parked on an approval too, with the call awaiting it")

    def handle(self, *args, older_than: int, dry_run: bool, agent: str | None, include_pending: bool, **options):
        migrate_if_needed()  # a fresh state root: no such user or session, not a missing table
        agent_ids = None
        if agent is not None:
            agent_ids = list(Agent.objects.filter(slug=agent).values_list("pk", flat=True))
            if not agent_ids:
                raise CommandError(f"no agent {agent!r}")
        done = purge_idle(timezone.now() - timedelta(days=older_than), agent_ids=agent_ids, dry_run=dry_run,
                          include_pending=include_pending)
        verb = "would delete" if dry_run else "deleted"
        for found in done.deleted:
            self.stdout.write(f"{verb} {found.session_id} ({found.agent}, last active {found.last_active:%Y-%m-%d %H:%M} UTC)")
        for found in done.skipped:
            self.stdout.write(f"skipped {found.session_id} ({found.agent}): a turn is queued or running")
        for found in done.spared:
            self.stdout.write(f"spared {found.session_id} ({found.agent}): a call awaits approval "
                              "(--include-pending deletes it)")
        self.stdout.write(f"{verb} {len(done.deleted)} session(s) idle for more than {older_than} day(s); "
                          f"skipped {len(done.skipped)} with a turn in flight; spared {len(done.spared)} "
                          "with a decision pending")
