from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from agents.management.database import migrate_if_needed
from agents.management.target import add_target_arguments, find_target
from sessions.turn.toolset import declared_tools, offered_tools


class Command(BaseCommand):
    help = ("Print an agent's manifest as JSON, with every tool it is offered and where each comes from: "
            "a deployed agent's active release, or an agent folder with --dir (not deployed).")

    def add_arguments(self, parser):
        add_target_arguments(parser)

    def handle(self, *args, slug, folder, **options):
        migrate_if_needed()
        d = find_target(slug, folder).deployment
        deployment = {"version": d.version, "contentHash": d.content_hash, "source": d.source}
        if d.scratch:
            deployment["scratch"] = True
        info = {"deployment": deployment, **d.manifest, "tools": declared_tools(d.manifest)}
        # What a session may be bound to, as resolved at deploy (the manifest lists them only when several).
        info.update(models=d.models, fallback=d.manifest.get("fallback", []), peers=d.manifest.get("peers", []),
                    offeredTools=offered_tools(d))
        self.stdout.write(json.dumps(info, indent=2))
