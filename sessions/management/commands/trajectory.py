from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from sessions.eventlog.events import read_events
from sessions.models import Session
from sessions.eventlog.trajectory import build_trajectory


class Command(BaseCommand):
    help = "Print a stored session's trajectory (replies, tool calls, usage) as JSON."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--session", help="a session id (ses_...)")
        source.add_argument("--events", help="an NDJSON file of events (from /events or /stream)")

    def handle(self, *args, session, events, **options):
        if session:
            migrate_if_needed()  # a file of events needs no database
            if not Session.objects.filter(pk=session).exists():
                raise CommandError(f"no session {session!r}")
            rows = read_events(session)
        else:
            path = Path(events)
            if not path.is_file():
                raise CommandError(f"no file {events}")
            try:
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            except json.JSONDecodeError as exc:
                raise CommandError(f"{events}: line is not JSON: {exc}") from None
        self.stdout.write(json.dumps(build_trajectory(rows), indent=2))
