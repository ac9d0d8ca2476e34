from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from agents.models import Agent


class Command(BaseCommand):
    help = "Print an agent's active deployment manifest as JSON."

    def add_arguments(self, parser):
        parser.add_argument("slug")

    def handle(self, *args, slug, **options):
        migrate_if_needed()
        agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
        if agent is None or agent.active_deployment is None:
            raise CommandError(f"no deployed agent {slug!r}; deploy it with `manage.py deploy DIR` or `serve --agents DIR`")
        d = agent.active_deployment
        info = {"deployment": {"version": d.version, "contentHash": d.content_hash, "source": d.source}, **d.manifest}
        # What a session may be bound to, as resolved at deploy (the manifest lists them only when several).
        info.update(models=d.models, fallback=d.manifest.get("fallback", []), peers=d.manifest.get("peers", []))
        self.stdout.write(json.dumps(info, indent=2))
