"""The command line: the server's code, each configuration measured in turn, the report written."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from turnslib.config import (AGENT, FULL, QUICK, REDIS_HOST, ROOT, BenchError, Config, pg_create, pg_drop,
                             redis_cleanup, redis_pick_db)
from turnslib.paced import PacedModel, write_agent
from turnslib.report import print_table
from turnslib.server import Server, child_env
from turnslib.stats import rss_growth
from turnslib.workloads import Bench


def run_config(name: str, counts: dict[str, Any], args: argparse.Namespace, tmp: Path, src: Path,
               reports: list[dict[str, Any]]) -> None:
    """Measure one configuration; its report is in `reports` from the start, so a
    failure or Ctrl-C part-way still leaves what was measured."""
    state_root = tmp / name
    state_root.mkdir(parents=True)
    cfg = Config(name=name)
    # One principal drives the server far past a person's pace: the per-principal limits would
    # measure themselves, not the engine (--limits keeps the running-turn cap on to price it).
    extra = {"AGENTSITE_STATE_ROOT": str(state_root), "AGENTSITE_RATE_SESSIONS": "off",
             "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "4" if args.limits else "off"}
    if args.workers:
        extra["AGENTSITE_WORKERS"] = str(args.workers)
    if args.settings:
        extra["DJANGO_SETTINGS_MODULE"] = args.settings
    server: Server | None = None
    report: dict[str, Any] = {"config": name}
    bench: Bench | None = None
    paced: PacedModel | None = None
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
        server = Server(src, state_root, child_env(extra), asgi=args.asgi, agent_dir=src / "examples" / args.agent)
        more_agents: tuple[Path, ...] = ()
        if not args.only or "W5" in args.only:
            paced = PacedModel(counts["w5_tokens"], counts["w5_gap_ms"]).__enter__()
            more_agents = (write_agent(tmp / f"{name}-agents", paced),)
        server.start(more_agents)
        if args.pin:
            server.pin({0})
            os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)) or {0})
        print(f"  web pid {server.pid('web')} on {server.base_url}, worker pid {server.pid('worker')}")
        bench = Bench(cfg, server, counts, args.agent)
        bench.paced = paced
        bench.quiet_wait = args.quiet_wait
        bench.one_request = args.one_request
        if args.profile:
            bench.profile_dir = Path(args.profile).resolve()
            bench.profile_dir.mkdir(parents=True, exist_ok=True)
        reports.append(report)
        report.update(describe=cfg.describe(), settings=args.settings or "agentsite.settings", asgi=args.asgi,
                      one_request=args.one_request,
                      workloads=bench.results, rss_series=bench.rss_series)
        bench.sample_rss("started")
        bench.warmup()
        bench.sample_rss("after warm-up")
        # W3 last: it is the one that can leave the server worse off (e.g. out of database connections).
        steps = [("W1", bench.w1), ("W2", bench.w2), ("W4", bench.w4), ("W5", bench.w5), ("W3", bench.w3)]
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
            print("      cpu ms/turn by process: " + "  ".join(
                f"{role} {ms}" for role, ms in out["cpu_ms_per_turn_by_role"].items()))
    except KeyboardInterrupt:
        report.setdefault("aborted", "interrupted")
        raise
    finally:
        if bench is not None:
            report["rss_growth"] = rss_growth(bench.rss_series)
        if paced is not None:
            paced.__exit__(None, None, None)
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



def main(description: str) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", choices=["embedded", "pg", "both"], default="both")
    parser.add_argument("--agent", default=AGENT, help="the example agent driven (examples/<name>; default support;"
                        " W4 calls support's lookup_order tool)")
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--out", help="JSON output path (default bench/results/turns-<timestamp>.json)")
    parser.add_argument("--only", nargs="+", choices=["W1", "W2", "W3", "W4", "W5"], help="run only these workloads")
    parser.add_argument("--limits", action="store_true",
                        help="keep the default running-turn cap (4 per principal) on; rates stay off")
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
    parser.add_argument("--asgi", choices=["daphne", "uvicorn"], default="uvicorn",
                        help="the web server (default uvicorn, as `manage.py serve` runs it)")
    parser.add_argument("--one-request", action="store_true",
                        help="W1 and W4 create the session and read its turn in one request (POST /session with"
                        " Accept: application/x-ndjson) instead of a create then a GET of the stream")
    parser.add_argument("--pin", action="store_true", help="server processes on CPU 0, this client on the others"
                        " (PostgreSQL and Redis stay unpinned)")
    parser.add_argument("--w1", type=int, metavar="N", help="W1's number of sequential sessions (default 300)")
    parser.add_argument("--w5", type=int, metavar="N", help="W5's number of sequential streamed turns (default 20)")
    parser.add_argument("--w5-tokens", type=int, metavar="N", help="W5: chunks of one word the model streams (200)")
    parser.add_argument("--w5-gap-ms", type=float, metavar="MS", help="W5: the model's pause between chunks (10)")
    args = parser.parse_args()

    counts = dict(QUICK if args.quick else FULL)
    for key in ("w1", "w5", "w5_tokens", "w5_gap_ms"):
        if getattr(args, key) is not None:
            counts[key] = getattr(args, key)
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
