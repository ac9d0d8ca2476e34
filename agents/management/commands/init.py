from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.scaffold import TEMPLATES, ScaffoldError, scaffold


class Command(BaseCommand):
    help = ("Write a new agent project to start from, with one passing eval (never over an existing "
            "non-empty folder).")

    def add_arguments(self, parser):
        parser.add_argument("path", help="the project's folder; its name is the agent's slug")
        parser.add_argument("--template", default="chat", choices=TEMPLATES,
                            help="chat (default), tools (one typed tool), notes (a tool keeping notes), "
                                 "webhook (a custom channel)")

    def handle(self, *args, path, template, **options):
        try:
            written = scaffold(Path(path), template)
        except ScaffoldError as exc:
            raise CommandError(str(exc)) from None
        root = written[0].parents[1]
        for file in written:
            self.stdout.write(f"  {file.relative_to(root)}")
        self.stdout.write(f"{root}: a {template} agent. Next: manage.py validate {root}, manage.py eval {root} "
                          f"(its evals/), then manage.py serve --agents {root} and open "
                          f"/playground/{root.name.lower()}")
