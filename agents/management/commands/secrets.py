"""`manage.py secrets`: an agent's secrets from the command line (set, list, unset), and key rotation.

A value is read from standard input only, never from an argument, where
`ps` and the shell's history would show it. Nothing here prints a value.
"""
from __future__ import annotations

import getpass
import json
import sys
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError

from agents.discovery.activation import ReleaseError, find_agent
from agents.management.commands.deploy import deployer
from agents.management.database import migrate_if_needed
from agents.models import Agent, Secret, secret_name_problem, secret_value_problem
from agents.secrets.keys import SecretsKeyError
from agents.secrets.store import SecretUnreadable, rotate_secrets


def describe_secret(s: Secret) -> dict[str, Any]:
    """One secret as `secrets list --json` prints it (camelCase, as the REST API): never its value."""
    return {"name": s.name, "setBy": s.set_by, "setAt": s.set_at.isoformat() if s.set_at else None,
            "expiresAt": s.expires_at.isoformat() if s.expires_at else None}


def read_value(stdin: TextIO) -> str:
    """The value typed at a terminal (not echoed), or all of a piped standard input less one final newline."""
    if stdin.isatty():
        return getpass.getpass("value (not shown): ")
    text = stdin.read()
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


class Command(BaseCommand):
    help = ("An agent's secrets, encrypted at rest: set one (its value from standard input), list them "
            "(never their values), unset one; rotate re-encrypts every secret with the first key.")

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        put = actions.add_parser("set", help="set a secret; its value is read from standard input "
                                             "(typed, not echoed, at a terminal)")
        put.add_argument("slug")
        put.add_argument("name", help="as an environment variable's name (letters, digits, _)")
        listing = actions.add_parser("list", help="the agent's secrets: names, who set them and when, expiry")
        listing.add_argument("slug")
        listing.add_argument("--json", action="store_true", help="print them as JSON")
        unset = actions.add_parser("unset", help="remove a secret (its name then reads the environment again)")
        unset.add_argument("slug")
        unset.add_argument("name")
        actions.add_parser("rotate", help="re-encrypt every secret with the first key of AGENTSITE_SECRETS_KEYS")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        migrate_if_needed()  # a fresh state root: an unknown agent, not a missing table
        try:
            if action == "rotate":
                self.rotate()
                return
            agent = self.agent(options["slug"])
            if action == "set":
                self.put(agent, options["name"])
            elif action == "list":
                self.list_secrets(agent, options["json"])
            else:
                self.unset(agent, options["name"])
        except (SecretsKeyError, SecretUnreadable) as exc:
            raise CommandError(str(exc)) from None

    def agent(self, slug: str) -> Agent:
        try:
            return find_agent(slug)
        except ReleaseError as exc:
            raise CommandError(exc.message) from None

    def put(self, agent: Agent, name: str) -> None:
        if problem := secret_name_problem(name):
            raise CommandError(problem)
        value = read_value(sys.stdin)
        if not value:
            raise CommandError(f"no value for {name} on standard input: pipe it in, e.g. "
                               f"`printf %s \"$VALUE\" | manage.py secrets set {agent.slug} {name}`")
        if problem := secret_value_problem(value):
            raise CommandError(problem)
        created = Secret.put(agent, name, value, by=deployer())
        self.stdout.write(f"{agent.slug}: {name} {'set' if created else 'replaced'}")

    def list_secrets(self, agent: Agent, as_json: bool) -> None:
        rows = list(agent.secrets.order_by("name"))
        if as_json:
            self.stdout.write(json.dumps({"agent": agent.slug, "secrets": [describe_secret(s) for s in rows]},
                                         indent=2))
            return
        for s in rows:
            expires = s.expires_at.strftime("%Y-%m-%d %H:%M:%S") if s.expires_at else "-"
            self.stdout.write(f"{s.name}  by {s.set_by or '-'}  set {s.set_at:%Y-%m-%d %H:%M:%S}  "
                              f"expires {expires}")

    def unset(self, agent: Agent, name: str) -> None:
        if problem := secret_name_problem(name):
            raise CommandError(problem)
        if not Secret.remove(agent, name):
            raise CommandError(f"agent {agent.slug!r} has no secret {name}")
        self.stdout.write(f"{agent.slug}: {name} unset")

    def rotate(self) -> None:
        changed, total = rotate_secrets()
        self.stdout.write(f"re-encrypted {changed} of {total} secret(s) with the first key")
