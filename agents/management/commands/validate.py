from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.discovery import AgentFolderError, load_agent_folder


class Command(BaseCommand):
    help = "Validate agent folders without deploying them; every problem names its file and the fix."

    def add_arguments(self, parser):
        parser.add_argument("dirs", nargs="+", help="agent folders (each holding agent/)")

    def handle(self, *args, dirs, **options):
        failed = False
        for raw in dirs:
            root = Path(raw)
            try:
                loaded = load_agent_folder(root)
            except AgentFolderError as exc:
                failed = True
                self.stderr.write(f"{root}: invalid")
                for problem in exc.problems:
                    self.stderr.write(f"  {problem}")
                continue
            for warning in loaded.warnings:
                self.stdout.write(f"  warning: {warning}")
            tools = ", ".join(sorted(loaded.tools)) or "no tools"
            self.stdout.write(f"{root}: ok ({loaded.slug}, {loaded.model}, {tools})")
        if failed:
            raise CommandError("validation failed")
