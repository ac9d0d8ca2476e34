#!/usr/bin/env python
"""Replay and live delivery of a session's event log over the NDJSON stream.

It starts the server the way bench/turns.py does (web process and worker on
a fresh state root; `pg` on a throwaway PostgreSQL database and a free Redis
db number), opens one session, and measures:

  replay    a session holding --events events (10,000 by default, written
            through sessions.eventlog.events.append_events by bench/stream_writer.py):
            from sending GET .../stream?startIndex=0 to receiving the last
            event's line, --runs times.
  delivery  a stream kept open while stream_writer.py appends --paced events
            one at a time (--interval-ms apart), each in its own commit, as a
            worker does: from the instant after the commit returned (the
            writer's clock) to the line arriving at the client (the same
            machine's clock): p50, p95, p99, max.

    .venv/bin/python bench/stream.py --config both
    .venv/bin/python bench/stream.py --config pg --runs 5 --paced 1000

Targets (the turn-cost issue): replay of 10,000 events <= 150 ms; delivery
<= 5 ms p99 on PostgreSQL + Redis.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turns import AGENT, PYTHON, BenchError, Server, backend, child_env, pct  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "bench" / "stream_writer.py"
REPLAY_GOAL_MS = 150.0
DELIVERY_P99_GOAL_MS = 5.0


def writer(server: Server, *args: str, timeout: float = 600) -> str:
    done = subprocess.run([PYTHON, str(WRITER), *args], cwd=server.src, env=server.env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise BenchError(f"stream_writer {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def open_session(client: httpx.Client) -> tuple[str, int]:
    """A new session whose first turn has ended; its id and the next index."""
    r = client.post(f"/{AGENT}/v1/session", json={"message": "hello"})
    if r.status_code != 201:
        raise BenchError(f"create: HTTP {r.status_code} {r.text[:200]}")
    session_id = r.json()["sessionId"]
    last = -1
    with client.stream("GET", f"/{AGENT}/v1/session/{session_id}/stream", params={"startIndex": 0}) as s:
        for line in s.iter_lines():
            if line:
                event = json.loads(line)
                last = event["index"]
                if event["type"] == "session.waiting":
                    break
    return session_id, last + 1


def replay(client: httpx.Client, session_id: str, last_index: int) -> float:
    """ms from the request to the line of `last_index`."""
    t0 = time.perf_counter()
    seen = 0
    with client.stream("GET", f"/{AGENT}/v1/session/{session_id}/stream", params={"startIndex": 0}) as s:
        if s.status_code != 200:
            raise BenchError(f"stream: HTTP {s.status_code}")
        for line in s.iter_lines():
            if not line:
                continue
            seen += 1  # the log from 0 is contiguous: only the last line needs parsing (the client's CPU is not measured)
            if seen == last_index + 1:
                elapsed = (time.perf_counter() - t0) * 1000
                if json.loads(line)["index"] != last_index:
                    raise BenchError(f"line {seen} is not index {last_index}: {line[:200]}")
                return elapsed
    raise BenchError("the stream ended before the last event")


def delivery(server: Server, client: httpx.Client, session_id: str, start: int, n: int, interval_ms: float
             ) -> list[float]:
    """Latencies (ms) from each paced event's commit to its arrival."""
    arrived: dict[int, float] = {}
    ready = threading.Event()
    failure: list[BaseException] = []

    def read() -> None:
        try:
            with client.stream("GET", f"/{AGENT}/v1/session/{session_id}/stream",
                               params={"startIndex": start}) as s:
                ready.set()
                for line in s.iter_lines():
                    if line:
                        arrived[json.loads(line)["index"]] = time.time()
                        if len(arrived) >= n:
                            return
        except BaseException as exc:  # noqa: BLE001 (reported by the caller)
            failure.append(exc)
            ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(10)
    time.sleep(0.3)  # the reader has subscribed once its response started; leave it a moment more
    out = writer(server, "paced", session_id, str(n), str(interval_ms))
    reader.join(30)
    if failure:
        raise BenchError(f"reader failed: {failure[0]!r}")
    committed = {int(i): float(t) for i, t in (line.split() for line in out.splitlines() if line.strip())}
    missing = [i for i in committed if i not in arrived]
    if missing:
        raise BenchError(f"{len(missing)} of {len(committed)} paced events never arrived (first {missing[:5]})")
    return [(arrived[i] - t) * 1000 for i, t in committed.items()]


def run_config(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    state_root = tmp / name
    state_root.mkdir(parents=True)
    # No per-principal limits: the bench opens sessions far faster than a person does (as turns.py).
    extra = {"AGENTSITE_STATE_ROOT": str(state_root), "AGENTSITE_RATE_SESSIONS": "off",
             "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "off"}
    report: dict = {"config": name}
    with backend(name, extra):
        print(f"\n== {name} (state root {state_root})")
        server = Server(ROOT, state_root, child_env(extra))
        try:
            server.start()
            with httpx.Client(base_url=server.base_url, timeout=60) as client:
                session_id, next_index = open_session(client)
                writer(server, "bulk", session_id, str(args.events - next_index))
                last = args.events - 1
                replay(client, session_id, last)  # warm: the first read of a cold table is not what is measured
                runs = [round(replay(client, session_id, last), 1) for _ in range(args.runs)]
                report["replay_ms"] = runs
                report["replay_p50_ms"] = round(statistics.median(runs), 1)
                print(f"  replay of {args.events} events: {runs} ms (p50 {report['replay_p50_ms']})")
                lat = delivery(server, client, session_id, args.events, args.paced, args.interval_ms)
                report["delivery_ms"] = {k: round(v, 2) for k, v in (
                    ("p50", pct(lat, 50)), ("p95", pct(lat, 95)), ("p99", pct(lat, 99)), ("max", max(lat)))}
                report["delivered"] = len(lat)
                print(f"  delivery of {len(lat)} events: {report['delivery_ms']}")
        finally:
            server.stop()
        report["log_errors"] = server.log_errors()
        if report["log_errors"]["lines"]:
            print(f"  ! {report['log_errors']['lines']} error line(s) in the server logs: {report['log_errors']['first'][:3]}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["embedded", "pg", "both"], default="both")
    parser.add_argument("--events", type=int, default=10_000, help="events in the replayed session")
    parser.add_argument("--runs", type=int, default=3, help="replays measured")
    parser.add_argument("--paced", type=int, default=300, help="events appended one by one for delivery")
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--out", help="JSON output path (default bench/results/stream-<timestamp>.json)")
    args = parser.parse_args()
    configs = ["embedded", "pg"] if args.config == "both" else [args.config]
    reports = []
    with tempfile.TemporaryDirectory(prefix="agentsite-stream-") as tmp:
        for name in configs:
            reports.append(run_config(name, args, Path(tmp)))
    print()
    for rep in reports:
        replay_ok = rep["replay_p50_ms"] <= REPLAY_GOAL_MS
        print(f"target {rep['config']:<8} replay of {args.events} events p50 <= {REPLAY_GOAL_MS:g} ms: "
              f"{rep['replay_p50_ms']} ms -> {'meets' if replay_ok else 'MISSES'}")
        if rep["config"] == "pg":
            p99 = rep["delivery_ms"]["p99"]
            print(f"target pg       delivery p99 <= {DELIVERY_P99_GOAL_MS:g} ms: {p99} ms -> "
                  f"{'meets' if p99 <= DELIVERY_P99_GOAL_MS else 'MISSES'}")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"stream-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
