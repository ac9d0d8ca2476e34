"""Conditional updates written out for the hottest transitions.

On this stack the ORM's building of an `.update()` costs a worker more CPU
than the database spends running it (about 0.3 to 0.5 ms against well under
0.1). These build the same statement directly; every value still goes
through its field's own adaptation (JSON, datetimes, foreign keys), so
what is stored is what the ORM would store.
"""
from __future__ import annotations

from typing import Any

from django.db import connection, models


def update_where(model: type[models.Model], where: dict[str, Any], values: dict[str, Any]) -> int:
    """UPDATE model SET values WHERE every `where` field equals its value (None: IS NULL); the rows changed."""
    meta, quote = model._meta, connection.ops.quote_name
    assignments, conditions, params = [], [], []
    for name, value in values.items():
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
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
