"""`manage.py backup` and `manage.py restore` as an operator runs them: separate processes, real SQLite files
and a real PostgreSQL server, one scratch database per test.

A source state root holds finished sessions, a turn a worker held when the backup was taken, a schedule
that fired before it and a workspace file; its archive is verified, damaged, and restored elsewhere.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import socket
import sqlite3
import tarfile
import zlib
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from agentsite.backups.archive import pack_folder, unpack_folder
from agentsite.backups.restore import unknown_migrations
from tests.agentsite.backup_support import fill, manage, manage_json, manage_ok, state_env
from tests.support import postgres_database

EVENTS = 'SELECT session_id, "index", type, data FROM agent_sessions_event ORDER BY session_id, "index"'
SCHEDULE = "SELECT next_fire_at, last_fired_at, fire_count FROM agent_sessions_schedule"
TURN = "SELECT status, error, lease_until FROM agent_sessions_turn WHERE id = ?"



@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[dict, dict, Path]:
    """A filled SQLite state root's environment, what it holds, and a backup of it."""
    root = tmp_path_factory.mktemp("backup-source") / "state"
    env = state_env(root)
    made = fill(root, env)
    archive = root.parent / "backup.tar.gz"
    manifest = manage_json(env, "backup", "--out", str(archive))
    return env, {**made, "manifest": manifest}, archive


def read(database: Path, sql: str, *args) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return db.execute(sql, args).fetchall()


def test_a_backup_lists_its_parts_and_facts_and_holds_no_key(source):
    env, made, archive = source
    manifest = made["manifest"]
    assert sorted(manifest["parts"]) == ["database.sqlite3", "releases.tar", "workspaces.tar"]
    assert manifest["database"]["vendor"] == "sqlite"
    assert "0001_initial" in manifest["database"]["migrations"]["sessions"]
    assert {k: manifest["counts"][k] for k in ("sessions", "events", "releases", "runningTurns")} == {
        "sessions": 4, "events": 16, "releases": 1, "runningTurns": 1}
    assert manifest["secretsKey"]["inArchive"] is False
    with tarfile.open(archive) as tar:
        assert [m.name for m in tar.getmembers()] == ["manifest.json", "database.sqlite3", "workspaces.tar",
                                                     "releases.tar"]
        assert not any("secrets.key" in m.name for m in tar.getmembers())


def test_restore_into_a_fresh_state_root_brings_everything_back_and_ends_the_held_turn(source, tmp_path):
    env, made, archive = source
    target = tmp_path / "restored"
    target_env = state_env(target)
    report = manage_json(target_env, "restore", str(archive))
    assert report["lostTurnsEnded"] == 1
    assert report["counts"]["sessions"] == 4 and report["counts"]["events"] == 16
    old, new = env["AGENTSITE_STATE_ROOT"] + "/db.sqlite3", target / "db.sqlite3"
    assert report["queuedTurnsRequeued"] == 1
    assert read(old, TURN, made["queued"])[0][::2] == ("queued", None)
    # Its task was in the old server's queue: the first recovery sweep here gives it another, without waiting
    # AGENTSITE_REQUEUE_SECONDS from when it was made.
    status, _, due = read(new, TURN, made["queued"])[0]
    assert status == "queued" and datetime.fromisoformat(due) <= datetime.utcnow()
    finished = [row for row in read(new, EVENTS) if row[0] in made["done"]]
    assert finished == [row for row in read(old, EVENTS) if row[0] in made["done"]] and len(finished) == 15
    assert read(new, TURN, made["turn"])[0][:2] == ("failed", "worker lost: the process running this turn stopped")
    held = [json.loads(data) | {"type": kind} for sid, _, kind, data in read(new, EVENTS) if sid == made["held"]]
    assert [e["type"] for e in held] == ["test.appended", "turn.failed", "session.waiting"]
    assert held[1]["code"] == "worker_lost"
    assert [i for sid, i, *_ in read(new, EVENTS) if sid == made["held"]] == [0, 1, 2]
    assert read(new, SCHEDULE) == read(old, SCHEDULE)  # the slot fired before the backup is not due again
    assert (target / "workspaces" / "ses_files" / "notes.md").read_text() == "kept across the restore\n"
    # The scheduled backup the archive caught running is no process's here: it ends, and the dashboard says so.
    assert read(old, "SELECT status FROM agent_sessions_backuprun") == [("running",)]
    assert read(new, "SELECT status, error FROM agent_sessions_backuprun") == [
        ("failed", "still running when the backup this database was restored from was taken")]


def test_verify_passes_a_good_archive(source):
    env, made, archive = source
    report = manage_json(env, "backup", "--verify", str(archive))
    assert report["restored"]["lostTurnsEnded"] == 1
    assert report["counts"]["events"] == 16


def flipped(data: bytes, where: float) -> bytes:
    """`data` with one bit flipped at the first byte from `where` on where that damages it: deflate ignores a
    few bits (the padding before a stored block, after the last code), and flipping one of those leaves the
    archive the very file the backup wrote."""
    original = gzip.decompress(data)
    for at in range(int(len(data) * where), len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        try:
            same = gzip.decompress(bytes(damaged)) == original
        except (OSError, EOFError, zlib.error):
            same = False  # it no longer decompresses: damaged
        if not same:
            return bytes(damaged)
    raise AssertionError(f"no byte from {where} on changes the archive")


@pytest.mark.parametrize("where", [0.3, 0.6, 0.97])
def test_verify_catches_a_flipped_byte(source, tmp_path, where):
    env, made, archive = source
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(flipped(archive.read_bytes(), where))
    done = manage(env, "backup", "--verify", str(damaged))
    assert done.returncode == 1
    assert "damaged" in done.stderr and "use another copy" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_verify_names_the_part_that_does_not_match_its_checksum(source, tmp_path):
    """An archive re-packed whole around a changed part: the gzip stream is sound, the part's checksum is not."""
    env, made, archive = source
    changed = tmp_path / "changed.tar.gz"
    with tarfile.open(archive) as old, tarfile.open(changed, "w:gz") as new:
        for member in old.getmembers():
            data = old.extractfile(member).read()
            if member.name == "database.sqlite3":
                data = data[:5000] + bytes([data[5000] ^ 0x01]) + data[5001:]
            new.addfile(member, io.BytesIO(data))
    done = manage(env, "backup", "--verify", str(changed))
    assert done.returncode == 1
    assert "part database.sqlite3 does not match its checksum" in done.stderr
    gzip.open(changed).read()  # the stream itself is sound: the manifest caught it


def test_restore_into_a_non_empty_target_is_refused_unless_forced(source, tmp_path):
    env, made, archive = source
    target_env = state_env(tmp_path / "busy")
    manage_ok(target_env, "restore", str(archive))
    (tmp_path / "busy" / "workspaces" / "stray.txt").write_text("left over")
    refused = manage(target_env, "restore", str(archive))
    assert refused.returncode == 1
    assert "the target is not empty" in refused.stderr and "--force" in refused.stderr
    report = json.loads(manage_ok(target_env, "restore", str(archive), "--force", "--json"))
    assert report["counts"]["sessions"] == 4
    assert not (tmp_path / "busy" / "workspaces" / "stray.txt").exists()


def test_secrets_with_no_key_outside_the_state_root_refuse_a_backup(tmp_path):
    root = tmp_path / "state"
    env = state_env(root)
    fill(root, env)
    manage_ok(env, "secrets", "set", "shop", "API_TOKEN", stdin="s3cret\n")
    refused = manage(env, "backup", "--out", str(tmp_path / "b.tar.gz"))
    assert refused.returncode == 1
    assert "AGENTSITE_SECRETS_KEYS" in refused.stderr and "--allow-missing-key" in refused.stderr
    assert not (tmp_path / "b.tar.gz").exists()
    manifest = manage_json(env, "backup", "--out", str(tmp_path / "b.tar.gz"), "--allow-missing-key")
    assert manifest["secretsKey"]["allowMissingKey"] is True
    assert manifest["secretsKey"]["stateRootKey"] == str(root / "secrets.key")


def test_a_postgres_backup_restores_into_an_empty_database(source, tmp_path):
    with postgres_database(migrated=True) as source_url, postgres_database() as target_url, \
            postgres_database() as other_url:
        other = manage_json(state_env(tmp_path / "other", other_url), "restore", str(source[2]))
        assert (other["vendor"], other["convertedTo"], other["counts"]["events"]) == ("sqlite", "postgresql", 16)
        env = state_env(tmp_path / "source", source_url)
        made = fill(tmp_path / "source", env)
        archive = tmp_path / "pg.tar.gz"
        manifest = manage_json(env, "backup", "--out", str(archive))
        assert manifest["database"]["part"] == "database.pgdump" and manifest["counts"]["events"] == 16
        verified = manage_json(env, "backup", "--verify", str(archive))
        assert verified["restored"]["counts"]["sessions"] == 4
        on_sqlite = manage(state_env(tmp_path / "sqlite-side"), "backup", "--verify", str(archive))
        assert on_sqlite.returncode == 1 and "run --verify with DATABASE_URL naming one" in on_sqlite.stderr
        assert len(on_sqlite.stderr.strip().splitlines()) == 1
        target_env = state_env(tmp_path / "target", target_url)
        report = manage_json(target_env, "restore", str(archive))
        assert (report["lostTurnsEnded"], report["queuedTurnsRequeued"]) == (1, 1)
        refused = manage(target_env, "restore", str(archive))
        assert refused.returncode == 1 and "the target is not empty" in refused.stderr
        sql = EVENTS.replace("ORDER BY", "WHERE session_id = ANY(%s) ORDER BY")
        with psycopg.connect(source_url.replace("postgres://", "postgresql://")) as a, \
                psycopg.connect(target_url.replace("postgres://", "postgresql://")) as b:
            assert a.execute(sql, [made["done"]]).fetchall() == b.execute(sql, [made["done"]]).fetchall()
            assert b.execute(TURN.replace("?", "%s"), [made["turn"]]).fetchone()[0] == "failed"


def test_workspaces_pack_with_links_kept_and_sockets_left_out(tmp_path):
    folder = tmp_path / "workspaces"
    (folder / "ses_a" / "sub").mkdir(parents=True)
    (folder / "ses_a" / "sub" / "kept.txt").write_text("kept")
    (folder / "ses_a" / "link").symlink_to("sub/kept.txt")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(folder / "ses_a" / "sock"))
        packed = pack_folder(folder, tmp_path / "w.tar")
    unpack_folder(packed, tmp_path / "back")
    assert (tmp_path / "back" / "ses_a" / "sub" / "kept.txt").read_text() == "kept"
    assert (tmp_path / "back" / "ses_a" / "link").readlink() == Path("sub/kept.txt")
    assert not (tmp_path / "back" / "ses_a" / "sock").exists()


def test_migrations_this_code_does_not_know_are_named():
    assert unknown_migrations({"sessions": ["0001_initial", "9999_from_a_newer_agentsite"]}) == [
        "sessions.9999_from_a_newer_agentsite"]
