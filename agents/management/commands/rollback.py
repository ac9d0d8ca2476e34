from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.discovery.activation import ReleaseError, activate_release, find_agent, rollback_target
from agents.management.database import migrate_if_needed


class Command(BaseCommand):
    help = ("Activate the release that was active before the current one, or the one --to names "
            "(running sessions keep their release).")

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--to", dest="to", default=None, help="the release to activate (v3 or 3)")

    def handle(self, *args, slug, to=None, **options):
        migrate_if_needed()  # a fresh state root: an unknown agent, not a missing table
        try:
            agent = find_agent(slug)
            previous = agent.active_deployment
            d = activate_release(rollback_target(agent, to.removeprefix("v") if to else None))
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        was = f" from v{previous.version}" if previous else ""
        self.stdout.write(f"{slug}: rolled back{was} to v{d.version} ({d.content_hash[:12]})")
