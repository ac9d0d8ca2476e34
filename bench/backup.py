"""How long a whole backup takes on SQLite and PostgreSQL, and how long it makes writers wait.

Per database (--database), a process of its own fills a temp state root's database (on PostgreSQL a scratch
database agentsite_bench_<hex> made on --pg, dropped afterwards) with SESSIONS sessions of EVENTS events
(bulk inserts of the real tables), then runs `agentsite.backups.take.take_backup`, what `manage.py backup`
runs, while WRITERS processes each commit a small INSERT every 2 ms (on SQLite with BEGIN IMMEDIATE, as the
server's atomic() does) and time it. Printed: the build's time, the database's size, the backup's time and
parts, the archive's size, and the writes' p50/p99/max during the backup and in a quiet 2 s (--json: one
object). On SQLite the copy modes of `sqlite.snapshot` are compared too (--modes, "" for none); a copy in
small steps starts over at every write, so its writers stop after --timeout seconds.

    python bench/backup.py [--database sqlite|postgresql|both] [--sessions 2000] [--events 100]
        [--writers 2] [--modes -1,256] [--timeout 60] [--pg postgresql://postgres@127.0.0.1:5432/postgres] [--json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGENT = "from agents.sdk import Agent\nagent = Agent(model='scripted:echo')\n"
WRITES_TABLE = {"sqlite": "CREATE TABLE bench_write (id INTEGER PRIMARY KEY, at REAL, payload TEXT)",
                "postgresql": "CREATE TABLE bench_write (id bigserial PRIMARY KEY, at double precision, payload text)"}
SLOW = 0.1  # writes slower than this are listed with when they ended
# The bench's process holds Django's connections (and on PostgreSQL the pool's threads): writers start fresh.
SPAWN = multiprocessing.get_context("spawn")


def build(state_root: Path, sessions: int, events: int, database_url: str | None = None) -> None:
    """Set up Django on `state_root` (and the database at `database_url`, else its SQLite file) and fill it."""
    os.environ.update(AGENTSITE_STATE_ROOT=str(state_root), DJANGO_SETTINGS_MODULE="agentsite.settings")
    os.environ.pop("DATABASE_URL", None)
    os.environ.update({"DATABASE_URL": database_url} if database_url else {})
    import django
    django.setup()
    from django.core.management import call_command
    from agents.discovery import deploy_agent_folder
    from sessions.models import Event, Session

    call_command("migrate", verbosity=0)
    folder = state_root / "src" / "bench"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    (folder / "agent" / "instructions.md").write_text("Echo.\n")
    deployment = deploy_agent_folder(str(folder))
    payload = {"text": "x" * 300, "usage": {"input": 12, "output": 34}}
    for start in range(0, sessions, 200):
        batch = Session.objects.bulk_create([
            Session(agent=deployment.agent, deployment=deployment, principal_id=f"p{n}", authenticator="bench",
                    next_event_index=events) for n in range(start, min(start + 200, sessions))])
        Event.objects.bulk_create([Event(session=s, index=i, type="assistant.message", data=payload)
                                   for s in batch for i in range(events)], batch_size=2000)


def writer(target: str, stop, out) -> None:
    """Commit a small INSERT every 2 ms until `stop`; (when it ended, lock wait or None, whole write) of each."""
    postgres = target.startswith("postgres")
    if postgres:
        import psycopg
        db = psycopg.connect(target)
    else:
        db = sqlite3.connect(target, timeout=20, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # as the server's connections (agentsite.databases)
    out.put(None)  # connected: timing starts once every writer is
    times = []
    while not stop.is_set():
        began, locked = time.perf_counter(), None
        if postgres:
            db.execute("INSERT INTO bench_write (at, payload) VALUES (%s, %s)", (time.time(), "y" * 200))
            db.commit()
        else:
            db.execute("BEGIN IMMEDIATE")
            locked = time.perf_counter() - began
            db.execute("INSERT INTO bench_write (at, payload) VALUES (?, ?)", (time.time(), "y" * 200))
            db.execute("COMMIT")
        times.append((time.time(), locked, time.perf_counter() - began))
        time.sleep(0.002)
    out.put(times)


def timed_writes(target: str, writers: int, during, timeout: float | None = None):
    """`during()`'s result and the figures of the writes that ended while it ran (writers stop after `timeout`)."""
    stop, out = SPAWN.Event(), SPAWN.Queue()
    procs = [SPAWN.Process(target=writer, args=(target, stop, out)) for _ in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        out.get(timeout=60)
    time.sleep(0.5)
    timer = threading.Timer(timeout or 1e9, stop.set)
    began = time.time()
    try:
        timer.start()
        result = during()
        ended = time.time()
        time.sleep(0.3)
    finally:
        timer.cancel()
        stop.set()
        samples = [s for _ in procs for s in out.get(timeout=60)]
        for p in procs:
            p.join()
    inside = [(at - began, lock, whole) for at, lock, whole in samples if began <= at <= ended + 0.05]
    figures = stats(inside)
    if timeout and ended - began >= timeout:
        figures["stoppedAfter"] = timeout
    return result, figures


def stats(inside: list[tuple[float, float | None, float]]) -> dict:
    wholes = sorted(whole for _, _, whole in inside)
    locks = sorted(lock for _, lock, _ in inside if lock is not None)

    def spread(waits: list[float]) -> dict | None:
        pick = lambda q: round(waits[min(len(waits) - 1, int(q * len(waits)))] * 1000, 1)  # noqa: E731
        return {"p50Ms": pick(0.5), "p99Ms": pick(0.99), "maxMs": round(waits[-1] * 1000, 1)} if waits else None

    slow = [[round(at, 2), round(whole * 1000)] for at, _, whole in sorted(inside) if whole > SLOW]
    return {"writes": len(wholes), "whole": spread(wholes), "lock": spread(locks), "slow": slow}


def summary(figures: dict) -> str:
    """The writes' whole time (lock, insert, commit) and on SQLite their wait for the write lock."""
    if not figures["writes"]:
        return "no writes"
    spread = lambda s: f"p50 {s['p50Ms']:.1f} / p99 {s['p99Ms']:.1f} / max {s['maxMs']:.1f} ms"  # noqa: E731
    text = f"{figures['writes']} writes; " + (f"lock wait {spread(figures['lock'])}; " if figures["lock"] else "")
    text += f"whole write {spread(figures['whole'])}"
    if figures["slow"]:
        text += f"; {len(figures['slow'])} over {SLOW * 1000:.0f} ms (s into it: ms " + \
            ", ".join(f"{at}: {ms}" for at, ms in figures["slow"][:10]) + ")"
    if figures.get("stoppedAfter"):
        text += f"; writers stopped after {figures['stoppedAfter']:.0f} s to let it end"
    return text


def measure(database: str, args) -> dict:
    """Build, then back up with writers beside it; in a process of its own (Django is set up once per process)."""
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-") as tmp:
        root = Path(tmp)
        began = time.monotonic()
        build(root / "state", args.sessions, args.events, os.environ.get("DATABASE_URL"))
        from django.conf import settings
        from django.db import connection
        from agentsite.backups import archive, sqlite, take

        with connection.cursor() as cursor:
            cursor.execute(WRITES_TABLE[database])
            if database == "postgresql":  # the build's dirty pages written out, as a quiet server's checkpoints
                cursor.execute("CHECKPOINT")  # would have: a checkpoint of the build is not the backup's doing
                target = os.environ["DATABASE_URL"]
                cursor.execute("SELECT pg_database_size(current_database())")
                size = cursor.fetchone()[0]
            else:  # its WAL folded in, as a quiet server's checkpoints would have
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                target = str(settings.DATABASES["default"]["NAME"])
                size = Path(target).stat().st_size
        figures = {"buildSeconds": round(time.monotonic() - began, 1), "databaseBytes": size}
        _, figures["baseline"] = timed_writes(target, args.writers, lambda: time.sleep(2))
        out = root / "backup.tar.gz"
        backup = lambda allow: timed_writes(target, args.writers, lambda: take.take_backup(out, allow))  # noqa: E731
        try:
            manifest, figures["during"] = backup(False)
        except archive.BackupError as e:
            if "--allow-missing-key" not in str(e):
                raise
            figures["refused"] = str(e)  # the bench data hold no secrets: not expected
            manifest, figures["during"] = backup(True)
        t = manifest["timings"]
        figures["backup"] = {"totalSeconds": t["totalSeconds"], "databaseSeconds": t["database"]["copySeconds"],
                             "filesSeconds": t["filesSeconds"], "archiveSeconds": t["archiveSeconds"]}
        figures.update(events=manifest["counts"]["events"], archiveBytes=out.stat().st_size,
                       databasePartBytes=manifest["parts"][manifest["database"]["part"]]["bytes"], modes=[])
        for pages in [int(m) for m in args.modes.split(",") if m.strip()] if database == "sqlite" else []:
            copy, packed = root / f"copy{pages}.sqlite3", root / f"b{pages}.tar.gz"
            copied, waits = timed_writes(target, args.writers, lambda: sqlite.snapshot(Path(target), copy, pages),
                                         args.timeout)
            began = time.monotonic()
            archive.write_archive(packed, {}, [copy])
            figures["modes"].append({
                "pages": pages, "copySeconds": copied["copySeconds"], "steps": copied["steps"], "writers": waits,
                "copyBytes": copy.stat().st_size, "archiveSeconds": round(time.monotonic() - began, 2),
                "archiveBytes": packed.stat().st_size})
            copy.unlink()
            packed.unlink()
    return figures


@contextlib.contextmanager
def scratch_database(pg: str):
    """A new database on the server at `pg`, dropped on leaving whatever happened; its URL."""
    import psycopg
    name = f"agentsite_bench_{secrets.token_hex(4)}"
    with psycopg.connect(pg, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(pg, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def in_child(database: str, database_url: str | None) -> dict:
    """`measure` in a new process (`--one`): its figures."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_WORKSPACES_ROOT")}
    env.update({"DATABASE_URL": database_url} if database_url else {})
    done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--one", database], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{database}: the bench's process failed ({done.returncode}); its error is above")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(database: str, f: dict) -> None:
    mb = lambda n: f"{n / 1e6:,.1f} MB"  # noqa: E731
    b = f["backup"]
    print(f"{database}: {f['events']:,} events, database {mb(f['databaseBytes'])}, built in {f['buildSeconds']:.0f} s")
    if f.get("refused"):
        print(f"  take_backup refused ({f['refused']}); measured with allow_missing_key=True")
    print(f"  take_backup {b['totalSeconds']:.2f} s: database {'copy' if database == 'sqlite' else 'dump'} "
          f"{b['databaseSeconds']:.2f} s ({mb(f['databasePartBytes'])}), files {b['filesSeconds']:.2f} s, "
          f"archive {b['archiveSeconds']:.2f} s; archive {mb(f['archiveBytes'])}")
    print(f"  writers during the backup: {summary(f['during'])}")
    print(f"  baseline, no backup (2 s): {summary(f['baseline'])}")
    for m in f["modes"]:
        print(f"  snapshot pages={m['pages']}: copy {m['copySeconds']:.2f} s in {m['steps']} step(s), "
              f"{mb(m['copyBytes'])}; archive {m['archiveSeconds']:.2f} s, {mb(m['archiveBytes'])}; "
              f"writers during the copy: {summary(m['writers'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="sqlite")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--modes", default="-1,256")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process measuring one database
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    results = {}
    for database in ("sqlite", "postgresql") if args.database == "both" else (args.database,):
        with scratch_database(args.pg) if database == "postgresql" else contextlib.nullcontext() as url:
            results[database] = in_child(database, url)
        if not args.json:
            report(database, results[database])
    if args.json:
        print(json.dumps({"sessions": args.sessions, "eventsPerSession": args.events, "writers": args.writers,
                          "databases": results}, indent=2))


if __name__ == "__main__":
    main()
