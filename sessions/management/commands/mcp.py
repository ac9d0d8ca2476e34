"""`manage.py mcp oauth SLUG NAME`: authorize an agent's MCP server that wants OAuth, and store its tokens.
`manage.py mcp test SLUG NAME`: start one MCP server of a deployed agent, as a turn would, and list its tools."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.discovery import load_deployment
from agents.discovery.activation import ReleaseError, find_agent
from agents.management.database import migrate_if_needed
from agents.mcpauth import loopback
from agents.mcpauth.flows import FlowError, reusable_registration
from agents.mcpauth.stored import NotDeclared, declared_server, save_authorization, secret_prefix, server_url
from agents.secrets.store import acting_for
from sessions.mcp.check import check_server, report, stop_all


class Command(BaseCommand):
    help = ("MCP servers of an agent: `oauth SLUG NAME` authorizes one declared with \"oauth\": true; "
            "`test SLUG NAME` starts one and lists its tools.")

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="oauth|test")
        test = verbs.add_parser("test", help="start one MCP server of the agent's active release (sandboxed, with "
                                             "the agent's secrets, as a turn would) and list its tools")
        test.add_argument("slug")
        test.add_argument("name", help="the server's name in the agent's mcp.json or Agent(mcp=[...])")
        oauth = verbs.add_parser("oauth", help="run the OAuth authorization of a server and store its tokens "
                                               "as the agent's secrets")
        oauth.add_argument("slug")
        oauth.add_argument("name", help="the server's name in the agent's mcp.json or Agent(mcp=[...])")
        oauth.add_argument("--port", type=int, default=8787,
                           help="the loopback port the browser is sent back to (default 8787)")
        oauth.add_argument("--no-browser", action="store_true", help="print the URL only, open no browser")
        oauth.add_argument("--wait", type=float, default=300.0, help="seconds to wait for the browser (default 300)")

    def handle(self, *args, verb, slug, name, **options):
        migrate_if_needed()  # a fresh state root: an unknown agent, not a missing table
        if verb == "test":
            self.test(slug, name)
        else:
            self.oauth(slug, name, **options)

    def test(self, slug: str, name: str) -> None:
        try:
            agent = find_agent(slug)
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        if agent.active_deployment is None:
            raise CommandError(f"agent {slug!r} has no active release: deploy it first")
        loaded = load_deployment(agent.active_deployment)
        server = next((s for s in loaded.mcp if s.name == name), None)
        if server is None:
            names = ", ".join(s.name for s in loaded.mcp) or "none"
            raise CommandError(f"agent {slug!r} declares no MCP server {name!r} (it declares: {names})")
        try:
            with acting_for(slug):  # its ${VAR}s are the agent's secrets, as in a turn
                tools, error = check_server(server, loaded.root, loaded.allowed_domains)
        finally:
            stop_all()
        if error:
            raise CommandError(f"{slug}: {report(server, tools, error)}")
        self.stdout.write(f"{slug}: {report(server, tools, error)}")

    def oauth(self, slug: str, name: str, *, port: int, no_browser: bool, wait: float, **options) -> None:
        try:
            agent = find_agent(slug)
            declared = declared_server(agent, name)["url"]
            url = server_url(agent, declared)
        except ReleaseError as exc:
            raise CommandError(exc.message) from None
        except NotDeclared as exc:
            raise CommandError(str(exc)) from None
        registration = reusable_registration(agent, name, declared, loopback.redirect_uri(port))
        try:
            done = loopback.authorize(url, declared, port=port, registration=registration, open_browser=not no_browser,
                                      say=lambda line: (self.stdout.write(line), self.stdout.flush()), wait=wait)
        except FlowError as exc:
            raise CommandError(str(exc)) from None
        save_authorization(agent, name, tokens=done.tokens, registration=done.registration, endpoint=done.endpoint)
        expiry = f", the access token expires in {done.tokens.expires_in} s" if done.tokens.expires_in else ""
        refresh = (" and is refreshed before then" if done.tokens.refresh_token
                   else " (no refresh token: run this again when it expires)")
        listed = (f"listing its tools with the new token failed: {done.problem}" if done.problem
                  else f"{len(done.tools)} tool(s): {', '.join(done.tools) or 'none'}")
        self.stdout.write(f"{slug}: MCP server {name!r} authorized{expiry}{refresh}; {listed}")
        self.stdout.write(f"stored as secrets {secret_prefix(name)}_*")
