"""`manage.py serve`: the web server (daphne, or uvicorn with `--server uvicorn`) and the turn
workers (qcluster) together.

1. Check that the port is free, apply migrations and deploy the example
   agents (and any --agents folders).
2. Plan the web server and `manage.py qcluster` as child processes, each in its own
   process group, with the auth and mode switches passed in the environment.
   Both run under agentsite.lifeline, so they and every process they fork die
   with serve, even when serve is killed with SIGKILL.
3. Replace itself (exec, same pid) with agentsite.supervise, a small process
   without Django that starts them, prints the URLs and waits. The supervisor
   and the children run in the project's folder, whatever the caller's: their
   imports are the project's, never a module of the caller's folder. Paths
   given relative to the caller's folder (arguments, path settings in the
   environment) are made absolute before that. Ctrl-C or
   SIGTERM stops both children (SIGTERM, then SIGKILL after a grace period);
   if one child dies, the other is stopped.
"""
from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from agentsite.supervise import exec_supervisor
from agents.discovery import AgentFolderError, deploy_agent_folder, find_agent_folders
from channels_app.proxies import trusted_networks
from sessions.models import hash_token

WEB_SERVERS = {
    "daphne": lambda host, port: ["-m", "daphne", "-b", host, "-p", str(port), "agentsite.asgi:application"],
    # Lifespan off: the app has no lifespan handler (channels' on_start runs from agentsite.asgi).
    # Proxy headers off: uvicorn would take X-Forwarded-For from any 127.0.0.1 peer; the app
    # reads them from AGENTSITE_TRUSTED_PROXIES only (channels_app.proxies), under either server.
    "uvicorn": lambda host, port: ["-m", "uvicorn", "--host", host, "--port", str(port), "--loop", "uvloop",
                                   "--http", "httptools", "--ws", "websockets", "--no-access-log",
                                   "--no-proxy-headers", "--lifespan", "off", "agentsite.asgi:application"],
}


class Command(BaseCommand):
    help = "Serve agentsite: HTTP/websocket server and turn workers, on the embedded default unless configured."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--dev", action="store_true", help="development mode: schedules and reminders fire only by hand")
        parser.add_argument("--no-schedules", action="store_true", help="do not fire cron schedules (reminders still fire)")
        parser.add_argument("--agents", nargs="+", default=[], metavar="DIR",
                            help="agent folders (or folders of them) to deploy besides the examples")
        parser.add_argument("--no-examples", action="store_true", help="do not deploy the example agents")
        parser.add_argument("--state-root", help="where the database, deployments and workspaces live")
        parser.add_argument("--bearer-token", action="append", default=[], metavar="TOKEN",
                            help="require this bearer token (repeatable); replaces the loopback-only default")
        parser.add_argument("--allow-anonymous", action="store_true", help="admit every caller as the anonymous principal")
        parser.add_argument("--workers", type=int, help="turn worker processes (default 2)")
        parser.add_argument("--no-workers", action="store_true", help="serve HTTP only; run `manage.py qcluster` elsewhere")
        parser.add_argument("--server", choices=sorted(WEB_SERVERS), default="daphne",
                            help="the ASGI server of the web process (uvicorn: uvloop and httptools, less CPU "
                                 "per request; see bench/README.md)")

    def handle(self, *args, **opts):
        if opts["state_root"]:
            wanted = Path(opts["state_root"]).resolve()
            if wanted != Path(settings.STATE_ROOT):
                # Settings are already loaded with the old root: start again with the new one.
                env = {**os.environ, "AGENTSITE_STATE_ROOT": str(wanted)}
                os.execve(sys.executable, [sys.executable, *sys.argv], env)
        if opts["bearer_token"] and opts["allow_anonymous"]:
            raise CommandError("choose --bearer-token or --allow-anonymous, not both")
        try:
            trusted_networks()  # the web process would die on a bad entry: say so here, once
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None

        _check_port_free(opts["host"], opts["port"])

        call_command("migrate", interactive=False, verbosity=0)
        # The database cache tables (the rate counters' without Redis; a no-op when they exist).
        call_command("createcachetable", verbosity=0)
        self.deploy(opts)

        env = dict(os.environ, AGENTSITE_STATE_ROOT=str(settings.STATE_ROOT), PYTHONUNBUFFERED="1",
                   # The web process runs the custom channels' on_start as it starts (agentsite.asgi).
                   AGENTSITE_MOUNT_CHANNELS="1")
        if opts["bearer_token"]:
            env["AGENTSITE_AUTH"] = "bearer"
            # Children get only the digests; the tokens never leave this process's arguments.
            env["AGENTSITE_BEARER_TOKEN_HASHES"] = ",".join(hash_token(t) for t in opts["bearer_token"])
        elif opts["allow_anonymous"]:
            env["AGENTSITE_AUTH"] = "allow_all"
        if opts["dev"]:
            env["AGENTSITE_DEV"] = "1"
        if opts["no_schedules"]:
            env["AGENTSITE_SCHEDULES"] = "0"
        if opts["workers"]:
            env["AGENTSITE_WORKERS"] = str(opts["workers"])
        env.update(_absolute_paths(env))

        manage = str(Path(settings.BASE_DIR) / "manage.py")
        # Same pid after the exec below: the supervisor is the parent the children are tied to.
        lifeline = [sys.executable, "-m", "agentsite.lifeline", "--parent", str(os.getpid())]
        commands = {
            "web": [*lifeline, *WEB_SERVERS[opts["server"]](opts["host"], opts["port"])],
        }
        if not opts["no_workers"]:
            commands["workers"] = [*lifeline, manage, "qcluster"]
        host = f"[{opts['host']}]" if ":" in opts["host"] else opts["host"]
        base = f"http://{host}:{opts['port']}"
        banner = [
            f"agentsite serving on {base}  (state: {settings.STATE_ROOT})",
            f"  agents     {base}/v1/agents",
            f"  API docs   {base}/api/docs/",
            f"  admin      {base}/admin/",
            f"  health     {base}/healthz",
            "Press Ctrl-C to stop.",
        ]
        exec_supervisor(commands, env, str(settings.BASE_DIR), banner)

    def deploy(self, opts) -> None:
        dirs = [Path(d) for d in opts["agents"]]
        if not opts["no_examples"]:
            dirs.insert(0, Path(settings.BASE_DIR) / "examples")
        try:
            for root in find_agent_folders(dirs):
                d = deploy_agent_folder(root)
                self.stdout.write(f"agent {d.agent.slug}: v{d.version} ({d.manifest.get('model')}) from {root}")
        except AgentFolderError as exc:
            raise CommandError(f"{exc.root}: invalid agent folder\n" + "\n".join(f"  {p}" for p in exc.problems)) from None


def _absolute_paths(env: dict[str, str]) -> dict[str, str]:
    """The environment's relative paths made absolute as this process resolves them.

    The children run in the project's folder, where a relative path would
    name another file than the one this process migrated and deployed to.
    """
    fixed: dict[str, str] = {}
    if env.get("AGENTSITE_WORKSPACES_ROOT"):
        fixed["AGENTSITE_WORKSPACES_ROOT"] = str(settings.AGENTSITE_WORKSPACES_ROOT)
    database = settings.DATABASES["default"]
    if env.get("DATABASE_URL") and database["ENGINE"] == "django.db.backends.sqlite3":
        # Settings replace a SQLite URL's options, so the path is all the URL carries.
        fixed["DATABASE_URL"] = f"sqlite:///{Path(database['NAME']).resolve()}"
    if env.get("PYTHONPATH"):
        # A --settings module found on the caller's PYTHONPATH, say `PYTHONPATH=.`.
        fixed["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep))
    return fixed


def _check_port_free(host: str, port: int) -> None:
    """Fail before starting anything when another process listens on the port.

    SO_REUSEADDR as Twisted sets it, so connections of a killed server left in
    TIME_WAIT do not count as taken.
    """
    try:
        family, type_, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    with socket.socket(family, type_, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(f"port {port} on {host} is already in use; stop what listens there or pass --port") from None
            raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
