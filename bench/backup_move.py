"""How long moving a server between SQLite and PostgreSQL takes (`manage.py restore FILE --to DATABASE_URL`).

Builds a SQLite state root of SESSIONS sessions with EVENTS events each (bench/backup.py's `build`), backs
it up, restores it `--to` a scratch PostgreSQL database, backs that up and restores it `--to` a fresh
SQLite file, each step a `manage.py` process as an operator runs it. Printed per step: the wall time,
and for a restore the table copy's own time and rows. The scratch database is dropped afterwards.

    python bench/backup_move.py [--sessions 10000] [--events 10] [--pg postgresql://postgres@127.0.0.1:5432/postgres]
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
BUILD = "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from backup import build; " \
        "build(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))"


def env_of(state_root: Path, database_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_WORKSPACES_ROOT")}
    env.update(AGENTSITE_STATE_ROOT=str(state_root), DJANGO_SETTINGS_MODULE="agentsite.settings")
    if database_url:
        env["DATABASE_URL"] = database_url
    return env


def manage(env: dict[str, str], *args: str) -> tuple[float, dict]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr)
    return time.monotonic() - began, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--events", type=int, default=10)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    name = f"agentsite_bench_move_{secrets.token_hex(4)}"
    pg_url = args.pg.rsplit("/", 1)[0].replace("postgresql://", "postgres://", 1) + "/" + name
    with tempfile.TemporaryDirectory(prefix="agentsite-move-") as scratch, \
            psycopg.connect(args.pg, autocommit=True) as admin:
        folder = Path(scratch)
        source = env_of(folder / "sqlite")
        began = time.monotonic()
        subprocess.run([sys.executable, "-c", BUILD, str(folder / "sqlite"), str(args.sessions), str(args.events)],
                       cwd=ROOT, env=source, check=True)
        print(f"built {args.sessions} sessions x {args.events} events in {time.monotonic() - began:.1f} s")
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            rows = [("backup (SQLite)", *manage(source, "backup", "--out", str(folder / "sqlite.tar.gz")))]
            rows.append(("restore --to PostgreSQL", *manage(env_of(folder / "pg"), "restore",
                                                           str(folder / "sqlite.tar.gz"), "--to", pg_url)))
            rows.append(("backup (PostgreSQL)", *manage(env_of(folder / "pg", pg_url), "backup", "--out",
                                                       str(folder / "pg.tar.gz"))))
            back = folder / "back"
            rows.append(("restore --to SQLite", *manage(env_of(back, pg_url), "restore", str(folder / "pg.tar.gz"),
                                                       "--to", f"sqlite:///{back}/db.sqlite3")))
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for step, seconds, report in rows:
        copy = report.get("copy") or {}
        extra = f"  copy {copy['seconds']:.1f} s, {copy['rows']} rows" if copy else ""
        print(f"{step:26} {seconds:7.1f} s  {report['counts']['events']} events{extra}")


if __name__ == "__main__":
    main()
