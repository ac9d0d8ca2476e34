from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agents.discovery.activation import ReleaseError, find_agent
from agents.management.database import migrate_if_needed
from agents.models import Deployment


def describe_release(d: Deployment, active_id: int | None) -> dict[str, Any]:
    """One release as `deployments --json` prints it (camelCase, as the REST API)."""
    return {
        "version": d.version, "active": d.pk == active_id, "contentHash": d.content_hash, "status": d.status,
        "source": d.source, "sourceKind": d.source_kind, "sourceRef": d.source_ref, "sourceCommit": d.source_commit,
        "sourcePath": d.source_path, "deployedBy": d.deployed_by, "allowedDomains": d.allowed_domains,
        "createdAt": d.created_at.isoformat() if d.created_at else None,
        "activatedAt": d.activated_at.isoformat() if d.activated_at else None,
    }


def stamp(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


class Command(BaseCommand):
    help = "List an agent's releases, newest first; `*` marks the active one."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--json", action="store_true", help="print the releases as JSON")

    def handle(self, *args, slug, json: bool = False, **options):
        migrate_if_needed()  # a fresh state root: an unknown agent, not a missing table
        try:
            agent = find_agent(slug)
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        releases = list(agent.deployments.releases().order_by("-version"))
        if json:
            self.stdout.write(_dumps({"agent": agent.slug, "deployments": [
                describe_release(d, agent.active_deployment_id) for d in releases]}))
            return
        for d in releases:
            mark = "*" if d.pk == agent.active_deployment_id else " "
            self.stdout.write(f"{mark} v{d.version}  {d.content_hash[:12]}  {d.origin()}  "
                              f"by {d.deployed_by or '-'}  created {stamp(d.created_at)}  "
                              f"activated {stamp(d.activated_at)}")


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2)
