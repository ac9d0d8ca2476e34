from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agents.discovery import AgentFolderError, Deployed, KindConflict, Source, deploy_release, find_agent_folders
from agents.discovery.repository import RepositoryError, check_repository_url, checkout
from agents.redaction import without_credentials
from agents.integrations.outbound import DomainError, check_allowed_domains
from agents.management.database import migrate_if_needed
from agents.management.target import folder_error


def deployer() -> str:
    """Who deploys: the operating-system user running the command."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no login name in some containers
        return "cli"


def describe(deployed: Deployed) -> dict[str, Any]:
    d = deployed.deployment
    return {"agent": d.agent.slug, "version": d.version, "contentHash": d.content_hash, "source": d.source,
            "sourceKind": d.source_kind, "ref": d.source_ref, "commit": d.source_commit, "path": d.source_path,
            "deployedBy": d.deployed_by, "allowedDomains": list(d.allowed_domains),
            "active": d.agent.active_deployment_id == d.pk, "reused": deployed.reused}


class Command(BaseCommand):
    help = ("Validate agent folders, from this disk or a repository, and make each the active release of its "
            "agent (content identical to an earlier release activates that release again).")

    def add_arguments(self, parser):
        parser.add_argument("dirs", nargs="*", help="agent folders, or folders of agent folders")
        parser.add_argument("--repo", help="an https:// or file:// git URL to deploy from instead of a folder")
        parser.add_argument("--ref", default="", help="with --repo: a branch, tag or full commit id "
                            "(default: the default branch)")
        parser.add_argument("--path", default="", help="with --repo: the agent folder (or folder of them) "
                            "inside the repository (default: its root)")
        parser.add_argument("--allow-domain", action="append", default=[], dest="domains", metavar="DOMAIN",
                            help="the only domains the agent's outbound calls may reach (repeatable; "
                                 "api.example.com or *.example.com)")
        parser.add_argument("--json", action="store_true", help="print the release as JSON (a list for several)")
        parser.add_argument("--replace", action="store_true",
                            help="deploy over an agent made in the console (its releases stay in its history)")
        parser.add_argument("--keep-console-agents", action="store_true",
                            help="leave an agent made in the console since its folder was deployed as it is, and "
                                 "say so (the systemd prepare unit: an operator's edit outlives a restart)")
        parser.add_argument("--allow-empty", action="store_true",
                            help="with no folders and no --repo, deploy nothing rather than refuse (the systemd "
                                 "prepare unit, when AGENTSITE_AGENT_DIRS names none)")

    def handle(self, *args, dirs, repo, ref, path, domains, json: bool, allow_empty: bool = False,
               replace: bool = False, keep_console_agents: bool = False, **options):
        self.replace, self.keep_console = replace, keep_console_agents
        if allow_empty and not dirs and not repo:
            self.stdout.write(_json([]) if json else "no agent folders given: nothing deployed")
            return
        if bool(dirs) == bool(repo):
            raise CommandError("pass agent folders or --repo URL (one of the two)")
        if not repo and (ref or path):
            raise CommandError("--ref and --path go with --repo")
        try:
            domains = check_allowed_domains(domains)
            if repo:
                check_repository_url(repo)
        except DomainError as exc:
            raise CommandError(f"--allow-domain {exc}") from None
        except RepositoryError as exc:
            raise CommandError(str(exc)) from None
        migrate_if_needed()
        try:
            if repo:
                deployed = self.from_repository(repo, ref, path, domains)
            else:
                deployed = [done for root in find_agent_folders([Path(d) for d in dirs])
                            if (done := self.deploy(root, Source(str(root)), domains)) is not None]
        except RepositoryError as exc:
            raise CommandError(str(exc)) from None
        except AgentFolderError as exc:
            raise CommandError(folder_error(exc)) from None
        if json:
            found = [describe(d) for d in deployed]
            self.stdout.write(_json(found[0] if len(found) == 1 else found))
            return
        for d in deployed:
            row = d.deployment
            where = row.source + (f"@{row.source_commit[:12]}" if row.source_commit else "") + (
                f" ({row.source_path})" if row.source_path else "")
            again = ", already released: activated" if d.reused else ""
            self.stdout.write(f"{row.agent.slug}: v{row.version} ({row.content_hash[:12]}{again}) from {where}")

    def deploy(self, root: Path, source: Source, domains: list[str]) -> Deployed | None:
        try:
            return deploy_release(root, source=source, deployed_by=deployer(), allowed_domains=domains,
                                  replace=getattr(self, "replace", False))
        except KindConflict as exc:
            if not getattr(self, "keep_console", False):
                raise
            self.stderr.write(f"{root}: not deployed: {exc.problems[0].message}")
            return None

    def from_repository(self, url: str, ref: str, path: str, domains: list[str]) -> list[Deployed]:
        """Clone, find the agent folders at --path, deploy each; the checkout goes when done."""
        shown = without_credentials(url)
        with checkout(url, ref) as (checked_out, commit):
            folder = checked_out.resolve()
            top = (folder / path).resolve() if path else folder
            if not top.is_relative_to(folder):
                raise CommandError(f"--path {path}: outside the repository")
            if not top.is_dir():
                raise CommandError(f"--path {path}: no such folder in {shown} at {commit[:12]}")
            roots = find_agent_folders([top])
            if not roots:
                raise CommandError(f"{shown} at {commit[:12]}: no agent folder (one holding agent/) at "
                                   f"{path or 'its root'}; pass --path")
            deployed = [self.deploy(root, Source(shown, "repo", ref, commit, str(root.relative_to(folder))
                                                 if root != folder else ""), domains) for root in roots]
            return [done for done in deployed if done is not None]  # None: left to the console (--keep-console-agents)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2)
