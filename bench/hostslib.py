"""agentsite as if on several hosts, on one machine: for the tests (tests/hosts/) and for benchmarks.

`Topology` starts two web processes (uvicorn, as `serve --server uvicorn` runs
it) and two worker processes (`manage.py qcluster`), each with its own state
root (a folder the others never read) and its own AGENTSITE_HOST_ID (web-a,
web-b, worker-a, worker-b), all on one PostgreSQL database and one Redis, and
Debian's nginx in front of the two web processes with deploy/nginx-hosts.conf
(its ports substituted). Every process is a real child process in a process
group of its own, so a test can SIGKILL a "host" (the qcluster sentinel with
its forked workers); each writes its log to a file (`Topology.logs()`).

The database and Redis are either the machine's (a throwaway database on
127.0.0.1:5432, a free Redis db number) or private ones a test may restart:
`PrivatePostgres` (initdb in a temp folder, its own port) and `PrivateRedis`
(redis-server on its own port). Nothing here needs pytest: bench/ scripts
import it as `hostslib` (with bench/ on sys.path), tests as `bench.hostslib`.
"""
from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SITE = ROOT / "deploy" / "nginx-hosts.conf"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
WEBS = ("web-a", "web-b")
WORKERS = ("worker-a", "worker-b")


class TopologyError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if value := condition():
                return value
        if time.monotonic() > deadline:
            raise TopologyError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# --- the database and Redis -------------------------------------------------------------


@contextlib.contextmanager
def throwaway_database(admin_url: str = PG_ADMIN) -> Iterator[str]:
    """A fresh database on the server `admin_url` names, dropped afterwards; yields its URL."""
    import psycopg

    name = f"agentsite_hosts_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with contextlib.suppress(Exception), psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def redis_database(host: str = "127.0.0.1", port: int = 6379) -> Iterator[str]:
    """An empty Redis db number, claimed with a key (as tests/support.py claims them, upwards from 1)."""
    import redis

    for number in range(1, 16):
        client = redis.Redis(host=host, port=port, db=number)
        if client.dbsize() == 0 and client.set("agentsite-tests:claimed", "1", nx=True, ex=3600):
            break
    else:
        raise TopologyError("no empty Redis database among 1..15")
    try:
        yield f"redis://{host}:{port}/{number}"
    finally:
        client.flushdb()


class PrivateRedis:
    """redis-server on a port of its own, a child process this harness may kill and start again.

    Append-only with fsync on every write, as a Redis that holds a task queue should run:
    a restart keeps what was queued."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        with open(self.folder / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "always"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: port_open(self.port), "redis-server to listen", timeout=20)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class PrivatePostgres:
    """A PostgreSQL cluster of its own (Debian's initdb and pg_ctl) in `folder`, on its own port.

    PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user."""

    def __init__(self):
        # Its own folder straight under /tmp: the postgres user must reach it (a test's tmp_path is root's, 0700).
        self.folder = Path(tempfile.mkdtemp(prefix="agentsite-hosts-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            raise TopologyError("PostgreSQL's server binaries are not installed (/usr/lib/postgresql/*/bin)")
        self.bin = bins[-1].parent

    def _run(self, *args: str, timeout: float = 120) -> None:
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*as_user, *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise TopologyError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--no-sync")

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off "
                   "-c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "postgres.log"),
                  "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(TopologyError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


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
    folders deployed (from web-a) before the processes start; `env` is added to
    every process's environment.
    """

    def __init__(self, folder: Path, *, database_url: str, redis_url: str, agents: list[Path],
                 env: dict[str, str] | None = None, workers_per_host: int = 2):
        self.folder = folder
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
        self.manage("web-a", "migrate", "--noinput")
        self.manage("web-a", "createcachetable")
        for agent in self.agents:
            self.manage("web-a", "deploy", str(agent))
        for proc in self.procs.values():
            proc.start()
        for name in WEBS:
            self.wait_ready(name)
        self.start_nginx()
        return self

    def wait_ready(self, name: str, timeout: float = 90) -> None:
        proc = self.procs[name]

        def ready() -> bool:
            if not proc.alive():
                raise TopologyError(f"{name} exited:\n{proc.tail()}")
            return httpx.get(f"{proc.url}/healthz", timeout=1).status_code == 200

        deadline = time.monotonic() + timeout
        while True:
            try:
                if ready():
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TopologyError(f"{name} did not answer /healthz in {timeout:.0f} s:\n{proc.tail()}")
            time.sleep(0.1)

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
             workers_per_host: int = 2) -> Iterator[tuple[Topology, PrivatePostgres | None, PrivateRedis | None]]:
    """A started topology on the machine's PostgreSQL and Redis, or (`private`) on a PostgreSQL
    cluster and a redis-server of its own that the caller may restart; stopped and dropped afterwards."""
    with contextlib.ExitStack() as stack:
        pg = redis = None
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
            database_url = stack.enter_context(throwaway_database())
            redis_url = stack.enter_context(redis_database())
        topo = Topology(folder, database_url=database_url, redis_url=redis_url, agents=agents, env=env,
                        workers_per_host=workers_per_host)
        stack.callback(topo.stop)
        topo.start()
        yield topo, pg, redis
