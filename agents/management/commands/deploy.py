from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.discovery import AgentFolderError, deploy_agent_folder, find_agent_folders


class Command(BaseCommand):
    help = "Validate agent folders and make each the active deployment of its agent."

    def add_arguments(self, parser):
        parser.add_argument("dirs", nargs="+", help="agent folders, or folders of agent folders")

    def handle(self, *args, dirs, **options):
        try:
            for root in find_agent_folders([Path(d) for d in dirs]):
                d = deploy_agent_folder(root)
                self.stdout.write(f"{d.agent.slug}: v{d.version} ({d.content_hash[:12]}) from {root}")
        except AgentFolderError as exc:
            raise CommandError(f"{exc.root}: invalid\n" + "\n".join(f"  {p}" for p in exc.problems)) from None
