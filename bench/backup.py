"""How long a backup of a large SQLite database takes, and how long it makes writers wait.

Builds a state root whose database holds SESSIONS sessions of EVENTS events each (bulk inserts of
the real tables), then copies it with `agentsite.backups.sqlite.snapshot` while WRITERS processes
commit one small write transaction every 2 ms (BEGIN IMMEDIATE, as the server's atomic() does),
each timing its own writes. Printed per copy mode: the copy's time, its size, the archive's time,
and the writers' p50/p99/max write time during the copy against a quiet baseline.

    python bench/backup.py [--sessions 2000] [--events 100] [--writers 2] [--modes -1,256]
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

AGENT = "from agents.sdk import Agent\nagent = Agent(model='scripted:echo')\n"


def build(state_root: Path, sessions: int, events: int) -> Path:
    os.environ.update(AGENTSITE_STATE_ROOT=str(state_root), DJANGO_SETTINGS_MODULE="agentsite.settings")
    os.environ.pop("DATABASE_URL", None)
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
    return Path(django.conf.settings.DATABASES["default"]["NAME"])


def writer(path: str, stop, out) -> None:
    db = sqlite3.connect(path, timeout=20, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")  # as the server's connections (agentsite.settings)
    times = []
    while not stop.is_set():
        began = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        locked = time.perf_counter() - began
        db.execute("INSERT INTO bench_write (at, payload) VALUES (?, ?)", (time.time(), "y" * 200))
        db.execute("COMMIT")
        times.append((time.time(), locked, time.perf_counter() - began))
        time.sleep(0.002)
    out.put(times)


def timed_writes(path: Path, writers: int, during):
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    procs = [multiprocessing.Process(target=writer, args=(str(path), stop, out)) for _ in range(writers)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    began = time.time()
    result = during()
    ended = time.time()
    time.sleep(0.3)
    stop.set()
    samples = [s for _ in procs for s in out.get()]
    for p in procs:
        p.join()
    inside = [(lock, whole) for at, lock, whole in samples if began <= at <= ended + 0.05]
    return result, (sorted(lock for lock, _ in inside), sorted(whole for _, whole in inside))


def summary(measured: tuple[list[float], list[float]]) -> str:
    """The writes' wait for the write lock (BEGIN IMMEDIATE) and their whole time (lock, insert, commit)."""
    locks, wholes = measured
    if not wholes:
        return "no writes"

    def spread(waits: list[float]) -> str:
        pick = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] * 1000  # noqa: E731
        return f"p50 {pick(0.5):.1f} / p99 {pick(0.99):.1f} / max {waits[-1] * 1000:.1f} ms"

    return f"{len(wholes)} writes; lock wait {spread(locks)}; whole write {spread(wholes)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--modes", default="-1,256")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.monotonic()
        path = build(root / "state", args.sessions, args.events)
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("CREATE TABLE bench_write (id INTEGER PRIMARY KEY, at REAL, payload TEXT)")
            db.commit()
        print(f"database: {path.stat().st_size / 1e6:.0f} MB, {args.sessions * args.events:,} events "
              f"(built in {time.monotonic() - t:.0f} s)")
        _, quiet = timed_writes(path, args.writers, lambda: time.sleep(2))
        print(f"baseline, no backup: {summary(quiet)}")
        from agentsite.backups import archive, sqlite

        for pages in (int(m) for m in args.modes.split(",")):
            copy = root / f"copy{pages}.sqlite3"

            def run():
                began = time.monotonic()
                described = sqlite.snapshot(path, copy, pages=pages)
                return described, time.monotonic() - began

            (described, seconds), waits = timed_writes(path, args.writers, run)
            began = time.monotonic()
            archive.write_archive(root / f"b{pages}.tar.gz", {}, [copy])
            packed = time.monotonic() - began
            print(f"pages={pages}: copy {seconds:.2f} s in {described['steps']} step(s), "
                  f"{copy.stat().st_size / 1e6:.0f} MB; archive {packed:.2f} s, "
                  f"{(root / f'b{pages}.tar.gz').stat().st_size / 1e6:.0f} MB; writers during the copy: {summary(waits)}")
            copy.unlink()


if __name__ == "__main__":
    main()
