"""The processes of one topology: two web hosts, two worker hosts and nginx."""
from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import httpx
import psutil

from agents.serving import NotServing, wait_until_healthy

from .services import (PYTHON, ROOT, SITE, TopologyError, WEBS, WORKERS, PrivatePostgres, PrivateRedis, _killpg,
                       free_port, port_open, redis_database, throwaway_database, wait_until)

# --- the processes of one topology ------------------------------------------------------


class Proc:
    """One process of the topology (a web server or a qcluster), in a process group of its own."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], state_root: Path, port: int | None = None):
        self.name, self.command, self.env, self.state_root, self.port = name, command, env, state_root, port
        self.log = state_root / f"{name}.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def pids(self) -> set[int]:
        """This process and everything it forked (a qcluster's sentinel and workers)."""
        if not self.alive():
            return set()
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.process.pid)
            return {root.pid, *(p.pid for p in root.children(recursive=True))}
        return set()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """`sig` to the whole group, as a host that loses power takes everything on it."""
        if self.process is None:
            return
        _killpg(self.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        _killpg(self.process.pid, signal.SIGKILL)  # leftovers of the group (qcluster's forked workers)
        self.process.wait(timeout=10)

    def tail(self, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def token_hash(token: str) -> str:
    """What AGENTSITE_BEARER_TOKEN_HASHES holds (sessions.models.hash_token)."""
    return hashlib.sha256(token.encode()).hexdigest()


def rendered_site(listen_port: int, upstream_ports: list[int]) -> str:
    """deploy/nginx-hosts.conf with its placeholders replaced; fails when one is gone from the file."""
    text = SITE.read_text()
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;" for p in upstream_ports)
    for placeholder, value in (
        ("    server 10.0.0.11:8000 max_fails=1 fail_timeout=5s;\n    server 10.0.0.12:8000 max_fails=1 fail_timeout=5s;",
         servers),
        ("listen 80;", f"listen 127.0.0.1:{listen_port};"),
    ):
        if placeholder not in text:
            raise TopologyError(f"deploy/nginx-hosts.conf no longer has {placeholder!r}")
        text = text.replace(placeholder, value)
    return text


def nginx_main_config(folder: Path, site: str) -> str:
    """The nginx.conf around the site: every path nginx writes inside `folder`."""
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""
    temps = "\n".join(f"    {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"{user}worker_processes 1;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'} info;\n"
            f"events {{ worker_connections 1024; }}\n"
            f"http {{\n    access_log {folder / 'access.log'};\n{temps}\n{site}\n}}\n")


class Topology:
    """Two web hosts and two worker hosts on one database and one Redis, behind nginx.

    `database_url` and `redis_url` are the shared services; `agents` the agent
    folders deployed before the processes start, from a `deployer` host of its
    own (an operator's machine); `env` is added to every process's environment.
    The deployer's state root is removed once it has deployed, so no host can
    read a release from it: a release reaches a host through the database only
    (`share_deployer=True` keeps it). The sessions' workspaces are the one
    folder every host shares, as the shared volume of docs/scale-out.md.
    """

    def __init__(self, folder: Path, *, database_url: str, redis_url: str, agents: list[Path],
                 env: dict[str, str] | None = None, workers_per_host: int = 2, share_deployer: bool = False):
        self.folder = folder
        self.share_deployer = share_deployer
        self.database_url, self.redis_url = database_url, redis_url
        self.agents = agents
        self.token = secrets.token_urlsafe(24)
        self.extra = dict(env or {})
        self.workers_per_host = workers_per_host
        self.procs: dict[str, Proc] = {}
        self.nginx: Proc | None = None
        for name in (*WEBS, *WORKERS):
            state = folder / name
            state.mkdir(parents=True, exist_ok=True)
            if name in WEBS:
                port = free_port()
                command = [PYTHON, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                           "--http", "httptools", "--ws", "websockets", "--no-access-log", "--lifespan", "off",
                           "--no-proxy-headers", "agentsite.asgi:application"]
            else:
                port = None
                command = [PYTHON, str(ROOT / "manage.py"), "qcluster"]
            self.procs[name] = Proc(name, command, self.host_env(name), state, port)
        self.nginx_port = free_port()
        self.url = f"http://127.0.0.1:{self.nginx_port}"

    def host_env(self, name: str) -> dict[str, str]:
        drop = {"DJANGO_SETTINGS_MODULE", "AGENTSITE_TEST_DB", "AGENTSITE_INLINE_TURNS", "AGENTSITE_STATE_ROOT",
                "DATABASE_URL", "REDIS_URL"}
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(
            PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="agentsite.settings",
            AGENTSITE_STATE_ROOT=str(self.folder / name), AGENTSITE_HOST_ID=name,
            # The one volume every host mounts for the sessions' workspaces (docs/scale-out.md).
            AGENTSITE_WORKSPACES_ROOT=str(self.folder / "shared-workspaces"),
            DATABASE_URL=self.database_url, REDIS_URL=self.redis_url,
            AGENTSITE_AUTH="bearer", AGENTSITE_BEARER_TOKEN_HASHES=token_hash(self.token),
            AGENTSITE_TRUSTED_PROXIES="127.0.0.1", AGENTSITE_MOUNT_CHANNELS="1",
            AGENTSITE_WORKERS=str(self.workers_per_host), AGENTSITE_LOG_LEVEL="INFO",
        )
        env.update(self.extra)
        return env

    # -- starting and stopping

    def manage(self, host: str, *args: str, timeout: float = 180) -> str:
        done = subprocess.run([PYTHON, str(ROOT / "manage.py"), *args], cwd=ROOT, env=self.host_env(host),
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise TopologyError(f"{host}: manage.py {' '.join(args)} failed ({done.returncode}):\n"
                                f"{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self) -> "Topology":
        # One command, as an operator runs it: it migrates the database first when it needs it.
        if self.agents:
            self.manage("deployer", "deploy", *map(str, self.agents))
        else:
            self.manage("deployer", "migrate", "--noinput")
            self.manage("deployer", "createcachetable")
        if not self.share_deployer:
            shutil.rmtree(self.folder / "deployer")
        for proc in self.procs.values():
            proc.start()
        for name in WEBS:
            self.wait_ready(name)
        self.start_nginx()
        return self

    def wait_ready(self, name: str, timeout: float = 90) -> None:
        proc = self.procs[name]
        try:
            wait_until_healthy(proc.url, proc.process, timeout=timeout, output=proc.tail, name=name)
        except NotServing as exc:
            raise TopologyError(str(exc)) from None

    def start_nginx(self) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        folder = self.folder / "nginx"
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "nginx.conf"
        ports = [self.procs[name].port for name in WEBS]
        conf.write_text(nginx_main_config(folder, rendered_site(self.nginx_port, ports)))
        error_log = str(folder / "error.log")
        checked = subprocess.run([binary, "-t", "-p", str(folder), "-e", error_log, "-c", str(conf)],
                                 capture_output=True, text=True, timeout=30)
        if checked.returncode != 0:
            raise TopologyError(f"nginx -t refused the config:\n{checked.stderr}")
        self.nginx = Proc("nginx", [binary, "-p", str(folder), "-e", error_log, "-c", str(conf), "-g", "daemon off;"],
                          dict(os.environ), folder, self.nginx_port)
        self.nginx.log = folder / "error.log"
        self.nginx.start()
        wait_until(lambda: port_open(self.nginx_port), "nginx to listen", timeout=20)

    def restart(self, name: str) -> None:
        """Start a killed process again, on the same port and state root."""
        proc = self.procs[name]
        if proc.alive():
            proc.kill()
        proc.start()
        if name in WEBS:
            self.wait_ready(name)

    def stop(self, grace: float = 5) -> None:
        """SIGTERM to every process group, SIGKILL to what is left after `grace` seconds."""
        everything = [proc for proc in (*self.procs.values(), self.nginx) if proc is not None and proc.process]
        for proc in everything:
            if proc.alive():
                _killpg(proc.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in everything:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in everything:
            _killpg(proc.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(timeout=10)

    # -- looking at it

    def host_of_pid(self, pid: int) -> str | None:
        """The host (process name) whose process tree holds `pid`."""
        for name, proc in self.procs.items():
            if pid in proc.pids():
                return name
        return None

    def client(self, base_url: str | None = None, **kwargs) -> httpx.Client:
        """A client with the bearer token, to nginx unless `base_url` names a web process."""
        return httpx.Client(base_url=base_url or self.url, timeout=kwargs.pop("timeout", 20),
                            headers={"Authorization": f"Bearer {self.token}"}, **kwargs)

    def logs(self, lines: int = 80) -> str:
        """The tail of every process's log, for a failed test to print."""
        parts = [f"--- {name} ({proc.log}) ---\n{proc.tail(lines)}" for name, proc in self.procs.items()]
        if self.nginx:
            parts.append(f"--- nginx ({self.nginx.log}) ---\n{self.nginx.tail(lines)}")
        return "\n".join(parts)


@contextlib.contextmanager
def topology(folder: Path, *, agents: list[Path], private: bool = False, env: dict[str, str] | None = None,
             workers_per_host: int = 2, share_deployer: bool = False,
             database_url: str | None = None) -> Iterator[tuple[Topology, PrivatePostgres | None, PrivateRedis | None]]:
    """A started topology on the machine's PostgreSQL and Redis, or (`private`) on a PostgreSQL
    cluster and a redis-server of its own that the caller may restart; stopped and dropped afterwards.

    `database_url` (not with `private`): the caller's database on the machine's PostgreSQL instead of
    a throwaway one (the tests pass a copy of an already migrated one)."""
    with contextlib.ExitStack() as stack:
        pg = redis = None
        if private and database_url:
            raise ValueError("a private cluster makes its own database: pass database_url or private, not both")
        if private:
            pg = PrivatePostgres()
            stack.callback(pg.remove)
            pg.init()
            pg.start()
            redis = PrivateRedis(folder / "redis")
            redis.start()
            stack.callback(redis.stop)
            database_url = stack.enter_context(throwaway_database(pg.admin_url))
            redis_url = redis.url
        else:
            database_url = database_url or stack.enter_context(throwaway_database())
            redis_url = stack.enter_context(redis_database())
        topo = Topology(folder, database_url=database_url, redis_url=redis_url, agents=agents, env=env,
                        workers_per_host=workers_per_host, share_deployer=share_deployer)
        stack.callback(topo.stop)
        topo.start()
        yield topo, pg, redis
