"""Scheduled backups (agentsite.backups.scheduled): two worker processes racing for one slot on SQLite and on
PostgreSQL take it once; the archives beyond AGENTSITE_BACKUP_KEEP go; a failure is recorded and does not
advance the metric; the dashboard shows the last result; a bad setting stops the start."""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from prometheus_client import REGISTRY
from django.test import override_settings

from agentsite.backups import scheduled
from agentsite.backups.cadence import BackupSettingInvalid, latest_slot, parse_keep, parse_schedule
from sessions.models import BackupRun
from tests.agentsite.backup_support import manage
from tests.sessions.test_concurrent_appends import database, python
from tests.sessions.test_dashboard import login
from tests.sessions.test_metrics import database_gauges, sample
from tests.support import ROOT, child_env

SLOT = datetime(2025, 3, 3, 3, 0, tzinfo=timezone.utc)

# A worker's ticker pass at a moment just after the slot, once the test opens the gate; then its backup
# thread, if it claimed the slot, to its end.
WORKER = """
import json, os, sys, time
from datetime import datetime
import django
django.setup()
from django.db import connection
from agentsite.backups import scheduled
connection.ensure_connection()
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
scheduled.backup_tick(datetime.fromisoformat(sys.argv[1]))
claimed = scheduled._running is not None
if claimed:
    scheduled._running.join()
print(json.dumps({"claimed": claimed}))
"""


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    monkeypatch.setattr(scheduled, "_seen_slot", None)
    monkeypatch.setattr(scheduled, "_running", None)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_worker_processes_take_a_slot_once(kind, tmp_path):
    out = tmp_path / "backups"
    with database(kind, tmp_path / "state", migrated=True) as (env, _):
        env = {**env, "AGENTSITE_BACKUP_SCHEDULE": "0 3 * * *", "AGENTSITE_BACKUP_DIR": str(out)}
        gate = tmp_path / "go"
        now = (SLOT + timedelta(seconds=1)).isoformat()
        workers = [subprocess.Popen(python(WORKER) + [now, str(gate)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            for w in workers:  # both connected to the database, then released together
                assert w.stdout.readline().strip() == "ready", w.stderr.read()
            gate.touch()
            results = []
            for w in workers:
                stdout, stderr = w.communicate(timeout=60)
                assert w.returncode == 0, stderr
                results.append(json.loads(stdout.strip().splitlines()[-1]))
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
        rows = runs(env)

    assert sorted(r["claimed"] for r in results) == [False, True]
    assert [p.name for p in out.iterdir()] == ["agentsite-scheduled-20250303T0300Z.tar.gz"]
    assert len(rows) == 1
    slot, status, file, size, error = rows[0]
    assert (status, Path(file).name, size, error) == ("succeeded", "agentsite-scheduled-20250303T0300Z.tar.gz",
                                                      (out / Path(file).name).stat().st_size, "")


# A worker that claims the slot and is killed before its archive is written (SIGKILL: no cleanup runs).
KILLED = """
import os, signal
from datetime import datetime
import django
django.setup()
from agentsite.backups import scheduled
assert scheduled.claim_due(datetime.fromisoformat(sys.argv[1])) is not None
os.kill(os.getpid(), signal.SIGKILL)
"""

# Another worker's recovery sweep, as its ticker runs it.
SWEEP = """
import django
django.setup()
from sessions.turn import extensions, recovery
print([step.name for step in extensions.recovery_steps])
recovery.sweep()
"""


def test_the_run_of_a_worker_killed_mid_backup_is_ended_by_the_next_sweep(tmp_path):
    with database("sqlite", tmp_path / "state", migrated=True) as (env, _):
        env = {**env, "AGENTSITE_BACKUP_SCHEDULE": "0 3 * * *", "AGENTSITE_BACKUP_DIR": str(tmp_path / "backups")}
        killed = subprocess.run(python(KILLED) + [(SLOT + timedelta(seconds=1)).isoformat()], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert killed.returncode == -9, killed.stderr
        ((_, status, _, _, _),) = runs(env)
        assert status == "running"
        swept = subprocess.run(python(SWEEP), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert swept.returncode == 0, swept.stderr
        assert "abandoned backups" in swept.stdout
        ((_, status, _, _, error),) = runs(env)
    assert status == "failed"
    assert error.startswith("the process taking it (") and error.endswith(") ended before it finished")


def runs(env: dict[str, str]) -> list[tuple]:
    table = BackupRun._meta.db_table
    sql = f"SELECT slot, status, file, size_bytes, error FROM {table} ORDER BY slot"
    if env.get("DATABASE_URL"):
        with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
            return db.execute(sql).fetchall()
    with contextlib.closing(sqlite3.connect(Path(env["AGENTSITE_STATE_ROOT"]) / "db.sqlite3")) as db:
        return db.execute(sql).fetchall()


def succeeded(folder: Path, slot: datetime, size: int = 10) -> BackupRun:
    run = BackupRun.claim(slot, "here:1")
    path = folder / scheduled.archive_name(slot)
    path.write_bytes(b"x" * size)
    assert run.succeed(str(path), size, 0.5)
    return run


@pytest.mark.django_db
def test_pruning_keeps_the_newest_archives_and_only_touches_its_own(tmp_path):
    slots = [SLOT + timedelta(days=d) for d in range(5)]
    with override_settings(AGENTSITE_BACKUP_DIR=tmp_path):
        for slot in slots[:4]:
            succeeded(tmp_path, slot)
        BackupRun.claim(slots[0] - timedelta(days=1), "here:1").fail("disk full", 0.1)  # older than any kept
        BackupRun.claim(slots[4], "here:1").fail("disk full", 0.1)  # newer: kept, to show on the dashboard
        (tmp_path / "agentsite-backup-by-hand.tar.gz").write_bytes(b"mine")

        assert scheduled.prune(keep=2) == 2

    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agentsite-backup-by-hand.tar.gz", scheduled.archive_name(slots[2]), scheduled.archive_name(slots[3])]
    assert [(r.slot, r.status) for r in BackupRun.objects.order_by("slot")] == [
        (slots[2], "succeeded"), (slots[3], "succeeded"), (slots[4], "failed")]


@pytest.mark.django_db
def test_a_failing_backup_records_its_error_and_the_metric_keeps_the_last_success(tmp_path):
    with override_settings(AGENTSITE_BACKUP_DIR=tmp_path):
        earlier = succeeded(tmp_path, SLOT - timedelta(days=1))
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    failures = sample(REGISTRY, "agentsite_backup_failures_total")

    with override_settings(AGENTSITE_BACKUP_SCHEDULE="0 3 * * *", AGENTSITE_BACKUP_DIR=blocked / "backups"):
        run = scheduled.claim_due(SLOT + timedelta(minutes=5))
        assert run is not None and run.slot == SLOT
        assert scheduled.take_scheduled(run) is False

    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert "a-file" in run.error
    assert sample(database_gauges(), "agentsite_backup_last_success_timestamp_seconds") == pytest.approx(
        earlier.finished_at.timestamp())
    assert sample(REGISTRY, "agentsite_backup_failures_total") == failures + 1


@pytest.mark.django_db
def test_a_claimed_slot_is_not_claimed_again_and_the_next_one_is(tmp_path):
    with override_settings(AGENTSITE_BACKUP_SCHEDULE="0 3 * * *", AGENTSITE_BACKUP_DIR=tmp_path):
        assert scheduled.claim_due(SLOT + timedelta(hours=1)).slot == SLOT
        scheduled._seen_slot = None  # another process, which never saw it
        assert scheduled.claim_due(SLOT + timedelta(hours=2)) is None
        assert scheduled.claim_due(SLOT + timedelta(days=1)).slot == SLOT + timedelta(days=1)
    assert BackupRun.objects.count() == 2


@pytest.mark.django_db
def test_the_dashboard_shows_the_last_scheduled_backup(tmp_path):
    ops = login("sam", staff=True)
    with override_settings(AGENTSITE_BACKUP_SCHEDULE="0 3 * * *", AGENTSITE_BACKUP_DIR=tmp_path):
        html = ops.get("/admin/dashboard/").content.decode()
        assert 'id="backups" data-status="none"' in html and "none taken yet" in html

        succeeded(tmp_path, SLOT, size=2048)
        html = ops.get("/admin/dashboard/").content.decode()
        assert 'data-status="succeeded"' in html
        assert scheduled.archive_name(SLOT) in html and "2.0\xa0KB" in html

        BackupRun.claim(SLOT + timedelta(days=1), "here:1").fail("pg_dump: connection refused", 0.2)
        html = ops.get("/admin/dashboard/").content.decode()
        assert 'data-status="failed"' in html and "failed: pg_dump: connection refused" in html
        assert "The last that succeeded finished" in html and scheduled.archive_name(SLOT) in html


@pytest.mark.django_db
def test_no_line_while_no_backup_is_scheduled_or_was_taken():
    html = login("sam", staff=True).get("/admin/dashboard/").content.decode()
    assert 'id="backups"' not in html


def test_the_settings_parse_and_name_themselves():
    assert parse_schedule("S", None) == "" and parse_schedule("S", "off") == ""
    assert parse_schedule("S", " 0  3 * * * ") == "0 3 * * *"
    assert parse_keep("K", None) == 7 and parse_keep("K", "3") == 3
    for bad in ("0 3 * *", "61 * * * *", "0 3 31 2 *"):
        with pytest.raises(BackupSettingInvalid, match="AGENTSITE_BACKUP_SCHEDULE"):
            parse_schedule("AGENTSITE_BACKUP_SCHEDULE", bad)
    for bad in ("0", "-1", "seven"):
        with pytest.raises(BackupSettingInvalid, match="AGENTSITE_BACKUP_KEEP"):
            parse_keep("AGENTSITE_BACKUP_KEEP", bad)
    assert latest_slot("0 3 * * *", SLOT) == SLOT
    assert latest_slot("0 3 * * *", SLOT - timedelta(seconds=1)) == SLOT - timedelta(days=1)


def test_a_bad_schedule_stops_a_command_naming_the_setting(tmp_path):
    done = manage(child_env(AGENTSITE_STATE_ROOT=str(tmp_path), DJANGO_SETTINGS_MODULE="agentsite.settings",
                            AGENTSITE_BACKUP_SCHEDULE="every night"), "check")
    assert done.returncode != 0
    assert "AGENTSITE_BACKUP_SCHEDULE='every night' is not a cron expression" in done.stderr
