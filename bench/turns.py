#!/usr/bin/env python
"""Turn latency, throughput, CPU and memory of agentsite, end to end over HTTP.

It starts the server as separate processes on a fresh state root (a temp
dir): the web process (`daphne agentsite.asgi:application`) and the worker
(`manage.py qcluster`), deploys examples/support (scripted model, no added
latency) and measures:

  W1  new session + one turn, sequential: from sending the create request to
      receiving `session.waiting` on the NDJSON stream (opened right after
      the create response). p50/p95/p99 and turns/s, plus where the time goes.
  W2  follow-up turns on one session (rotating continuationToken), measured
      from the follow-up POST to its `session.waiting` on a stream kept open:
      p50 of the first and the last 50 turns (should be flat).
  W3  16 concurrent clients doing W1-style turns for 20 s: turns/s, p50/p95.
  W4  W1-style turns whose message makes one tool call
      (`/call lookup_order {"order_id": "A100"}`): p50/p95.

For every workload: the server's CPU ms per turn (user+system of the web
process and of the qcluster process tree, psutil, delta over the workload /
turns; on `pg` also the PostgreSQL backends serving its database, counted
in the total since SQLite does that work inside the server's processes), RSS (and USS) of each tree afterwards, and the idle CPU of each tree
for a moment after the workload. RSS is also sampled every 50 W1 sessions,
to tell whether it grows with the number of sessions.

Configurations: `embedded` (SQLite WAL, in-memory layer, ORM broker) and
`pg` (a throwaway PostgreSQL database + a free Redis db number; dropped /
cleaned at the end).

    .venv/bin/python bench/turns.py --config both
    .venv/bin/python bench/turns.py --config embedded --quick
    .venv/bin/python bench/turns.py --config pg --only W3 --profile /tmp/prof   # py-spy stacks per workload
    .venv/bin/python bench/profile_summary.py /tmp/prof/pg-W3-web.txt

Loopback only. Every loop is bounded in count and time; the server processes
are stopped at the end, on error and on Ctrl-C / SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable
AGENT = "support"
PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
REDIS_HOST = "127.0.0.1:6379"

TOOL_MESSAGE = '/call lookup_order {"order_id": "A100"}'

FULL = {"warmup": 10, "w1": 300, "w2": 300, "w2_window": 50, "w3_clients": 16, "w3_seconds": 20.0, "w4": 100,
        "idle_seconds": 2.0, "rss_every": 50}
QUICK = {"warmup": 3, "w1": 30, "w2": 40, "w2_window": 10, "w3_clients": 16, "w3_seconds": 4.0, "w4": 10,
         "idle_seconds": 1.0, "rss_every": 10}

LOG_ERROR = re.compile(r"Traceback|Error\b|ERROR|CRITICAL|Failed '|failed|couldn't get a connection")
TURN_TIMEOUT = 30.0          # one turn (create → session.waiting), seconds
WORKLOAD_DEADLINE = 600.0    # any one sequential workload, seconds
HTTP_TIMEOUT = httpx.Timeout(connect=5.0, read=TURN_TIMEOUT, write=5.0, pool=TURN_TIMEOUT)


class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------- stats
def pct(values: list[float], p: float) -> float | None:
    """Nearest-rank-interpolated percentile (p in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "mean": statistics.fmean(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def parse_at(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def r1(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# ----------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _busy_seconds() -> float:
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
    """The web process as `manage.py serve --server <asgi>` starts it (agentsite/management/commands/serve.py)."""
    if asgi == "uvicorn":
        return [PYTHON, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                "--http", "httptools", "--ws", "websockets", "--no-access-log", "--lifespan", "off",
                "agentsite.asgi:application"]
    return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "agentsite.asgi:application"]


class Server:
    """The web process and the worker process tree of one configuration."""

    def __init__(self, src: Path, state_root: Path, env: dict[str, str], asgi: str = "daphne",
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

    def start(self) -> None:
        self.manage("migrate", "--noinput")
        print("  " + self.manage("deploy", str(self.agent_dir)).strip())
        commands = {
            "web": web_command(self.asgi, self.port),
            "worker": [PYTHON, str(self.src / "manage.py"), "qcluster"],
        }
        for name, cmd in commands.items():
            log = self.state_root / f"{name}.log"
            self.logs[name] = log
            with open(log, "wb") as out:
                # Own process group: Ctrl-C on the terminal does not reach them, stop() does.
                self.procs[name] = subprocess.Popen(cmd, cwd=self.src, env=self.env, stdout=out,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            self.check_alive()
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise BenchError("web process did not answer /healthz within 60 s\n" + self.tail("web"))
            time.sleep(0.1)

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

    def mem(self, uss: bool = True) -> dict[str, dict[str, float]]:
        return {name: tree_mem(p.pid, uss) for name, p in self.procs.items()}

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
            if proc.poll() is None:
                _killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for proc in self.procs.values():  # leftovers of a group (qcluster's forked workers)
            _killpg(proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------ configurations
@dataclass
class Config:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    pg_db: str | None = None
    redis_db: int | None = None
    db_path: Path | None = None

    def describe(self) -> str:
        if self.pg_db:
            return f"PostgreSQL db {self.pg_db} + Redis db {self.redis_db}"
        return "embedded: SQLite WAL + in-memory layer + ORM broker"


def pg_create() -> str:
    import psycopg

    name = f"agentsite_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def pg_drop(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_pick_db(wanted: int | None) -> int:
    import redis

    candidates = [wanted] if wanted is not None else list(range(15, 0, -1))
    for n in candidates:
        client = redis.Redis(host="127.0.0.1", port=6379, db=n, socket_timeout=5)
        try:
            if client.dbsize() == 0 or wanted is not None:
                return n
        finally:
            client.close()
    raise BenchError("no empty Redis db number (1..15) to use; pass --redis-db")


def redis_cleanup(n: int) -> int:
    """Delete the keys agentsite puts in Redis (channels_redis `asgi*`, django-q `django_q:*`)."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=n, socket_timeout=5)
    removed = 0
    try:
        for pattern in ("asgi*", "django_q:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))[:100_000]
            for i in range(0, len(keys), 500):
                removed += client.delete(*keys[i:i + 500])
    finally:
        client.close()
    return removed


@contextlib.contextmanager
def backend(name: str, env: dict[str, str]) -> Iterator[None]:
    """For `pg`: a throwaway PostgreSQL database and a free Redis db, named in `env`
    (DATABASE_URL, REDIS_URL), dropped and cleaned afterwards. `embedded` needs neither."""
    if name != "pg":
        yield
        return
    pg_db, redis_db = pg_create(), redis_pick_db(None)
    env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{pg_db}"
    env["REDIS_URL"] = f"redis://{REDIS_HOST}/{redis_db}"
    try:
        yield
    finally:
        pg_drop(pg_db)
        redis_cleanup(redis_db)


def turn_times(cfg: Config, turn_ids: list[str]) -> dict[str, tuple[float | None, float | None]]:
    """(created_at, started_at) of turns, epoch seconds, read straight from the database."""
    if not turn_ids:
        return {}
    out: dict[str, tuple[float | None, float | None]] = {}
    if cfg.pg_db:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port=5432 user=postgres dbname={cfg.pg_db}", connect_timeout=5) as conn:
            rows = conn.execute("SELECT id, created_at, started_at FROM agent_sessions_turn WHERE id = ANY(%s)",
                                [turn_ids]).fetchall()
        for tid, created, started in rows:
            out[tid] = (created.timestamp() if created else None, started.timestamp() if started else None)
    elif cfg.db_path:
        conn = sqlite3.connect(f"file:{cfg.db_path}?mode=ro", uri=True, timeout=20)
        try:
            rows = []
            for i in range(0, len(turn_ids), 500):
                chunk = turn_ids[i:i + 500]
                rows += conn.execute(
                    f"SELECT id, created_at, started_at FROM agent_sessions_turn WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk).fetchall()
        finally:
            conn.close()

        def ts(v: str | None) -> float | None:
            return datetime.fromisoformat(v).replace(tzinfo=timezone.utc).timestamp() if v else None

        for tid, created, started in rows:
            out[tid] = (ts(created), ts(started))
    return out


# --------------------------------------------------------------------- turns
@dataclass
class TurnResult:
    ok: bool
    latency_ms: float
    error: str = ""
    session_id: str = ""
    turn_id: str = ""
    token: str = ""
    # client wall clock (epoch s) and server `at` (epoch s)
    sent: float = 0.0
    responded: float = 0.0
    received: float = 0.0
    at_received: float | None = None
    at_waiting: float | None = None
    tool_ok: bool | None = None


def _note(event: dict[str, Any], res: TurnResult) -> bool:
    """Record what matters of one event; True on the turn's session.waiting."""
    kind = event.get("type")
    if res.turn_id and event.get("turnId") not in (None, res.turn_id):
        return False
    if kind == "message.received":
        res.at_received = parse_at(event["at"])
    elif kind == "action.result":
        res.tool_ok = "error" not in event.get("data", {}) and res.tool_ok is not False
    elif kind == "turn.failed":
        res.error = f"turn.failed: {event.get('data', {}).get('error')}"
    elif kind == "session.waiting" and (not res.turn_id or event.get("turnId") == res.turn_id):
        res.at_waiting = parse_at(event["at"])
        return True
    return False


def _finish(res: TurnResult, p0: float, w0: float, want_tool: bool) -> TurnResult:
    res.latency_ms = (time.perf_counter() - p0) * 1000
    res.received = w0 + res.latency_ms / 1000
    res.ok = not res.error and res.at_waiting is not None and (res.tool_ok is True if want_tool else True)
    if not res.ok and not res.error:
        res.error = "tool call failed" if want_tool else "no session.waiting"
    return res


def new_session_turn(client: httpx.Client, message: str, want_tool: bool = False) -> TurnResult:
    """W1/W4: POST /session, then read its stream from 0 until session.waiting."""
    res = TurnResult(ok=False, latency_ms=0.0)
    w0, p0 = time.time(), time.perf_counter()
    res.sent = w0
    try:
        r = client.post(f"/{AGENT}/v1/session", json={"message": message})
        res.responded = w0 + (time.perf_counter() - p0)
        if r.status_code != 201:
            res.error = f"create: HTTP {r.status_code} {r.text[:200]}"
            return _finish(res, p0, w0, want_tool)
        body = r.json()
        res.session_id, res.turn_id, res.token = body["sessionId"], body["turnId"], body["continuationToken"]
        with client.stream("GET", f"/{AGENT}/v1/session/{res.session_id}/stream", params={"startIndex": 0}) as s:
            if s.status_code != 200:
                res.error = f"stream: HTTP {s.status_code}"
                return _finish(res, p0, w0, want_tool)
            for line in s.iter_lines():
                if line and _note(json.loads(line), res):
                    break
                if time.perf_counter() - p0 > TURN_TIMEOUT:
                    res.error = "turn timeout"
                    break
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return _finish(res, p0, w0, want_tool)


async def anew_session_turn(client: httpx.AsyncClient, message: str) -> TurnResult:
    res = TurnResult(ok=False, latency_ms=0.0)
    w0, p0 = time.time(), time.perf_counter()
    res.sent = w0
    try:
        r = await client.post(f"/{AGENT}/v1/session", json={"message": message})
        res.responded = w0 + (time.perf_counter() - p0)
        if r.status_code != 201:
            res.error = f"create: HTTP {r.status_code} {r.text[:200]}"
            return _finish(res, p0, w0, False)
        body = r.json()
        res.session_id, res.turn_id = body["sessionId"], body["turnId"]
        async with client.stream("GET", f"/{AGENT}/v1/session/{res.session_id}/stream", params={"startIndex": 0}) as s:
            if s.status_code != 200:
                res.error = f"stream: HTTP {s.status_code}"
                return _finish(res, p0, w0, False)
            async for line in s.aiter_lines():
                if line and _note(json.loads(line), res):
                    break
                if time.perf_counter() - p0 > TURN_TIMEOUT:
                    res.error = "turn timeout"
                    break
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return _finish(res, p0, w0, False)


def diagnose(client: httpx.Client, session_id: str) -> str:
    """After a failed turn: does the event log have the session.waiting the stream did not deliver?"""
    try:
        r = client.get(f"/{AGENT}/v1/session/{session_id}/events", params={"startIndex": 0}, timeout=10)
        types = [json.loads(line)["type"] for line in r.text.splitlines() if line.strip()]
        return f"[{session_id}: log has {len(types)} events, last {types[-2:]}]"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"[{session_id}: events not readable: {exc}]"


async def adiagnose(client: httpx.AsyncClient, session_id: str) -> str:
    try:
        r = await client.get(f"/{AGENT}/v1/session/{session_id}/events", params={"startIndex": 0}, timeout=10)
        types = [json.loads(line)["type"] for line in r.text.splitlines() if line.strip()]
        return f"[{session_id}: log has {len(types)} events, last {types[-2:]}]"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"[{session_id}: events not readable: {exc}]"


# ----------------------------------------------------------------- workloads
class Bench:
    def __init__(self, cfg: Config, server: Server, counts: dict[str, Any]):
        self.cfg = cfg
        self.server = server
        self.counts = counts
        self.sessions = 0
        self.rss_series: list[dict[str, Any]] = []
        self.results: dict[str, Any] = {}
        self.quiet_wait = 0.0
        self.profile_dir: Path | None = None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, timeout=HTTP_TIMEOUT)

    def sample_rss(self, label: str) -> None:
        mem = self.server.mem(uss=True)
        self.rss_series.append({"label": label, "sessions": self.sessions,
                                **{f"{n}_{k}": v for n, m in mem.items() for k, v in m.items()}})

    def measured(self, name: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run one workload with CPU accounting, then memory and idle CPU afterwards."""
        busy_before = wait_quiet(self.quiet_wait) if self.quiet_wait else None
        self.server.check_alive()
        profilers = self.start_profilers(name)
        sys0 = _busy_seconds()
        q0 = self.server.db_counts()
        db0 = pg_backend_cpu(self.cfg.pg_db)
        cpu0, client0, t0 = self.server.cpu(), time.process_time(), time.perf_counter()
        out = run()
        cpu1, client1, elapsed = self.server.cpu(), time.process_time(), time.perf_counter() - t0
        db1 = pg_backend_cpu(self.cfg.pg_db)
        cpu0["db"], cpu1["db"] = 0.0, sum(v - db0.get(pid, 0.0) for pid, v in db1.items())
        sys1 = _busy_seconds()
        stop_profilers(profilers)
        turns = max(out.get("turns_ok", 0), 1)
        cpu = {n: round((cpu1[n] - cpu0[n]) * 1000 / turns, 2) for n in cpu0}
        cpu["total"] = round(sum(cpu.values()), 2)
        cpu["client"] = round((client1 - client0) * 1000 / turns, 2)
        out["cpu_ms_per_turn"] = cpu
        out["server_cpu_util_pct"] = {n: round((cpu1[n] - cpu0[n]) / elapsed * 100, 1) for n in cpu0}
        out["elapsed_s"] = round(elapsed, 2)
        out["machine_busy_pct_before"] = busy_before
        # CPU the rest of the machine used meanwhile (other people's tests skew results: check this).
        ours = sum(cpu1[n] - cpu0[n] for n in cpu0) + (client1 - client0)
        out["other_cpu_pct_of_machine"] = round(max(0.0, (sys1 - sys0) - ours) / (elapsed * (psutil.cpu_count() or 1)) * 100, 1)
        self.sample_rss(f"after {name}")
        out["mem_after"] = self.server.mem(uss=True)
        out["sessions_so_far"] = self.sessions
        # Idle CPU: what the processes burn with no traffic (broker and stream polling).
        idle_s = self.counts["idle_seconds"]
        i0 = self.server.cpu()
        time.sleep(idle_s)
        i1 = self.server.cpu()
        out["idle_cpu_pct"] = {n: round((i1[n] - i0[n]) / idle_s * 100, 1) for n in i0}
        q1 = self.server.db_counts()  # read after the idle pause: the processes write them twice a second
        out["db_per_turn"] = {k: round((q1[k] - q0[k]) / turns, 1) for k in q0}
        out["web_established_conns"] = self.server.web_connections()
        out["db_connections"] = self.server.db_handles(None if self.cfg.pg_db else self.cfg.db_path)
        out["defunct"] = self.server.defunct()
        if out["defunct"]:
            print(f"    ! defunct processes in the server trees: {out['defunct']}")
        self.server.check_alive()
        self.results[name] = out
        return out

    def start_profilers(self, workload: str) -> list[subprocess.Popen]:
        """py-spy on the web process and the worker tree while a workload runs (--profile)."""
        if not self.profile_dir:
            return []
        procs = []
        for name in ("web", "worker"):
            out = self.profile_dir / f"{self.cfg.name}-{workload}-{name}.txt"
            cmd = [str(Path(PYTHON).with_name("py-spy")), "record", "--pid", str(self.server.pid(name)),
                   "--format", "raw", "--output", str(out), "--rate", "200", "--subprocesses", "--nonblocking", "--gil"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)  # attached before the first request
        return procs

    def sequential(self, n: int, message: str, want_tool: bool, rss_every: int = 0) -> tuple[list[TurnResult], float]:
        results: list[TurnResult] = []
        deadline = time.perf_counter() + WORKLOAD_DEADLINE
        with self.client() as client:
            t0 = time.perf_counter()
            busy = 0.0
            for i in range(n):
                if time.perf_counter() > deadline:
                    print(f"    ! workload deadline reached after {i} turns")
                    break
                s0 = time.perf_counter()
                res = new_session_turn(client, message, want_tool)
                busy += time.perf_counter() - s0
                if not res.ok and res.session_id:
                    res.error += " " + diagnose(client, res.session_id)
                results.append(res)
                self.sessions += 1
                failed = [r for r in results if not r.ok]
                if not res.ok and (len(failed) > max(10, n // 10) or all(not r.ok for r in results[-5:]) and len(results) >= 5):
                    raise BenchError(f"too many failed turns; last: {res.error}\n" + self.server.tail("worker"))
                if rss_every and (i + 1) % rss_every == 0:
                    self.sample_rss(f"W1 {i + 1}")
        return results, busy

    def latency_block(self, results: list[TurnResult], busy: float) -> dict[str, Any]:
        ok = [r for r in results if r.ok]
        lat = [r.latency_ms for r in ok]
        errors = sorted({r.error for r in results if not r.ok})
        failed_sessions = [r.session_id for r in results if not r.ok and r.session_id][:10]
        return {
            "turns": len(results), "turns_ok": len(ok), "errors": errors[:5], "failed_sessions": failed_sessions,
            "latency_ms": {k: r1(v) for k, v in summary(lat).items()},
            "turns_per_s": round(len(ok) / busy, 1) if busy > 0 else None,
        }

    def breakdown(self, results: list[TurnResult]) -> dict[str, Any]:
        """Split W1-style latency with the events' `at` and the turns' claim time."""
        ok = [r for r in results if r.ok and r.at_received is not None and r.at_waiting is not None]
        try:
            claimed = turn_times(self.cfg, [r.turn_id for r in ok])
        except Exception as exc:  # the split is a bonus: never lose the run over it
            print(f"    ! could not read turn claim times: {exc}")
            claimed = {}
        parts: dict[str, list[float]] = {k: [] for k in (
            "create_rtt", "queue_wait", "dispatch", "turn_setup", "turn_run", "delivery", "total")}
        for r in ok:
            parts["create_rtt"].append((r.responded - r.sent) * 1000)
            parts["queue_wait"].append((r.at_received - r.responded) * 1000)
            parts["turn_run"].append((r.at_waiting - r.at_received) * 1000)
            parts["delivery"].append((r.received - r.at_waiting) * 1000)
            parts["total"].append(r.latency_ms)
            created, started = claimed.get(r.turn_id, (None, None))
            if created is not None and started is not None:
                # Server clock only: turn row created (inside the create request) → claimed by a worker.
                parts["dispatch"].append((started - created) * 1000)
                parts["turn_setup"].append((r.at_received - started) * 1000)
        return {k: {"p50": r1(pct(v, 50)), "p95": r1(pct(v, 95)), "mean": r1(statistics.fmean(v)) if v else None}
                for k, v in parts.items()}

    # -- the workloads -------------------------------------------------
    def warmup(self) -> None:
        n = self.counts["warmup"]
        deadline = time.monotonic() + 90  # the worker may take a few seconds to come up
        with self.client() as client:
            done = 0
            while done < n:
                self.server.check_alive()
                tool = AGENT == "support" and done % 2 == 0  # only support has lookup_order
                res = new_session_turn(client, TOOL_MESSAGE if tool else "warm up", want_tool=tool)
                self.sessions += 1
                if res.ok:
                    done += 1
                elif time.monotonic() > deadline:
                    raise BenchError(f"warm-up turns fail: {res.error}\n" + self.server.tail("worker"))

    def w1(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            results, busy = self.sequential(self.counts["w1"], "hello, where is my order?", False,
                                            rss_every=self.counts["rss_every"])
            out = self.latency_block(results, busy)
            out["breakdown_ms"] = self.breakdown(results)
            return out
        return self.measured("W1", run)

    def w4(self) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            results, busy = self.sequential(self.counts["w4"], TOOL_MESSAGE, True)
            out = self.latency_block(results, busy)
            out["breakdown_ms"] = self.breakdown(results)
            return out
        return self.measured("W4", run)

    def w2(self) -> dict[str, Any]:
        n, window = self.counts["w2"], self.counts["w2_window"]

        def run() -> dict[str, Any]:
            lat: list[float] = []
            post_ms: list[float] = []
            errors: list[str] = []
            deadline = time.perf_counter() + WORKLOAD_DEADLINE
            with self.client() as client:
                first = new_session_turn(client, "start of a long conversation")
                self.sessions += 1
                if not first.ok:
                    raise BenchError(f"W2: first turn failed: {first.error}")
                sid, token = first.session_id, first.token
                t0 = time.perf_counter()
                busy = 0.0
                # One stream, kept open for the whole conversation.
                with client.stream("GET", f"/{AGENT}/v1/session/{sid}/stream", params={"startIndex": 0}) as s:
                    lines = s.iter_lines()
                    seen = TurnResult(ok=False, latency_ms=0.0, turn_id=first.turn_id)
                    for line in lines:  # replay up to the first turn's session.waiting
                        if line and _note(json.loads(line), seen):
                            break
                    for i in range(n):
                        if time.perf_counter() > deadline:
                            errors.append(f"workload deadline after {i} turns")
                            break
                        p0 = time.perf_counter()
                        r = client.post(f"/{AGENT}/v1/session/{sid}/message",
                                        json={"message": f"follow-up number {i}", "continuationToken": token})
                        post_ms.append((time.perf_counter() - p0) * 1000)
                        if r.status_code != 202:
                            errors.append(f"message: HTTP {r.status_code} {r.text[:200]}")
                            break
                        body = r.json()
                        token = body["continuationToken"]
                        res = TurnResult(ok=False, latency_ms=0.0, turn_id=body["turnId"])
                        for line in lines:
                            if line and _note(json.loads(line), res):
                                break
                            if time.perf_counter() - p0 > TURN_TIMEOUT:
                                res.error = "turn timeout"
                                break
                        elapsed = (time.perf_counter() - p0) * 1000
                        busy += elapsed / 1000
                        if res.at_waiting is None or res.error:
                            errors.append(res.error or "stream ended")
                            break
                        lat.append(elapsed)
            first_w, last_w = lat[:window], lat[-window:]
            p_first, p_last = pct(first_w, 50), pct(last_w, 50)
            return {
                "turns": n, "turns_ok": len(lat), "errors": errors[:5],
                "latency_ms": {k: r1(v) for k, v in summary(lat).items()},
                "post_rtt_ms": {k: r1(v) for k, v in summary(post_ms).items()},
                "window": window,
                "first_p50_ms": r1(p_first), "last_p50_ms": r1(p_last),
                "last_over_first": round(p_last / p_first, 2) if p_first and p_last else None,
                "turns_per_s": round(len(lat) / busy, 1) if busy else None,
            }
        return self.measured("W2", run)

    def w3(self) -> dict[str, Any]:
        clients, seconds = self.counts["w3_clients"], self.counts["w3_seconds"]

        async def main() -> tuple[list[TurnResult], float]:
            results: list[TurnResult] = []
            limits = httpx.Limits(max_connections=clients * 3, max_keepalive_connections=clients * 2)
            async with httpx.AsyncClient(base_url=self.server.base_url, timeout=HTTP_TIMEOUT, limits=limits) as client:
                t0 = time.perf_counter()
                end = t0 + seconds

                async def user(k: int) -> None:
                    for _ in range(100_000):  # bounded; the clock ends it long before
                        if time.perf_counter() >= end:
                            return
                        res = await anew_session_turn(client, f"client {k} says hello")
                        if not res.ok and res.session_id:
                            res.error += " " + await adiagnose(client, res.session_id)
                        results.append(res)
                        self.sessions += 1
                        if not res.ok:
                            await asyncio.sleep(0.05)

                await asyncio.wait_for(asyncio.gather(*(user(k) for k in range(clients))), seconds + TURN_TIMEOUT + 30)
                return results, time.perf_counter() - t0

        def run() -> dict[str, Any]:
            results, elapsed = asyncio.run(main())
            out = self.latency_block(results, elapsed)
            out["clients"] = clients
            out["seconds"] = seconds
            out["breakdown_ms"] = self.breakdown(results)
            return out
        return self.measured("W3", run)


# ------------------------------------------------------------------ running
def run_config(name: str, counts: dict[str, Any], args: argparse.Namespace, tmp: Path, src: Path,
               reports: list[dict[str, Any]]) -> None:
    """Measure one configuration; its report is in `reports` from the start, so a
    failure or Ctrl-C part-way still leaves what was measured."""
    state_root = tmp / name
    state_root.mkdir(parents=True)
    cfg = Config(name=name)
    extra = {"AGENTSITE_STATE_ROOT": str(state_root)}
    if args.workers:
        extra["AGENTSITE_WORKERS"] = str(args.workers)
    if args.settings:
        extra["DJANGO_SETTINGS_MODULE"] = args.settings
    server: Server | None = None
    report: dict[str, Any] = {"config": name}
    bench: Bench | None = None
    try:
        if name == "pg":
            cfg.pg_db = pg_create()
            cfg.redis_db = redis_pick_db(args.redis_db)
            extra["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{cfg.pg_db}"
            extra["REDIS_URL"] = f"redis://{REDIS_HOST}/{cfg.redis_db}"
        else:
            cfg.db_path = state_root / "db.sqlite3"
        cfg.env = extra
        print(f"\n== {name}: {cfg.describe()}  (state root {state_root})")
        counts_dir = state_root / "counts"
        counts_dir.mkdir()
        extra["AGENTSITE_BENCH_COUNT_DIR"] = str(counts_dir)
        # Its sitecustomize counts statements; a PYTHONPATH of the caller's (a --settings module) stays on the path.
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (str(src / "bench" / "counting"),
                                                          os.environ.get("PYTHONPATH", "")) if p)
        server = Server(src, state_root, child_env(extra), asgi=args.asgi)
        server.start()
        if args.pin:
            server.pin({0})
            os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)) or {0})
        print(f"  web pid {server.pid('web')} on {server.base_url}, worker pid {server.pid('worker')}")
        bench = Bench(cfg, server, counts)
        bench.quiet_wait = args.quiet_wait
        if args.profile:
            bench.profile_dir = Path(args.profile).resolve()
            bench.profile_dir.mkdir(parents=True, exist_ok=True)
        reports.append(report)
        report.update(describe=cfg.describe(), settings=args.settings or "agentsite.settings",
                      workloads=bench.results, rss_series=bench.rss_series)
        bench.sample_rss("started")
        bench.warmup()
        bench.sample_rss("after warm-up")
        # W3 last: it is the one that can leave the server worse off (e.g. out of database connections).
        steps = [("W1", bench.w1), ("W2", bench.w2), ("W4", bench.w4), ("W3", bench.w3)]
        for label, step in steps:
            if args.only and label not in args.only:
                continue
            print(f"  {label} ...", flush=True)
            try:
                out = step()
            except BenchError as exc:  # keep what was measured; the server may be unusable now
                print(f"    ! {label} aborted: {exc}")
                report["aborted"] = f"{label}: {str(exc)[:2000]}"
                break
            lat = out["latency_ms"]
            print(f"    {out['turns_ok']}/{out['turns']} ok, p50 {lat['p50']} ms, p95 {lat['p95']} ms, "
                  f"cpu/turn {out['cpu_ms_per_turn']['total']} ms, other load {out['other_cpu_pct_of_machine']}%, "
                  f"db connections {out['db_connections']}"
                  + (f", errors {out['errors']}" if out["errors"] else ""))
    except KeyboardInterrupt:
        report.setdefault("aborted", "interrupted")
        raise
    finally:
        if bench is not None:
            report["rss_growth"] = rss_growth(bench.rss_series)
        if server is not None:
            server.stop()
            report["log_errors"] = server.log_errors()
            if report["log_errors"]["lines"]:
                print(f"  ! {report['log_errors']['lines']} error line(s) in the server logs, first: "
                      f"{report['log_errors']['first'][:3]}")
            if args.keep_state:
                print(f"  logs kept in {state_root}")
        if cfg.pg_db:
            try:
                pg_drop(cfg.pg_db)
            except Exception as exc:  # report, keep cleaning up
                print(f"  ! could not drop database {cfg.pg_db}: {exc}", file=sys.stderr)
        if cfg.redis_db is not None:
            try:
                redis_cleanup(cfg.redis_db)
            except Exception as exc:
                print(f"  ! could not clean Redis db {cfg.redis_db}: {exc}", file=sys.stderr)


def stop_profilers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


GROWTH_MIN_SESSIONS = 1000


def rss_growth(series: list[dict[str, Any]]) -> dict[str, Any]:
    """MB per 1,000 sessions between the first post-warm-up sample and the last one."""
    base = next((s for s in series if s["label"] == "after warm-up"), None)
    last = series[-1] if series else None
    if not base or not last or last["sessions"] <= base["sessions"]:
        return {}
    sessions = last["sessions"] - base["sessions"]
    out: dict[str, Any] = {"sessions": sessions}
    for proc in ("web", "worker"):
        for kind in ("rss_mb", "uss_mb"):
            key = f"{proc}_{kind}"
            if key in base and key in last:
                delta = last[key] - base[key]
                out[f"{key}_delta"] = round(delta, 1)
                out[f"{key}_per_1k_sessions"] = round(delta / sessions * 1000, 2)
    # Sequential sessions only (the W1 samples), and their second half: concurrency (W3)
    # raises the high-water mark once, and caches (SQLite's page cache, the allocator's
    # arenas) fill over the first few hundred sessions; a leak shows as a steady slope after.
    w1 = [s for s in series if s["label"].startswith("W1 ")]
    w1 = w1[len(w1) // 2:]
    for proc in ("web", "worker"):
        key = f"{proc}_uss_mb"
        if len(w1) >= 2 and all(key in s for s in w1):
            xs, ys = [s["sessions"] for s in w1], [s[key] for s in w1]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            den = sum((x - mx) ** 2 for x in xs)
            if den:
                out[f"w1_{proc}_uss_mb_per_1k_sessions"] = round(
                    sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 1000, 2)
    # The web process (where sessions' streams live) "grows" above 1 MB per 1,000 sessions;
    # under GROWTH_MIN_SESSIONS sequential sessions the slope is too short to judge.
    span = (w1[-1]["sessions"] - w1[0]["sessions"]) if len(w1) >= 2 else 0
    w = out.get("w1_web_uss_mb_per_1k_sessions")
    out["web_growth"] = ("too short to tell (--w1 3000)" if span < GROWTH_MIN_SESSIONS or w is None
                         else "GROWS" if w > 1.0 else "flat")
    return out


def fmt(v: Any, width: int = 8) -> str:
    if v is None:
        return "-".rjust(width)
    if isinstance(v, float):
        return f"{v:.1f}".rjust(width)
    return str(v).rjust(width)


def print_table(reports: list[dict[str, Any]]) -> None:
    print("\n" + "=" * 154)
    head = (f"{'config':9}{'load':5}{'ok/n':>10}{'p50':>8}{'p95':>8}{'p99':>8}{'turns/s':>9}"
            f"{'cpu web':>9}{'cpu wrk':>9}{'cpu db':>8}{'cpu tot':>9}{'client':>8}{'pss web':>9}{'pss wrk':>9}{'idle%w/k':>11}"
            f"{'db w/k':>8}{'q/turn':>8}{'c/turn':>8}{'other%':>8}")
    print(head)
    print(f"{'':14}{'':>10}{'ms':>8}{'ms':>8}{'ms':>8}{'':>9}{'ms/turn':>9}{'ms/turn':>9}{'ms/turn':>8}{'ms/turn':>9}{'ms/turn':>8}"
          f"{'MB':>9}{'MB':>9}{'':>11}{'conns':>8}{'':>8}{'':>8}{'load':>8}")
    print("-" * 154)
    for rep in reports:
        for label, w in sorted(rep.get("workloads", {}).items()):
            lat, cpu, mem, idle = w["latency_ms"], w["cpu_ms_per_turn"], w["mem_after"], w["idle_cpu_pct"]
            print(f"{rep['config']:9}{label:5}{(str(w['turns_ok']) + '/' + str(w['turns'])):>10}"
                  f"{fmt(lat['p50'])}{fmt(lat['p95'])}{fmt(lat['p99'])}{fmt(w.get('turns_per_s'), 9)}"
                  f"{fmt(cpu['web'], 9)}{fmt(cpu['worker'], 9)}{fmt(cpu.get('db') or None)}{fmt(cpu['total'], 9)}{fmt(cpu['client'])}"
                  f"{fmt(mem['web'].get('pss_mb'), 9)}{fmt(mem['worker'].get('pss_mb'), 9)}"
                  f"{(str(idle['web']) + '/' + str(idle['worker'])):>11}"
                  f"{(str(w['db_connections']['web']) + '/' + str(w['db_connections']['worker'])):>8}"
                  f"{fmt(w.get('db_per_turn', {}).get('queries'))}{fmt(w.get('db_per_turn', {}).get('commits'))}"
                  f"{fmt(w['other_cpu_pct_of_machine'])}")
        if rep.get("aborted"):
            print(f"{rep['config']:9}ABORTED {rep['aborted'].splitlines()[0][:110]}")
        if "log_errors" in rep:
            print(f"{rep['config']:9}server log: {rep['log_errors']['lines']} error line(s)")
    print("-" * 154)
    for rep in reports:
        ws = rep.get("workloads", {})
        if "W2" in ws:
            w2 = ws["W2"]
            print(f"{rep['config']:9}W2 first-{w2['window']} p50 {w2['first_p50_ms']} ms, last-{w2['window']} p50 "
                  f"{w2['last_p50_ms']} ms (x{w2['last_over_first']}); follow-up POST p50 {w2['post_rtt_ms']['p50']} ms")
        for label in ("W1", "W4", "W3"):
            if label in ws and "breakdown_ms" in ws[label]:
                b = ws[label]["breakdown_ms"]
                parts = "  ".join(f"{k} {b[k]['p50']}" for k in
                                  ("create_rtt", "queue_wait", "dispatch", "turn_setup", "turn_run", "delivery", "total"))
                means = "  ".join(f"{k} {b[k]['mean']}" for k in ("create_rtt", "queue_wait", "turn_run", "delivery"))
                print(f"{rep['config']:9}{label} where the time goes, p50 ms: {parts}")
                print(f"{'':9}{label}   means (these add up): {means}")
        g = rep.get("rss_growth") or {}
        if g:
            print(f"{rep['config']:9}RSS over {g['sessions']} sessions: web {g.get('web_rss_mb_delta')} MB "
                  f"(USS {g.get('web_uss_mb_delta')} MB, {g.get('web_uss_mb_per_1k_sessions')} MB/1k), worker "
                  f"{g.get('worker_rss_mb_delta')} MB (USS {g.get('worker_uss_mb_delta')} MB); during sequential W1: "
                  f"web USS {g.get('w1_web_uss_mb_per_1k_sessions')} MB/1k, worker USS "
                  f"{g.get('w1_worker_uss_mb_per_1k_sessions')} MB/1k -> "
                  f"{g.get('web_growth')}")
    print("-" * 154)
    # The targets of the issue on turn cost (measured there with --pin; p50 over three runs).
    w1_goal = {"embedded": 15.0, "pg": 12.0}
    for rep in reports:
        workloads = rep.get("workloads", {})
        checks: list[tuple[str, bool]] = []
        if (w1 := workloads.get("W1")) and rep["config"] in w1_goal:
            p50, goal = w1["latency_ms"]["p50"], w1_goal[rep["config"]]
            checks.append((f"W1 p50 <= {goal} ms: {p50} ms", p50 is not None and p50 <= goal))
        if (w3 := workloads.get("W3")) and w3.get("turns_per_s") is not None:
            checks.append((f"W3 >= 100 turns/s: {w3['turns_per_s']}", w3["turns_per_s"] >= 100))
        for label in ("W1", "W3"):
            if (w := workloads.get(label)) and w["cpu_ms_per_turn"].get("total") is not None:
                cpu = w["cpu_ms_per_turn"]["total"]
                checks.append((f"{label} server CPU <= 10 ms/turn: {cpu} ms", cpu <= 10))
        if (w2 := workloads.get("W2")) and w2.get("last_over_first") is not None:
            checks.append((f"W2 flat (last/first p50 <= 1.2): x{w2['last_over_first']}", w2["last_over_first"] <= 1.2))
        if (w4 := workloads.get("W4")) and w1 and w1["latency_ms"]["p50"] and w4["latency_ms"]["p50"]:
            ratio = round(w4["latency_ms"]["p50"] / w1["latency_ms"]["p50"], 2)
            checks.append((f"W4 p50 within 1.3x of W1: x{ratio}", ratio <= 1.3))
        for text, ok in checks:
            print(f"target {rep['config']:9} {text} -> {'meets' if ok else 'MISSES'}")
    print("=" * 154)


def main() -> int:
    global AGENT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["embedded", "pg", "both"], default="both")
    parser.add_argument("--agent", default=AGENT, help="the example agent driven (examples/<name>; default support;"
                        " W4 calls support's lookup_order tool)")
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--out", help="JSON output path (default bench/results/turns-<timestamp>.json)")
    parser.add_argument("--only", nargs="+", choices=["W1", "W2", "W3", "W4"], help="run only these workloads")
    parser.add_argument("--workers", type=int, help="django-q worker processes (AGENTSITE_WORKERS; default: settings)")
    parser.add_argument("--redis-db", type=int, help="Redis db number for the pg config (default: a free one)")
    parser.add_argument("--settings", help="DJANGO_SETTINGS_MODULE for the server processes (default agentsite.settings),"
                        " e.g. to measure a settings change without editing the app")
    parser.add_argument("--source", choices=["head", "worktree", "live"], default="head",
                        help="code the server runs: a snapshot of the committed HEAD (default), a copy of the work tree,"
                        " or the live work tree")
    parser.add_argument("--quiet-wait", type=float, default=120.0, metavar="S",
                        help="before each workload wait up to S seconds for the machine to be idle (0: don't)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temp state root (logs, SQLite db)")
    parser.add_argument("--profile", metavar="DIR", help="record py-spy profiles (raw collapsed stacks) of the web"
                        " process and the worker tree during each workload into DIR")
    parser.add_argument("--asgi", choices=["daphne", "uvicorn"], default="daphne", help="the web server (uvicorn needs uvicorn, uvloop and httptools installed)")
    parser.add_argument("--pin", action="store_true", help="server processes on CPU 0, this client on the others"
                        " (PostgreSQL and Redis stay unpinned)")
    parser.add_argument("--w1", type=int, metavar="N", help="W1's number of sequential sessions (default 300)")
    args = parser.parse_args()
    AGENT = args.agent

    counts = dict(QUICK if args.quick else FULL)
    if args.w1:
        counts["w1"] = args.w1
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_path = Path(args.out) if args.out else ROOT / "bench" / "results" / f"turns-{stamp}.json"

    def on_term(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_term)
    configs = ["embedded", "pg"] if args.config == "both" else [args.config]
    tmp = Path(tempfile.mkdtemp(prefix="agentsite-bench-"))
    reports: list[dict[str, Any]] = []
    status = 0
    try:
        src = snapshot_source(args.source, tmp)
        print(f"server code: {args.source} ({_git_rev()}{', dirty work tree' if _git_dirty() else ''}) from {src}")
        for name in configs:
            try:
                run_config(name, counts, args, tmp, src, reports)
            except BenchError as exc:  # this configuration could not be measured; try the next
                print(f"\n{name} failed: {exc}", file=sys.stderr)
                status = 1
    except KeyboardInterrupt:
        print("\ninterrupted; processes stopped", file=sys.stderr)
        status = 130
    except BenchError as exc:
        print(f"\nbench failed: {exc}", file=sys.stderr)
        status = 1
    finally:
        if not args.keep_state:
            shutil.rmtree(tmp, ignore_errors=True)
    if any(r.get("aborted") for r in reports) and status == 0:
        status = 1
    if reports:
        print_table(reports)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "bench": "turns", "at": datetime.now(timezone.utc).isoformat(), "quick": args.quick,
            "counts": counts, "cpus": psutil.cpu_count(), "python": sys.version.split()[0],
            "git": _git_rev(), "source": args.source, "work_tree_dirty": _git_dirty(), "reports": reports,
        }
        out_path.write_text(json.dumps(doc, indent=2))
        print(f"wrote {out_path}")
    return status


SNAPSHOT_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".agentsite", ".pytest_cache",
                                         "test-artifacts", "results", "node_modules")


def snapshot_source(mode: str, tmp: Path) -> Path:
    """The code the server runs. Others edit the work tree while a run goes on:
    `head` (default) runs the committed HEAD, `worktree` a copy of the work
    tree as it is now, `live` the work tree itself."""
    if mode == "live":
        return ROOT
    dest = tmp / "src"
    if mode == "worktree":
        shutil.copytree(ROOT, dest, ignore=SNAPSHOT_IGNORE)
        return dest
    dest.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, timeout=60)
    if archive.returncode != 0:
        raise BenchError(f"git archive HEAD failed: {archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    return dest


def _git_rev() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _git_dirty() -> bool:
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout
        return bool(out.strip())
    except (OSError, subprocess.TimeoutExpired):
        return False


if __name__ == "__main__":
    sys.exit(main())
