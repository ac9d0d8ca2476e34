"""The task queue's statements (django-q2's `OrmQ` table), for sessions.plumbing.broker.DoorbellORM.

The same rows and conditions as django-q2's stock ORM broker; written out
because its query building, and `QuerySet.delete()`'s collector above all,
cost several times what the database spends. Each takes the connection the
broker resolved (django-q2's `Q_CLUSTER["orm"]` alias).
"""
from __future__ import annotations

import functools
from datetime import datetime

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django_q.models import OrmQ

from sessions.sql import written_out

_LOCK = OrmQ._meta.get_field("lock")


def _enqueue_orm(conn: BaseDatabaseWrapper, key: str, payload: str, lock: datetime) -> int:
    return OrmQ.objects.using(conn.alias).create(key=key, payload=payload, lock=lock).pk


@written_out(orm=_enqueue_orm)
def enqueue(conn: BaseDatabaseWrapper, key: str, payload: str, lock: datetime) -> int:
    """A new task row; its id."""
    sql = _statements(conn.vendor, conn.alias)
    with conn.cursor() as cursor:
        params = [key, payload, _LOCK.get_db_prep_value(lock, conn)]
        if conn.features.can_return_columns_from_insert:
            cursor.execute(f"{sql.insert} RETURNING {sql.id}", params)
            return cursor.fetchone()[0]
        cursor.execute(sql.insert, params)
        return conn.ops.last_insert_id(cursor, OrmQ._meta.db_table, "id")


def _ready_orm(conn: BaseDatabaseWrapper, key: str, now: datetime, limit: int) -> list[tuple[int, str]]:
    return list(OrmQ.objects.using(conn.alias).filter(key=key, lock__lt=now).values_list("id", "payload")[:limit])


@written_out(orm=_ready_orm)
def ready(conn: BaseDatabaseWrapper, key: str, now: datetime, limit: int) -> list[tuple[int, str]]:
    """Up to `limit` tasks of queue `key` whose lock is before `now`: (id, payload)."""
    with conn.cursor() as cursor:
        cursor.execute(_statements(conn.vendor, conn.alias).ready, [key, _LOCK.get_db_prep_value(now, conn), limit])
        return [tuple(row) for row in cursor.fetchall()]


def _claim_orm(conn: BaseDatabaseWrapper, pk: int, lock: datetime, now: datetime) -> bool:
    return bool(OrmQ.objects.using(conn.alias).filter(id=pk, lock__lt=now).update(lock=lock))


@written_out(orm=_claim_orm)
def claim(conn: BaseDatabaseWrapper, pk: int, lock: datetime, now: datetime) -> bool:
    """Move the task's lock to `lock` if it is still before `now` (no other dequeuer took it)."""
    with conn.cursor() as cursor:
        cursor.execute(_statements(conn.vendor, conn.alias).claim,
                       [_LOCK.get_db_prep_value(lock, conn), pk, _LOCK.get_db_prep_value(now, conn)])
        return cursor.rowcount == 1


def _delete_orm(conn: BaseDatabaseWrapper, pk: int) -> None:
    OrmQ.objects.using(conn.alias).filter(pk=pk).delete()


@written_out(orm=_delete_orm)
def delete(conn: BaseDatabaseWrapper, pk: int) -> None:
    with conn.cursor() as cursor:
        cursor.execute(_statements(conn.vendor, conn.alias).delete, [pk])


class _Statements:
    def __init__(self, quote):
        table, self.id = quote(OrmQ._meta.db_table), quote("id")
        key, payload, lock = quote("key"), quote("payload"), quote("lock")
        self.insert = f"INSERT INTO {table} ({key}, {payload}, {lock}) VALUES (%s, %s, %s)"
        self.ready = f"SELECT {self.id}, {payload} FROM {table} WHERE {key} = %s AND {lock} < %s LIMIT %s"
        self.claim = f"UPDATE {table} SET {lock} = %s WHERE {self.id} = %s AND {lock} < %s"
        self.delete = f"DELETE FROM {table} WHERE {self.id} = %s"


@functools.lru_cache(maxsize=8)
def _statements(vendor: str, alias: str) -> _Statements:
    return _Statements(connections[alias].ops.quote_name)
