"""Conditional updates and inserts of one model's rows, written out for the hottest transitions
(and the spending ledger's add-or-insert, which every turn's settle makes).

On this stack the ORM's building of an `.update()` or a `save()` costs more
CPU than the database spends running it (about 0.3 to 0.5 ms against well
under 0.1). These build the same statement directly; every value still goes
through its field's own adaptation (JSON, datetimes, foreign keys).

This module imports no model: the models' own transitions call it.
"""
from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, models, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce

from sessions.sql import written_out


def _update_where_orm(model: type[models.Model], where: dict[str, Any], values: dict[str, Any],
                      first: dict[str, Any] | None = None) -> int:
    kept = {name: Coalesce(F(name), Value(value, output_field=model._meta.get_field(name)))
            for name, value in (first or {}).items()}
    return model._base_manager.filter(**where).update(**values, **kept)


@written_out(orm=_update_where_orm)
def update_where(model: type[models.Model], where: dict[str, Any], values: dict[str, Any],
                 first: dict[str, Any] | None = None) -> int:
    """UPDATE model SET values WHERE every `where` field equals its value (None: IS NULL); the rows changed.

    `first` fields are set only where they are still NULL (COALESCE): a resumed turn keeps its first start.
    """
    connection = connections[DEFAULT_DB_ALIAS]  # resolved once: each use of the proxy looks it up again
    meta, quote = model._meta, connection.ops.quote_name
    assignments, conditions, params = [], [], []
    for name, value in values.items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    for name, value in (first or {}).items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = COALESCE({quote(field.column)}, %s)")
        params.append(field.get_db_prep_save(value, connection))
    for name, value in where.items():
        field = meta.get_field(name)
        if value is None:
            conditions.append(f"{quote(field.column)} IS NULL")
        else:
            conditions.append(f"{quote(field.column)} = %s")
            params.append(field.get_db_prep_value(value, connection, prepared=False))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}",
                       params)
        return cursor.rowcount


def _insert_row_orm(instance: models.Model) -> None:
    instance.save(force_insert=True)


@written_out(orm=_insert_row_orm)
def insert_row(instance: models.Model) -> None:
    """INSERT the new `instance` as `save(force_insert=True)` would, for a model with a preset primary key.

    Fields' `pre_save` runs (auto_now and auto_now_add stamp the instance) and
    each value is adapted by its field. No signals are sent: the hot models
    this is used for have no receivers.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    meta, quote = instance._meta, connection.ops.quote_name
    fields = [f for f in meta.local_concrete_fields if not getattr(f, "generated", False)]
    params = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
                       f"VALUES ({', '.join(['%s'] * len(fields))})", params)
    instance._state.adding = False
    instance._state.db = connection.alias


def _add_or_insert_orm(model: type[models.Model], key: dict[str, Any], amounts: dict[str, Any]) -> None:
    added = {name: F(name) + amount for name, amount in amounts.items()}
    if model._base_manager.filter(**key).update(**added):
        return
    try:
        with transaction.atomic():  # a savepoint: another process may have made the row since
            model._base_manager.create(**key, **amounts)
    except IntegrityError:
        model._base_manager.filter(**key).update(**added)


@written_out(orm=_add_or_insert_orm)
def add_or_insert(model: type[models.Model], key: dict[str, Any], amounts: dict[str, Any]) -> None:
    """Add `amounts` to the row whose unique `key` fields hold those values, made with them if missing.

    One INSERT ... ON CONFLICT DO UPDATE (SQLite and PostgreSQL alike) where the ORM needs an UPDATE,
    and on a new row an INSERT in a savepoint. Fields in neither take their defaults on a new row.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    meta, quote = model._meta, connection.ops.quote_name
    given = {**key, **amounts}
    fields = [f for f in meta.local_concrete_fields if not f.primary_key]
    params = [f.get_db_prep_save(given[f.attname] if f.attname in given else given.get(f.name, f.get_default()),
                                 connection) for f in fields]
    added = ", ".join(f"{quote(c)} = {quote(meta.db_table)}.{quote(c)} + excluded.{quote(c)}"
                      for c in (meta.get_field(name).column for name in amounts))
    conflict = ", ".join(quote(meta.get_field(name).column) for name in key)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
                       f"VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT ({conflict}) DO UPDATE SET {added}",
                       params)
