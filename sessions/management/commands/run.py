from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings

from agents.management.database import migrate_if_needed
from agents.models import Agent
from sessions.principal import Principal
from sessions.turn.admission import AdmissionError, start_session
from sessions.eventlog.events import read_events
from sessions.eventlog.trajectory import build_trajectory

CLI = Principal(authenticator="cli", principal_id="cli", principal_type="user")


class Command(BaseCommand):
    help = "Run one turn of an agent in this process and print its trajectory as JSON."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--message", "-m", required=True)
        parser.add_argument("--mode", choices=["chat", "task"], default="chat")
        parser.add_argument("--dry-run", action="store_true", help="stub write tools")

    def handle(self, *args, slug, message, mode, dry_run, **options):
        migrate_if_needed()
        agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
        if agent is None:
            raise CommandError(f"no agent {slug!r}; deploy it first (`manage.py deploy DIR`)")
        # The turn runs here rather than on a worker: `run` needs no cluster.
        with override_settings(AGENTSITE_INLINE_TURNS=True):
            try:
                admitted = start_session(agent, CLI, message, mode=mode, options={"dryRun": True} if dry_run else {})
            except AdmissionError as exc:
                raise CommandError(exc.message) from None
        trajectory = build_trajectory(read_events(admitted.session.id))
        self.stdout.write(json.dumps(trajectory, indent=2))
