"""`manage.py serve`: the web server (uvicorn, or daphne with `--server daphne`) and the turn
workers (qcluster) together; `--production` for a server a team uses.

1. Bind the listening socket (a taken port fails here, before anything
   runs), apply migrations, collect the static files under --production and
   deploy the --agents folders, after the example agents outside production
   (in production only with --examples); say what each start deployed, from
   where, and which agents deployed earlier are served too.
2. Fork N web server processes (`--web-processes`), each accepting on that
   one socket, and the qcluster, from this set-up process: Django, the URLs
   and the deployed agents are loaded once, and the children share those
   pages; under --dev or --reload, a process that watches the served
   folders and deploys each again when it changes (agents.discovery.watching).
   Each leads a session of its own, is tied by agentsite.lifeline so
   it and every process it forks die with serve (even when serve is killed
   with SIGKILL), and runs in the project's folder. The flags that change a
   setting were in the environment before the settings loaded
   (agentsite.serve_environment), so the children's settings are right.
3. Write the URLs, fork, then replace itself (exec, same pid) with
   agentsite.supervise, a small process without Django that waits on the
   children. Paths
   given relative to the caller's folder (arguments, path settings in the
   environment) are made absolute for what the children start. Ctrl-C or
   SIGTERM stops every child (SIGTERM, then SIGKILL after a grace period);
   if one child dies, the others are stopped.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from agentsite.lean_imports import import_rest_framework_lean
from agentsite.lifeline import start_child
from agentsite.production import ALLOW_ALL_REFUSED
from agentsite.serve_environment import environment
from agentsite.supervise import exec_supervisor
from agents.discovery import AgentFolderError, KindConflict, deploy_release, find_agent_folders
from agents.discovery.watching import Watched, watch
from agents.forking import close_database_before_fork
from agents.management.database import migrate_if_needed
from agents.models import Agent
from agents.providers.runtimes import needs_runtime
from channels_app.proxies import trusted_networks
from sessions.metrics.families import clear_dead_processes

log = logging.getLogger("agentsite.serve")

WEB_SERVERS = ("daphne", "uvicorn")
# uvicorn's default backlog (it calls listen() again with it); daphne adopts the socket as it is.
LISTEN_BACKLOG = 2048


class Command(BaseCommand):
    help = "Serve agentsite: HTTP/websocket server and turn workers, on the embedded default unless configured."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--dev", action="store_true", help="development mode: schedules and reminders fire only by hand")
        parser.add_argument("--reload", action="store_true",
                            help="deploy a served agent folder again when it changes (on under --dev)")
        parser.add_argument("--no-reload", action="store_true", help="with --dev: do not watch the agent folders")
        parser.add_argument("--no-schedules", action="store_true", help="do not fire cron schedules (reminders still fire)")
        parser.add_argument("--agents", nargs="+", default=[], metavar="DIR",
                            help="agent folders (or folders of them) to deploy besides the examples")
        parser.add_argument("--examples", action="store_true",
                            help="deploy the example agents in production too (outside production they are "
                                 "deployed unless --no-examples)")
        parser.add_argument("--no-examples", action="store_true",
                            help="do not deploy the example agents (production deploys them only with --examples)")
        parser.add_argument("--state-root", help="where the database, deployments and workspaces live")
        parser.add_argument("--bearer-token", action="append", default=[], metavar="TOKEN",
                            help="require this bearer token (repeatable); replaces the loopback-only default")
        parser.add_argument("--allow-anonymous", action="store_true", help="admit every caller as the anonymous principal")
        parser.add_argument("--workers", type=int, help="turn worker processes (default 2)")
        parser.add_argument("--no-workers", action="store_true", help="serve HTTP only; run `manage.py qcluster` elsewhere")
        parser.add_argument("--server", choices=WEB_SERVERS,
                            help="the ASGI server of the web processes (default uvicorn, on uvloop and httptools; daphne "
                                 "spends more CPU and memory per request: see bench/README.md)")
        parser.add_argument("--web-processes", type=int, default=1, metavar="N",
                            help="web server processes accepting on the one port (more than 1 needs REDIS_URL)")
        parser.add_argument("--production", action="store_true",
                            help="run with AGENTSITE_ENV=production (AGENTSITE_SECRET_KEY and AGENTSITE_PUBLIC_URL "
                                 "required) and collect the static files")

    def execute(self, *args, **options):
        # Before the checks load the URL conf: the web processes and workers forked from this one inherit it.
        import_rest_framework_lean()
        return super().execute(*args, **options)

    def handle(self, *args, **opts):
        if opts["production"] and opts["dev"]:
            raise CommandError("--dev is for a server on one's own machine: not with --production")
        if opts["allow_anonymous"] and (opts["production"] or settings.AGENTSITE_ENV == "production"):
            raise CommandError(f"--allow-anonymous {ALLOW_ALL_REFUSED}")
        if opts["bearer_token"] and opts["allow_anonymous"]:
            raise CommandError("choose --bearer-token or --allow-anonymous, not both")
        if opts["examples"] and opts["no_examples"]:
            raise CommandError("choose --examples or --no-examples, not both")
        if opts["reload"] and opts["no_reload"]:
            raise CommandError("choose --reload or --no-reload, not both")
        _restart_with_settings(opts)
        web_processes = opts["web_processes"]
        if web_processes < 1:
            raise CommandError("--web-processes takes a number of processes, 1 or more")
        if web_processes > 1 and not settings.REDIS_URL:
            raise CommandError(f"--web-processes {web_processes} needs REDIS_URL: without Redis a session's events and "
                               "wake-ups stay inside the web process that has them (the in-memory channel layer), "
                               "so a stream on another web process would miss them; set REDIS_URL or serve with one")
        server = opts["server"] or "uvicorn"
        try:
            trusted_networks()  # the web process would die on a bad entry: say so here, once
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None

        listener = _listen(opts["host"], opts["port"])
        # Twisted adopts a listening descriptor as IPv4 only (its `fd:` endpoint has no family):
        # daphne on an IPv6 address binds the port itself, after this check released it, once.
        shared = server == "uvicorn" or listener.family == socket.AF_INET
        if not shared and web_processes > 1:
            raise CommandError(f"daphne shares a listening socket over IPv4 only: serve {opts['host']} with "
                               "--server uvicorn, or an IPv4 address, for more than one web process")

        # `migrate` only when a migration is pending: on a migrated database the plan is far cheaper than the command.
        if not migrate_if_needed():
            # The database cache tables (the rate counters' without Redis; a no-op when they exist).
            call_command("createcachetable", verbosity=0)
        if opts["production"]:
            # Under STATIC_ROOT in the state root, where WhiteNoise serves them from.
            call_command("collectstatic", interactive=False, verbosity=0)
        watched = self.deploy(opts)
        # A new server's metrics count from zero: the files of a previous run's processes go.
        clear_dead_processes()

        # What the children's own child processes (tool scripts, MCP servers) inherit.
        os.environ.update(PYTHONUNBUFFERED="1", **_absolute_paths(os.environ))
        if not shared:
            listener.close()  # daphne binds the port itself, in the child
        names = ["web"] if web_processes == 1 else [f"web-{n}" for n in range(1, web_processes + 1)]
        close_database_before_fork()  # this process uses the database no more
        host = f"[{opts['host']}]" if ":" in opts["host"] else opts["host"]
        base = f"http://{host}:{opts['port']}"
        banner = [
            f"agentsite serving on {base}  (state: {settings.STATE_ROOT})",
            *([f"  public     {settings.AGENTSITE_PUBLIC_URL}  (production)"] if opts["production"] else []),
            f"  playground {base}/playground/",
            f"  agents     {base}/v1/agents",
            f"  API docs   {base}/api/docs/",
            f"  docs       {base}/docs/",
            f"  admin      {base}/admin/",
            f"  health     {base}/healthz",
            f"  processes  {web_processes} web ({server}), "
            + ("no turn workers (run `manage.py qcluster`)" if opts["no_workers"]
               else f"{opts['workers'] or settings.Q_CLUSTER['workers']} turn workers"),
            *([f"  reload     watching {', '.join(str(d) for d in watched.dirs)}"]
              if settings.AGENTSITE_RELOAD and watched.dirs else []),
            "Press Ctrl-C to stop.",
        ]
        # Said before the children start: once they do, the server may answer before anything else is written.
        self.say("\n".join(banner))
        # Forked from this set-up process: Django, the URLs and the agents' code are loaded once,
        # and the children share those pages instead of each loading its own.
        children: dict[str, int] = {}
        try:
            for name in names:
                children[name] = start_child(f"agentsite {name} ({server})", _web(server, listener, opts),
                                             settings.BASE_DIR)
            if not opts["no_workers"]:
                # The checks ran in this process a moment ago: the cluster need not run them again.
                children["workers"] = start_child("agentsite workers (qcluster)", _workers(listener), settings.BASE_DIR)
            if settings.AGENTSITE_RELOAD and watched.dirs:
                children["reload"] = start_child("agentsite reload (watching agent folders)",
                                                 _reload(listener, watched), settings.BASE_DIR)
        except OSError as exc:  # out of processes or memory
            for pid in children.values():
                os.kill(pid, signal.SIGTERM)
            raise CommandError(f"cannot start the server's processes: {exc.strerror or exc}") from None
        # The listening socket is not inheritable: the supervisor holds none, only the web processes do.
        exec_supervisor(children, dict(os.environ), str(settings.BASE_DIR))

    def say(self, text: str, *, warning: bool = False) -> None:
        """Tell the operator: on stdout, or under AGENTSITE_LOG_FORMAT=json one log line per line of `text`."""
        if settings.LOG_FORMAT != "json":
            self.stdout.write(text)
            return
        for line in text.splitlines():
            log.log(logging.WARNING if warning else logging.INFO, "%s", line.strip())

    def deploy(self, opts) -> Watched:
        """Deploy this start's folders and say, for each agent served, which release from where."""
        dirs = agent_dirs(opts)
        watched = Watched([d.resolve() for d in dirs])
        deployed: set[str] = set()
        try:
            for root in find_agent_folders(dirs):
                watched.remember(root)  # the reload process deploys what changes from here on
                try:
                    done = deploy_release(root)
                except KindConflict as exc:  # edited in the console since: the folder no longer speaks for it
                    watched.slugs[root] = root.name.lower()  # known: a reload deploys it only once it changes
                    self.say(f"{root}: not deployed: {exc.problems[0].message}", warning=True)
                    continue
                except AgentFolderError as exc:
                    example = root.is_relative_to(examples_dir())
                    if not (example and all(needs_runtime(problem.message) for problem in exc.problems)):
                        raise
                    # An example on an optional runtime this host lacks: the quickstart goes on without it.
                    self.say(f"example {root.name}: not deployed: {exc.problems[0].message}")
                    continue
                d = done.deployment
                deployed.add(d.agent.slug)
                watched.slugs[root] = d.agent.slug
                self.say(f"agent {d.agent.slug}: v{d.version} ({d.manifest.get('model')}) from {root}"
                                  + (" (unchanged)" if done.reused else ""))
        except AgentFolderError as exc:
            raise CommandError(f"{exc.root}: invalid agent folder\n" + "\n".join(f"  {p}" for p in exc.problems)) from None
        if not deployed:
            examples = ("" if examples_dir() in dirs else
                        " (the example agents are deployed in production only with --examples)"
                        if settings.AGENTSITE_ENV == "production" else " (--no-examples)")
            self.say(f"no agent folders deployed{examples}; add yours with --agents DIR")
        earlier = Agent.objects.exclude(active_deployment=None).exclude(slug__in=deployed).select_related(
            "active_deployment").order_by("slug")
        for agent in earlier:
            self.say(f"agent {agent.slug}: v{agent.active_deployment.version} deployed earlier "
                              f"from {agent.active_deployment.origin() or '(no source recorded)'}")
        return watched


def _web(server: str, listener: socket.socket, opts) -> Callable[[], object]:
    """What a web process runs: daphne or uvicorn, serving agentsite.asgi."""
    def run():
        # Every web process runs the custom channels' on_start as it starts (agentsite.asgi),
        # as it would on the first request to a channel anyway.
        os.environ["AGENTSITE_MOUNT_CHANNELS"] = "1"
        # Imported here, in the child: daphne's import installs Twisted's reactor for the process.
        if server == "uvicorn":
            from agentsite.webserver import serve_on

            return serve_on(listener.detach())  # uvicorn's socket owns the descriptor from here
        from daphne.cli import CommandLineInterface

        # Twisted adopts a listening descriptor as IPv4 only: on IPv6 daphne binds the port itself.
        bind = (["--fd", str(listener.fileno())] if listener.family == socket.AF_INET
                else ["-b", opts["host"], "-p", str(opts["port"])])
        # Under json channels_app.access_log writes the access lines: daphne's own (on stdout, plain)
        # are off at verbosity 0, which changes nothing else here (its logger follows LOGGING).
        quiet = ["-v", "0"] if settings.LOG_FORMAT == "json" else []
        return CommandLineInterface().run([*quiet, *bind, "agentsite.asgi:application"])
    return run


def _workers(listener: socket.socket) -> Callable[[], object]:
    """What the workers' process runs: the qcluster, without the port (once the web processes stop,
    the port must refuse connections, not take them into a backlog nobody reads)."""
    def run():
        listener.close()
        call_command("qcluster", skip_checks=True)
    return run


def _reload(listener: socket.socket, watched: Watched) -> Callable[[], object]:
    """What the reloading process runs: the watch over the served folders, without the port."""
    def run():
        listener.close()
        watch(watched)
    return run


def examples_dir() -> Path:
    return Path(settings.BASE_DIR) / "examples"


def agent_dirs(opts) -> list[Path]:
    """The folders a start deploys: --agents, after the example agents unless they are off.

    A team's server serves what its operator deployed: in production (`--production`
    or AGENTSITE_ENV=production) the examples come only with --examples.
    """
    dirs = [Path(d) for d in opts["agents"]]
    production = settings.AGENTSITE_ENV == "production"
    if opts.get("examples") or not (opts["no_examples"] or production):
        dirs.insert(0, examples_dir())
    return dirs


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


def _restart_with_settings(opts) -> None:
    """Start this command again (exec, same pid) when the settings it was loaded with are not the asked-for ones.

    Settings are read once, at startup, and the children forked later keep them: every flag that
    changes one must be in the environment before they load (agentsite.serve_environment). manage.py
    puts them there; this covers other ways in (django-admin). In production they refuse to load
    without the settings production needs, and manage.py prints what to set.
    """
    wanted = {key: value for key, value in environment(**opts).items() if os.environ.get(key) != value}
    if wanted:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **wanted})


def _listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here: a taken port fails before anything starts.

    SO_REUSEADDR as Twisted and uvicorn set it, so connections of a killed
    server left in TIME_WAIT do not count as taken.
    """
    try:
        family, type_, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    listener = socket.socket(family, type_, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise CommandError(f"port {port} on {host} is already in use; stop what listens there or pass --port") from None
        raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    return listener
