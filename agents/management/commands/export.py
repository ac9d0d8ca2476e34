from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.console.saving import export
from agents.discovery.activation import ReleaseError, find_agent
from agents.management.database import migrate_if_needed


class Command(BaseCommand):
    help = ("Write an agent's active release out as a folder (a console agent's too): deployed from there, "
            "it is the same content hash.")

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("dir", help="the folder to write (its agent/ must not exist yet)")

    def handle(self, *args, slug, dir, **options):
        migrate_if_needed()
        try:
            agent = find_agent(slug)
            written = export(agent, Path(dir))
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        except (LookupError, FileExistsError) as exc:
            raise CommandError(str(exc)) from None
        deployment = agent.active_deployment
        self.stdout.write(f"{slug}: v{deployment.version} ({deployment.content_hash[:12]}) written to {written}")
