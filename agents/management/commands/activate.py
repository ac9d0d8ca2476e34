from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.discovery.activation import ReleaseError, activate_release, find_agent, find_release
from agents.management.database import migrate_if_needed


class Command(BaseCommand):
    help = "Make an existing release the agent's active one (new sessions start on it; running ones keep theirs)."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("version", help="the release's number (as `deployments SLUG` lists it; v3 or 3)")

    def handle(self, *args, slug, version, **options):
        migrate_if_needed()  # a fresh state root: an unknown agent, not a missing table
        try:
            agent = find_agent(slug)
            previous = agent.active_deployment
            d = activate_release(find_release(agent, version.removeprefix("v")))
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        was = f" (was v{previous.version})" if previous else ""
        self.stdout.write(f"{slug}: v{d.version} ({d.content_hash[:12]}) is active{was}")
