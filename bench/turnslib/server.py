"""The server's processes: starting and stopping them, and reading their CPU, memory and connections."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from agents.serving import NotServing, free_port, stop_server, wait_until_healthy
from turnslib.config import AGENT, PYTHON, BenchError

LOG_ERROR = re.compile(r"Traceback|Error\b|ERROR|CRITICAL|Failed '|failed|couldn't get a connection")


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process tree, including its already-reaped children
    (django-q recycles workers: their time moves to the parent's children_*)."""
    total = 0.0
    for p in tree(pid):
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    return total


def pg_backend_cpu(dbname: str | None) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving `dbname` (the server's share of a turn's cost;
    a backend that exits between two readings loses its time, so this undercounts a little)."""
    out: dict[int, float] = {}
    if not dbname:
        return out
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if cmd.startswith("postgres: ") and f" {dbname} " in cmd:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
        except (psutil.Error, OSError):
            pass
    return out


def tree_mem(pid: int, uss: bool = True) -> dict[str, float]:
    rss = uss_total = pss_total = 0
    procs = 0
    for p in tree(pid):
        try:
            if uss:
                m = p.memory_full_info()
                uss_total += m.uss
                pss_total += m.pss  # shared pages split among their sharers: sums to the tree's real footprint
            else:
                m = p.memory_info()
            rss += m.rss
            procs += 1
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    out = {"rss_mb": round(rss / 2**20, 1), "procs": procs}
    if uss:
        out["uss_mb"] = round(uss_total / 2**20, 1)
        out["pss_mb"] = round(pss_total / 2**20, 1)
    return out


def role(p: psutil.Process, root: psutil.Process) -> str:
    """What a process of a tree does, read from its command line title: django-q2 titles its own
    (`qcluster <process> monitor|pusher|idle|processing <task>`); the cluster's process and the
    sentinel it forks share one title (`qcluster MainProcess <name>`), told apart by which is the root."""
    words = " ".join(p.cmdline()).split()
    if words[:1] == ["qcluster"] and len(words) >= 3:
        if words[1] == "MainProcess":
            return "cluster" if p.pid == root.pid else "sentinel"
        return words[2] if words[2] in ("monitor", "pusher") else "worker"
    for server in ("daphne", "uvicorn"):
        if server in words or f"({server})" in words:
            return f"web ({server})"
    return p.name()


def tree_mem_by_process(pid: int) -> list[dict[str, Any]]:
    """PSS, USS and RSS (MB) of each process of a tree, with its role."""
    procs = tree(pid)
    out = []
    for p in procs:
        try:
            m = p.memory_full_info()
            out.append({"role": role(p, procs[0]), "pid": p.pid, "pss_mb": round(m.pss / 2**20, 1),
                        "uss_mb": round(m.uss / 2**20, 1), "rss_mb": round(m.rss / 2**20, 1)})
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            pass
    return out


def totals(by_process: list[dict[str, Any]]) -> dict[str, float]:
    """A tree's memory as `tree_mem` gives it, summed from one reading of each of its processes."""
    out: dict[str, float] = {k: round(sum(m[k] for m in by_process), 1) for k in ("rss_mb", "uss_mb", "pss_mb")}
    out["procs"] = len(by_process)
    return out


def busy_seconds() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "irq", "softirq", "steal"))


def wait_quiet(max_wait: float, threshold_pct: float = 15.0, window: float = 3.0) -> float:
    """Wait (at most max_wait s) until the machine's CPU is below threshold_pct for `window` s.
    Others' test runs on the same 2 cores skew latency; returns the busy % last seen."""
    deadline = time.monotonic() + max_wait
    told = False
    while True:
        busy = psutil.cpu_percent(interval=window)
        if busy < threshold_pct or time.monotonic() >= deadline:
            if told:
                print(f"    machine at {busy:.0f}% busy; going on")
            return busy
        if not told:
            print(f"    machine {busy:.0f}% busy with other work; waiting up to {max_wait:.0f} s for it to calm down",
                  flush=True)
            told = True


def child_env(extra: dict[str, str]) -> dict[str, str]:
    drop = {"DJANGO_SETTINGS_MODULE", "AGENTSITE_TEST_DB", "DATABASE_URL", "REDIS_URL", "AGENTSITE_STATE_ROOT",
            "AGENTSITE_INLINE_TURNS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="agentsite.settings")
    env.update(extra)
    return env


def web_command(asgi: str, port: int) -> list[str]:
    """The web process with the options `manage.py serve --server <asgi>` gives it
    (agentsite/management/commands/serve.py, agentsite/webserver.py), binding its own port."""
    if asgi == "uvicorn":
        return [PYTHON, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                "--http", "httptools", "--ws", "websockets", "--no-access-log", "--lifespan", "off", "--no-proxy-headers",
                "agentsite.asgi:application"]
    return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "agentsite.asgi:application"]


class Server:
    """The web process and the worker process tree of one configuration."""

    def __init__(self, src: Path, state_root: Path, env: dict[str, str], asgi: str = "uvicorn",
                 agent_dir: Path | None = None):
        self.asgi = asgi
        self.agent_dir = agent_dir or src / "examples" / AGENT
        self.src = src
        self.state_root = state_root
        self.env = env
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def manage(self, *args: str, timeout: float = 180) -> str:
        done = subprocess.run([PYTHON, str(self.src / "manage.py"), *args], cwd=self.src, env=self.env,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise BenchError(f"manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self, more_agents: tuple[Path, ...] = ()) -> None:
        """Migrate, deploy the agent (and `more_agents`) and start the processes: as serve does, every
        agent is deployed before the workers start, so the qcluster loads their releases before it forks."""
        self.manage("migrate", "--noinput")
        for folder in (self.agent_dir, *more_agents):
            print("  " + self.manage("deploy", str(folder)).strip())
        commands = {
            "web": web_command(self.asgi, self.port),
            # As serve starts it (agentsite/management/commands/serve.py `_workers`): serve ran the checks,
            # which load the URL conf and every view, which a worker has no use for.
            "worker": [PYTHON, str(self.src / "manage.py"), "qcluster", "--skip-checks"],
        }
        for name, cmd in commands.items():
            log = self.state_root / f"{name}.log"
            self.logs[name] = log
            with open(log, "wb") as out:
                # Own process group: Ctrl-C on the terminal does not reach them, stop() does.
                self.procs[name] = subprocess.Popen(cmd, cwd=self.src, env=self.env, stdout=out,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until_healthy(self.base_url, self.procs["web"], timeout=60, output=lambda: self.tail("web"),
                               name="web process")
        except NotServing as exc:
            raise BenchError(str(exc)) from None
        self.check_alive()  # the worker too

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise BenchError(f"{name} process exited with {proc.returncode}\n" + self.tail(name))

    def tail(self, name: str, lines: int = 40) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])
        except (OSError, KeyError):
            return ""

    def log_errors(self) -> dict[str, Any]:
        """Lines of the server's logs that report an error: a clean table with these is a failed run."""
        found: list[str] = []
        for name, path in self.logs.items():
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            found += [f"{name}: {line.strip()}" for line in lines if LOG_ERROR.search(line)]
        return {"lines": len(found), "first": found[:10]}

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def defunct(self) -> list[str]:
        """Zombie processes in the server's trees (a child that exited and was never reaped)."""
        found = []
        for name, proc in self.procs.items():
            for p in tree(proc.pid):
                try:
                    if p.status() == psutil.STATUS_ZOMBIE:
                        found.append(f"{name}:{p.pid}")
                except psutil.NoSuchProcess:
                    pass
        return found

    def cpu(self) -> dict[str, float]:
        return {name: tree_cpu(p.pid) for name, p in self.procs.items()}

    def cpu_by_process(self) -> dict[int, tuple[str, float]]:
        """Each live process of the servers' trees: its role and its own CPU seconds (not its children's)."""
        out: dict[int, tuple[str, float]] = {}
        for proc in self.procs.values():
            procs = tree(proc.pid)
            for p in procs:
                try:
                    t = p.cpu_times()
                    out[p.pid] = (role(p, procs[0]), t.user + t.system)
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    pass
        return out

    def mem(self, uss: bool = True) -> dict[str, dict[str, float]]:
        return {name: tree_mem(p.pid, uss) for name, p in self.procs.items()}

    def mem_by_process(self) -> dict[str, list[dict[str, Any]]]:
        return {name: tree_mem_by_process(p.pid) for name, p in self.procs.items()}


    def db_handles(self, db_path: Path | None) -> dict[str, int]:
        """Open database connections of each tree: TCP connections to PostgreSQL,
        or open descriptors of the SQLite file (Django keeps one per thread)."""
        out: dict[str, int] = {}
        for name, proc in self.procs.items():
            count = 0
            for p in tree(proc.pid):
                try:
                    if db_path is None:
                        count += sum(1 for c in p.net_connections("tcp") if c.raddr and c.raddr.port == 5432)
                    else:
                        count += sum(1 for f in p.open_files() if f.path == str(db_path))
                except (psutil.Error, OSError):
                    pass
            out[name] = count
        return out

    def pin(self, cpus: set[int]) -> None:
        """Put the server's processes on `cpus`; processes they fork later inherit it."""
        for proc in self.procs.values():
            for p in tree(proc.pid):
                try:
                    p.cpu_affinity(sorted(cpus))
                except psutil.Error:
                    pass

    def db_counts(self) -> dict[str, int]:
        """Statements and commits of every server process so far (bench/counting/sitecustomize.py)."""
        total = {"queries": 0, "commits": 0}
        for path in Path(self.env["AGENTSITE_BENCH_COUNT_DIR"]).glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            for k in total:
                total[k] += int(data.get(k, 0))
        return total

    def web_connections(self) -> int | None:
        try:
            return sum(1 for c in psutil.Process(self.pid("web")).net_connections("tcp")
                       if c.status == psutil.CONN_ESTABLISHED)
        except (psutil.Error, OSError):
            return None

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_server(proc, grace=15)
        for proc in self.procs.values():  # leftovers of a group (qcluster's forked workers)
            _killpg(proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

