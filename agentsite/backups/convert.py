"""An archive's database copied into a database of the other vendor (a SQLite archive into PostgreSQL and back).

The archive's database comes up where its own vendor reads it (the SQLite part as a file, a pg_dump in a
scratch database dropped afterwards) under a second connection alias; both sides are migrated to this
code's schema; then every table (LEFT_OUT_APPS aside) is read through the ORM (values converted by their fields)
and written to the target in batches of plain INSERTs, primary keys kept. Not `bulk_create`: it runs
`pre_save`, which would restamp every auto_now field. One transaction: Django declares foreign keys
DEFERRABLE INITIALLY DEFERRED on both vendors, so the tables go in any order (a session and its active
turn point at each other) and the keys are checked at commit.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.apps import apps
from django.core.management.color import no_style
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction

from agents.management.database import migrate_if_needed
from agentsite.backups import postgres
from agentsite.backups.archive import BackupError

ARCHIVE = "archive"
JSON_NULL = models.Value(None, models.JSONField())
BATCH = 2000
NO_SERVER = ("a PostgreSQL archive is read from a scratch database: run the restore with DATABASE_URL naming a "
             "PostgreSQL server where this user may create one, and --to the SQLite target")
# Every installed app's tables but django.contrib.sessions' (logins: people sign in again). Not models, so
# not copied either: django_migrations (the target's own migrate wrote it) and the cache tables
# (`createcachetable`'s). Content types and permissions are copied over the ones the target's migrate
# made, so every key to them stays right.
LEFT_OUT_APPS = ("sessions",)


def copied_models() -> list[type[models.Model]]:
    """The models whose tables are copied: concrete, managed, many-to-many tables included."""
    return [model for model in apps.get_models(include_auto_created=True)
            if model._meta.app_label not in LEFT_OUT_APPS and model._meta.managed and not model._meta.proxy]


@contextlib.contextmanager
def archive_database(part: Path, vendor: str, server: dict[str, Any] | None) -> Iterator[str]:
    """The database of the archive's `part`, open under the ARCHIVE alias; a PostgreSQL dump is restored into
    a scratch database on `server` (a DATABASES entry), dropped afterwards."""
    if vendor == "sqlite":
        with _alias({"ENGINE": "django.db.backends.sqlite3", "NAME": str(part)}):
            yield ARCHIVE
        return
    if server is None:
        raise BackupError(NO_SERVER)
    with postgres.scratch_database("agentsite_restore", "to read the archive in", server) as name:
        scratch = {**server, "NAME": name, "OPTIONS": {k: v for k, v in server.get("OPTIONS", {}).items()
                                                      if k != "pool"}}
        postgres.put_back(part, scratch)
        with _alias(scratch):
            yield ARCHIVE


@contextlib.contextmanager
def _alias(config: dict[str, Any]) -> Iterator[None]:
    both = {DEFAULT_DB_ALIAS: {**connections.settings[DEFAULT_DB_ALIAS]}, ARCHIVE: config}
    connections.settings[ARCHIVE] = connections.configure_settings(both)[ARCHIVE]  # Django's defaults filled in
    try:
        yield
    finally:
        connections[ARCHIVE].close()
        del connections[ARCHIVE]
        del connections.settings[ARCHIVE]


def copy_database(part: Path, vendor: str, server: dict[str, Any] | None) -> dict[str, Any]:
    """Fill the (empty) default database from the archive's database `part` of the other `vendor`.

    1. The archive's database up under its alias, migrated forward; the target migrated too.
    2. In one transaction on the target: the rows its migrate made deleted, every table copied.
    3. The target's sequences moved past the copied keys (PostgreSQL; SQLite's follow the rows).
    """
    started = time.monotonic()
    with archive_database(part, vendor, server) as source:
        migrated = migrate_if_needed(source)
        migrate_if_needed()
        target = connections[DEFAULT_DB_ALIAS]
        copied = copied_models()
        rows = {}
        with transaction.atomic(using=DEFAULT_DB_ALIAS), target.cursor() as cursor:
            for model in copied:
                cursor.execute(f"DELETE FROM {target.ops.quote_name(model._meta.db_table)}")
            for model in copied:
                rows[model._meta.label] = copy_table(model, source, DEFAULT_DB_ALIAS)
            for sql in target.ops.sequence_reset_sql(no_style(), copied):
                cursor.execute(sql)
    return {"migrated": migrated, "tables": len(copied), "rows": sum(rows.values()),
            "seconds": round(time.monotonic() - started, 3)}


def copy_table(model: type[models.Model], source: str, target: str) -> int:
    """Copy every row of `model` from `source` to `target` (connection aliases) in batches; how many."""
    fields = [f for f in model._meta.local_concrete_fields if not getattr(f, "generated", False)]
    connection = connections[target]
    quote = connection.ops.quote_name
    batch = max(1, min(BATCH, connection.ops.bulk_batch_size(fields, [None] * BATCH)))
    head = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) VALUES ")
    one = f"({', '.join(['%s'] * len(fields))})"
    read = (model._base_manager.using(source).order_by("pk").values_list(*(f.attname for f in fields))
            .iterator(chunk_size=batch))
    count, pending = 0, []
    # A JSON column that cannot be NULL read as None held JSON `null` (a stored value of None): written as
    # such, not as SQL NULL, which the column refuses. A nullable one's None is SQL NULL, as Django saves it.
    json_null = [isinstance(f, models.JSONField) and not f.null for f in fields]
    with connection.cursor() as cursor:
        for row in read:
            pending.append([f.get_db_prep_save(JSON_NULL if value is None and keep else value, connection)
                            for f, value, keep in zip(fields, row, json_null)])
            if len(pending) == batch:
                count += _insert(cursor, head, one, pending)
                pending = []
        if pending:
            count += _insert(cursor, head, one, pending)
    return count


def _insert(cursor, head: str, one: str, rows: list[list[Any]]) -> int:
    cursor.execute(head + ", ".join([one] * len(rows)), [value for row in rows for value in row])
    return len(rows)
