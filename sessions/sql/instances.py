"""Model instances from rows a written-out statement read, as the ORM would build them.

`RawQuerySet` works out, on every query, which column is which field and
which converters each needs: for the worker's two reads of every turn that
took more CPU than the statements. Here it is worked out once per model and
database: the columns in field order, and each field's converters (SQLite
hands back datetimes as text, booleans as integers, JSON as text).
"""
from __future__ import annotations

import functools
from typing import Any, Sequence, TypeVar

from django.db import connections, models

M = TypeVar("M", bound=models.Model)


@functools.cache
def _converters(model: type[models.Model], alias: str, names: tuple[str, ...]) -> tuple[tuple[int, Any, tuple], ...]:
    """(position, column, its converters) of each of `names` that has converters on database `alias`."""
    connection = connections[alias]
    found = []
    for i, name in enumerate(names):
        col = model._meta.get_field(name).get_col(model._meta.db_table)
        steps = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if steps:
            found.append((i, col, tuple(steps)))
    return tuple(found)


def converted(model: type[models.Model], alias: str, names: tuple[str, ...], row: Sequence[Any]) -> list[Any]:
    """`row`'s values of fields `names` of `model`, each as the ORM reads it."""
    connection = connections[alias]  # this thread's: the converters are given the connection that read the row
    values = list(row)
    for i, col, steps in _converters(model, alias, names):
        value = values[i]
        for convert in steps:
            value = convert(value, col, connection)
        values[i] = value
    return values


def _names(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in model._meta.concrete_fields)


@functools.cache
def columns(model: type[models.Model], table: str = "") -> str:
    """The select list of every concrete field of `model`, in field order (`table`: the alias to qualify them)."""
    qualify = f"{table}." if table else ""
    return ", ".join(f'{qualify}"{f.column}"' for f in model._meta.concrete_fields)


def instance(model: type[M], alias: str, row: Sequence[Any]) -> M:
    """`model` from a row that starts with `columns(model)` (what `from_db` makes of the ORM's own read)."""
    names = _names(model)
    return model.from_db(alias, names, converted(model, alias, names, row[:len(names)]))
