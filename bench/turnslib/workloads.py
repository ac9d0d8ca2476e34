"""The workloads W1 to W5 of one configuration, each measured for latency, CPU, memory and idle cost."""
from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil

from turnslib.config import (AGENT, HTTP_TIMEOUT, PYTHON, TOOL_MESSAGE, TURN_TIMEOUT, WORKLOAD_DEADLINE, BenchError,
                             Config, turn_times)
from turnslib.paced import PacedModel, sdk_alone, streamed_turn, w5_block
from turnslib.server import Server, busy_seconds, pg_backend_cpu, totals, wait_quiet
from turnslib.stats import pct, r1, summary
from turnslib.turn import (TurnResult, adiagnose, anew_session_turn, diagnose, new_session_turn, note,
                           one_request_turn)


class Bench:
    def __init__(self, cfg: Config, server: Server, counts: dict[str, Any], agent: str = AGENT):
        self.cfg = cfg
        self.agent = agent
        self.server = server
        self.counts = counts
        self.sessions = 0
        self.rss_series: list[dict[str, Any]] = []
        self.results: dict[str, Any] = {}
        self.quiet_wait = 0.0
        self.profile_dir: Path | None = None
        self.one_request = False  # W1 and W4 create and stream in one request (--one-request)
        self.paced: PacedModel | None = None  # W5's model, when the paced agent is deployed

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
        sys0 = busy_seconds()
        q0 = self.server.db_counts()
        db0 = pg_backend_cpu(self.cfg.pg_db)
        procs0 = self.server.cpu_by_process()
        cpu0, client0, t0 = self.server.cpu(), time.process_time(), time.perf_counter()
        out = run()
        cpu1, client1, elapsed = self.server.cpu(), time.process_time(), time.perf_counter() - t0
        procs1 = self.server.cpu_by_process()
        db1 = pg_backend_cpu(self.cfg.pg_db)
        cpu0["db"], cpu1["db"] = 0.0, sum(v - db0.get(pid, 0.0) for pid, v in db1.items())
        sys1 = busy_seconds()
        stop_profilers(profilers)
        turns = max(out.get("turns_ok", 0), 1)
        cpu = {n: round((cpu1[n] - cpu0[n]) * 1000 / turns, 2) for n in cpu0}
        cpu["total"] = round(sum(cpu.values()), 2)
        cpu["client"] = round((client1 - client0) * 1000 / turns, 2)
        trees = sum(cpu1[n] - cpu0[n] for n in cpu0 if n != "db")
        out["cpu_ms_per_turn_by_role"] = by_role(procs0, procs1, trees, turns)
        out["cpu_ms_per_turn"] = cpu
        out["server_cpu_util_pct"] = {n: round((cpu1[n] - cpu0[n]) / elapsed * 100, 1) for n in cpu0}
        out["elapsed_s"] = round(elapsed, 2)
        out["machine_busy_pct_before"] = busy_before
        # CPU the rest of the machine used meanwhile (other people's tests skew results: check this).
        ours = sum(cpu1[n] - cpu0[n] for n in cpu0) + (client1 - client0)
        out["other_cpu_pct_of_machine"] = round(max(0.0, (sys1 - sys0) - ours) / (elapsed * (psutil.cpu_count() or 1)) * 100, 1)
        self.sample_rss(f"after {name}")
        out["mem_by_process"] = self.server.mem_by_process()  # each process's smaps read once: the trees' sums too
        out["mem_after"] = {name: totals(procs) for name, procs in out["mem_by_process"].items()}
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
                turn = one_request_turn if self.one_request else new_session_turn
                res = turn(client, self.agent, message, want_tool)
                busy += time.perf_counter() - s0
                if not res.ok and res.session_id:
                    res.error += " " + diagnose(client, self.agent, res.session_id)
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
                tool = self.agent == "support" and done % 2 == 0  # only support has lookup_order
                res = new_session_turn(client, self.agent, TOOL_MESSAGE if tool else "warm up", want_tool=tool)
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
                first = new_session_turn(client, self.agent, "start of a long conversation")
                self.sessions += 1
                if not first.ok:
                    raise BenchError(f"W2: first turn failed: {first.error}")
                sid, token = first.session_id, first.token
                t0 = time.perf_counter()
                busy = 0.0
                # One stream, kept open for the whole conversation.
                with client.stream("GET", f"/{self.agent}/v1/session/{sid}/stream", params={"startIndex": 0}) as s:
                    lines = s.iter_lines()
                    seen = TurnResult(ok=False, latency_ms=0.0, turn_id=first.turn_id)
                    for line in lines:  # replay up to the first turn's session.waiting
                        if line and note(json.loads(line), seen):
                            break
                    for i in range(n):
                        if time.perf_counter() > deadline:
                            errors.append(f"workload deadline after {i} turns")
                            break
                        p0 = time.perf_counter()
                        r = client.post(f"/{self.agent}/v1/session/{sid}/message",
                                        json={"message": f"follow-up number {i}", "continuationToken": token})
                        post_ms.append((time.perf_counter() - p0) * 1000)
                        if r.status_code != 202:
                            errors.append(f"message: HTTP {r.status_code} {r.text[:200]}")
                            break
                        body = r.json()
                        token = body["continuationToken"]
                        res = TurnResult(ok=False, latency_ms=0.0, turn_id=body["turnId"])
                        for line in lines:
                            if line and note(json.loads(line), res):
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
                        res = await anew_session_turn(client, self.agent, f"client {k} says hello")
                        if not res.ok and res.session_id:
                            res.error += " " + await adiagnose(client, self.agent, res.session_id)
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

    def w5(self) -> dict[str, Any]:
        """Sequential turns of the paced agent: a real provider's streamed reply (turnslib.paced)."""
        model, n = self.paced, self.counts["w5"]
        assert model is not None

        with self.client() as client:  # outside the measure: it loads the release and the provider's client
            streamed_turn(client, model)
            self.sessions += 1

        def run() -> dict[str, Any]:
            turns: list[dict[str, Any]] = []
            latency: list[float] = []
            with self.client() as client:
                t0 = time.perf_counter()
                for _ in range(n):
                    s0 = time.perf_counter()
                    turns.append(streamed_turn(client, model))
                    latency.append((time.perf_counter() - s0) * 1000)
                    self.sessions += 1
                busy = time.perf_counter() - t0
            return {"turns": n, "turns_ok": len(turns), "errors": [],
                    "latency_ms": {k: r1(v) for k, v in summary(latency).items()},
                    "turns_per_s": round(len(turns) / busy, 2), "tokens": model.tokens,
                    "gap_ms": model.gap * 1000, **w5_block(turns)}
        # The SDK alone before and after the server's turns, their mean the ratio's base: on a shared
        # machine one reading of it drifts by a fifth from one minute to the next.
        before = sdk_alone(model, min(n, 10))
        out = self.measured("W5", run)
        after = sdk_alone(model, min(n, 10))
        out["sdk_alone_cpu_ms_readings"] = [r1(before), r1(after)]
        out["sdk_alone_cpu_ms"] = r1((before + after) / 2)
        server_ms = out["cpu_ms_per_turn"]["total"]
        out["server_over_sdk"] = round(server_ms / out["sdk_alone_cpu_ms"], 2) if out["sdk_alone_cpu_ms"] else None
        return out


def stop_profilers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def by_role(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], total: float,
            turns: int) -> dict[str, float]:
    """CPU ms a turn by process role, from each live process's own time; what processes that ended meanwhile
    (recycled workers, and any short-lived child such as a tool's) spent in the window is the rest of the
    trees' total."""
    out: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        out[name] = out.get(name, 0.0) + seconds - (before[pid][1] if pid in before else 0.0)
    out["ended meanwhile"] = total - sum(out.values())
    return {name: round(seconds * 1000 / turns, 2) for name, seconds in sorted(out.items())}
