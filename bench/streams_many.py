#!/usr/bin/env python
"""Many open streams in one web process: idle CPU, memory per stream, fan-out and fan-in delivery.

It starts the server the way bench/stream.py does (web process and worker on
a fresh state root; `pg` on a throwaway PostgreSQL database and a free Redis
db number), makes --sessions sessions (one over HTTP with a real turn, the
rest copied from it by a writer in the server's environment, each ending with
`session.waiting`), and opens one stream on each, plus --fanout - 1 more on
the first one: NDJSON, SSE and websockets in turn, from this one asyncio
process. Then:

  idle      the web process's CPU (utime+stime from /proc/<pid>/stat) over
            --idle-seconds with every stream open and nothing written, as % of
            one core; PSS (/proc/<pid>/smaps_rollup) before opening and after,
            per stream.
  fan-out   --paced events appended one at a time (--interval-ms apart, each
            its own commit: bench/stream_writer.py) to the first session,
            which --fanout streams follow: from the writer's commit to each
            follower's receipt. p50/p95/p99/max over every (event, follower).
  fan-in    one event appended to each session, as fast as the writer can,
            each in its own commit: from its commit to its follower's receipt.

    .venv/bin/python bench/streams_many.py --config both
    .venv/bin/python bench/streams_many.py --config pg --src /tmp/older-checkout   # another tree's server

Loopback only; every wait is bounded, the server is stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
GOALS = {"idle_cpu_pct": 2.0, "fanout_p99_ms": 20.0, "fanin_p99_ms": 100.0}


# ---------------------------------------------------------------- the writer (runs in the server's environment)
def writer_main(argv: list[str]) -> int:
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from sessions.eventlog.events import append_events
    from sessions.models import EventType, Session

    mode = argv[0]
    if mode == "clone":  # clone BASE N: N sessions like BASE (same owner), each idle after one turn's end
        base = Session.objects.get(pk=argv[1])
        for _ in range(int(argv[2])):
            s = Session.objects.create(agent_id=base.agent_id, deployment_id=base.deployment_id, mode=base.mode,
                                       status=Session.Status.WAITING, principal_id=base.principal_id,
                                       principal_type=base.principal_type, authenticator=base.authenticator)
            events = append_events(s.id, [(EventType.MESSAGE_RECEIVED, {"text": "hello"}),
                                          (EventType.SESSION_WAITING, {})])
            print(s.id, events[-1].index + 1)
        return 0
    if mode == "each":  # each FILE: one event to each session listed, each its own commit
        for session_id in Path(argv[1]).read_text().split():
            events = append_events(session_id, [(EventType.MESSAGE_APPENDED, {"delta": "fan-in"})])
            print(f"{session_id} {events[0].index} {time.time():.6f}", flush=True)
        time.sleep(0.5)
        return 0
    raise SystemExit(f"unknown writer mode {mode}")


# ---------------------------------------------------------------- the web process, seen from /proc
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


# ---------------------------------------------------------------- the followers
class Followers:
    def __init__(self, base_url: str, agent: str):
        self.base_url, self.agent = base_url, agent
        self.arrived: dict[tuple[int, str, int], float] = {}  # (follower, session, index) -> receipt time
        self.ready = 0
        self.failures: list[str] = []
        self.tasks: list[asyncio.Task] = []

    def note(self, follower: int, text: str) -> None:
        event = json.loads(text)
        self.arrived[(follower, event["sessionId"], event["index"])] = time.time()

    async def http(self, client, follower: int, session_id: str, start: int, sse: bool) -> None:
        headers = {"Accept": "text/event-stream"} if sse else {}
        url = f"/{self.agent}/v1/session/{session_id}/stream"
        try:
            async with client.stream("GET", url, params={"startIndex": start}, headers=headers) as s:
                if s.status_code != 200:
                    raise RuntimeError(f"HTTP {s.status_code}")
                self.ready += 1
                async for line in s.aiter_lines():
                    if sse:
                        if line.startswith("data: "):
                            self.note(follower, line[6:])
                    elif line:
                        self.note(follower, line)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 (reported at the end)
            self.failures.append(f"{'sse' if sse else 'ndjson'} {session_id}: {exc!r}")

    async def ws(self, follower: int, session_id: str, start: int) -> None:
        import websockets

        url = self.base_url.replace("http", "ws", 1) + f"/{self.agent}/v1/session/{session_id}/ws?startIndex={start}"
        try:
            async with websockets.connect(url, max_queue=None, open_timeout=60) as sock:
                self.ready += 1
                async for text in sock:
                    self.note(follower, text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self.failures.append(f"ws {session_id}: {exc!r}")

    async def open(self, client, targets: list[tuple[int, str, int]], wave: int = 50) -> None:
        """In waves, each waited for (at most 20 s): a thousand handshakes at once would outlast
        the server's handshake timeout on a busy machine, which no client population does."""
        for w in range(0, len(targets), wave):
            for n, session_id, start in targets[w:w + wave]:
                kind = n % 3
                coro = self.ws(n, session_id, start) if kind == 2 else self.http(client, n, session_id, start, kind == 1)
                self.tasks.append(asyncio.create_task(coro))
            deadline = time.monotonic() + 20
            while self.ready + len(self.failures) < len(self.tasks) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)


def client_main(conn, base_url: str, targets: list[tuple[int, str, int]]) -> None:
    """One client process: its share of the streams, on one event loop; answers the bench's requests
    ("ready": streams open so far, "collect": receipts so far, "stop") over `conn`."""
    asyncio.run(_client(conn, base_url, targets))


async def _client(conn, base_url: str, targets: list[tuple[int, str, int]]) -> None:
    import httpx

    followers = Followers(base_url, "support")
    limits = httpx.Limits(max_connections=len(targets) + 50, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=httpx.Timeout(60, read=None)) as client:
        opening = asyncio.create_task(followers.open(client, targets))
        while True:
            while not conn.poll():
                await asyncio.sleep(0.05)
            request = conn.recv()
            if request == "ready":
                conn.send((followers.ready, followers.failures[:3]))
            elif request == "collect":
                conn.send(dict(followers.arrived))
            else:
                break
        opening.cancel()
        for task in followers.tasks:
            task.cancel()
        await asyncio.gather(*followers.tasks, return_exceptions=True)


class Clients:
    """The client processes, the streams dealt among them in turn (so each holds some of the fan-out's)."""

    def __init__(self, base_url: str, targets: list[tuple[str, int]], processes: int):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for k in range(processes):
            mine = [(n, sid, start) for n, (sid, start) in enumerate(targets) if n % processes == k]
            ours, theirs = context.Pipe()
            proc = context.Process(target=client_main, args=(theirs, base_url, mine), daemon=True)
            proc.start()
            self.conns.append(ours)
            self.procs.append(proc)

    def ask(self, request: str) -> list:
        for conn in self.conns:
            conn.send(request)
        return [conn.recv() for conn in self.conns]

    def arrived(self) -> dict[tuple[int, str, int], float]:
        out: dict = {}
        for part in self.ask("collect"):
            out.update(part)
        return out

    def wait_for(self, keys: list, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            arrived = self.arrived()
            if all(k in arrived for k in keys) or time.monotonic() > deadline:
                return arrived
            time.sleep(0.5)

    def stop(self) -> None:
        for conn in self.conns:
            try:
                conn.send("stop")
            except OSError:
                pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


def profiler(args: argparse.Namespace, pid: int, name: str) -> subprocess.Popen | None:
    """py-spy on the web process while a phase runs (--profile DIR; py-spy beside the venv's python,
    or --py-spy PATH), raw collapsed stacks for bench/profile_summary.py."""
    if not args.profile:
        return None
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    spy = args.py_spy or str(Path(sys.executable).with_name("py-spy"))
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--output",
                             str(Path(args.profile) / f"{name}.txt"), "--rate", "200", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc


def stop_profiler(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def summary(lat: list[float]) -> dict[str, float]:
    return {"n": len(lat), "p50": round(pct(lat, 50), 1), "p95": round(pct(lat, 95), 1),
            "p99": round(pct(lat, 99), 1), "max": round(max(lat), 1)}


def measure(server, args: argparse.Namespace, starts: dict[str, int], tmp: Path) -> dict:
    from stream import writer as paced_writer

    web = server.pid("web")
    report: dict = {}
    pss_before = pss_kb(web)
    ids = list(starts)  # each followed from its next index: what arrives is what the writers append
    targets = [(ids[0], starts[ids[0]])] * args.fanout + [(sid, starts[sid]) for sid in ids[1:]]
    clients = Clients(server.base_url, targets, args.clients)
    try:
        t0 = time.monotonic()
        while True:
            answers = clients.ask("ready")
            ready, failures = sum(a[0] for a in answers), [f for a in answers for f in a[1]]
            if ready == len(targets) or failures or time.monotonic() - t0 > 180:
                break
            time.sleep(0.2)
        if failures or ready < len(targets):
            raise RuntimeError(f"{ready}/{len(targets)} streams opened; {failures[:3]}")
        report["streams"] = len(targets)
        report["open_s"] = round(time.monotonic() - t0, 1)
        time.sleep(3)  # let the openings' replays and first reads settle
        pss_after = pss_kb(web)
        report["pss_per_stream_kb"] = round((pss_after - pss_before) / len(targets), 1)
        report["pss_mb"] = [round(pss_before / 1024, 1), round(pss_after / 1024, 1)]
        c0, w0 = cpu_seconds(web), time.monotonic()
        time.sleep(args.idle_seconds)
        report["idle_cpu_pct"] = round(100 * (cpu_seconds(web) - c0) / (time.monotonic() - w0), 1)
        print(f"  {len(targets)} streams open in {report['open_s']} s; idle web CPU {report['idle_cpu_pct']}% "
              f"of a core; PSS {report['pss_mb']} MB, {report['pss_per_stream_kb']} KB/stream", flush=True)

        # fan-out: --paced events to the first session, followed --fanout times
        spy = profiler(args, web, f"{args.config_name}-fanout")
        c0 = cpu_seconds(web)
        out = paced_writer(server, "paced", ids[0], str(args.paced), str(args.interval_ms))
        committed = {int(i): float(t) for i, t in (line.split() for line in out.splitlines() if line.strip())}
        keys = [(f, ids[0], i) for f in range(args.fanout) for i in committed]
        arrived = clients.wait_for(keys, 30)
        lat = [(arrived[k] - committed[k[2]]) * 1000 for k in keys if k in arrived]
        stop_profiler(spy)
        report["fanout_ms"] = summary(lat) | {"missing": len(keys) - len(lat),
                                              "web_cpu_us_per_delivery": round(1e6 * (cpu_seconds(web) - c0) / len(keys))}
        print(f"  fan-out, {args.paced} events x {args.fanout} followers: {report['fanout_ms']}", flush=True)

        # fan-in: one event on each session, as fast as the writer goes
        listing = tmp / "ids.txt"
        listing.write_text("\n".join(ids))
        spy = profiler(args, web, f"{args.config_name}-fanin")
        c0 = cpu_seconds(web)
        done = subprocess.run([server.env["BENCH_PYTHON"], __file__, "writer", "each", str(listing)],
                              cwd=server.src, env=server.env, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"writer each failed: {done.stderr[-2000:]}")
        follower_of = {sid: args.fanout + n - 1 for n, sid in enumerate(ids)}
        follower_of[ids[0]] = 0
        commits = {}
        for line in done.stdout.split("\n"):
            if line.strip():
                sid, index, at = line.split()
                commits[(follower_of[sid], sid, int(index))] = float(at)
        arrived = clients.wait_for(list(commits), 30)
        lat = [(arrived[k] - t) * 1000 for k, t in commits.items() if k in arrived]
        span = max(commits.values()) - min(commits.values())
        stop_profiler(spy)
        report["fanin_ms"] = summary(lat) | {"missing": len(commits) - len(lat), "writer_s": round(span, 2),
                                             "web_cpu_us_per_delivery": round(1e6 * (cpu_seconds(web) - c0) / len(commits))}
        print(f"  fan-in, one event on each of {len(ids)} sessions: {report['fanin_ms']}", flush=True)
    finally:
        clients.stop()
    return report


def run_config(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    import httpx

    from stream import open_session
    from turns import PYTHON, Server, backend, child_env

    state_root = tmp / name
    state_root.mkdir(parents=True)
    extra = {"AGENTSITE_STATE_ROOT": str(state_root)}
    src = Path(args.src).resolve() if args.src else ROOT
    args.config_name = name
    with backend(name, extra):
        print(f"\n== {name} (server code {src})", flush=True)
        server = Server(src, state_root, child_env(extra), asgi=args.asgi)
        server.env["BENCH_PYTHON"] = PYTHON
        try:
            server.manage("migrate", "--noinput")
            server.manage("createcachetable")  # what `serve` makes before it starts (the rate limits' table)
            server.start()
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                base, start = open_session(client)
            done = subprocess.run([PYTHON, __file__, "writer", "clone", base, str(args.sessions - 1)], cwd=src,
                                  env=server.env, capture_output=True, text=True, timeout=900)
            if done.returncode:
                raise RuntimeError(f"writer clone failed: {done.stderr[-2000:]}")
            starts = {base: start} | {sid: int(n) for sid, n in (line.split() for line in done.stdout.splitlines())}
            report = measure(server, args, starts, state_root)
        except BaseException:
            print(server.tail("web"), file=sys.stderr)
            raise
        finally:
            server.stop()
        report["config"] = name
        report["log_errors"] = server.log_errors()["lines"]
    return report


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "writer":
        return writer_main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["embedded", "pg", "both"], default="both")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--fanout", type=int, default=100, help="followers of the first session")
    parser.add_argument("--paced", type=int, default=50, help="events appended to the first session")
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=3, help="client processes the streams are dealt among")
    parser.add_argument("--asgi", choices=["daphne", "uvicorn"], default="uvicorn", help="the web server (serve's default: uvicorn)")
    parser.add_argument("--profile", metavar="DIR", help="py-spy profiles of the web process in the delivery phases")
    parser.add_argument("--py-spy", help="the py-spy to use (default: beside the venv's python)")
    parser.add_argument("--src", help="the tree whose server is measured (default: this one)")
    parser.add_argument("--out", help="JSON output path (default bench/results/streams_many-<timestamp>.json)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))  # the server inherits it
    configs = ["embedded", "pg"] if args.config == "both" else [args.config]
    reports = []
    with tempfile.TemporaryDirectory(prefix="agentsite-streams-many-") as tmp:
        for name in configs:
            reports.append(run_config(name, args, Path(tmp)))
    print(f"\n{'config':<9}{'streams':>8}{'idle CPU %':>11}{'KB/stream':>10}{'fan-out p99':>12}{'fan-in p99':>11}")
    for r in reports:
        print(f"{r['config']:<9}{r['streams']:>8}{r['idle_cpu_pct']:>11}{r['pss_per_stream_kb']:>10}"
              f"{r['fanout_ms']['p99']:>12}{r['fanin_ms']['p99']:>11}")
        for key, goal in GOALS.items():
            got = r[key] if key == "idle_cpu_pct" else r[key.rsplit("_", 2)[0] + "_ms"]["p99"]
            print(f"  target {key} <= {goal:g}: {got} -> {'meets' if got <= goal else 'MISSES'}")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"streams_many-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
