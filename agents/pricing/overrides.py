"""The operators' prices, as each process reads them: all rows, kept for a short while.

There are a few rows at most, and every priced model call asks: reading them
once every `FRESH_SECONDS` (and at once after a change saved in this process)
keeps pricing off the turn's queries. A change saved in another process is
seen by this one within that time.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime

from django.db.models.signals import post_delete, post_save

from agents.pricing.model import ModelPrice

FRESH_SECONDS = 30.0

_lock = threading.Lock()
_rows: dict[str, list[ModelPrice]] = {}
_read_at: float | None = None


def find(model_id: str, at: datetime) -> ModelPrice | None:
    """The row pricing a call of `model_id` made at `at`: the latest that took effect by then."""
    for row in _current().get(model_id, ()):  # newest first
        if row.effective_from <= at:
            return row
    return None


def _current() -> dict[str, list[ModelPrice]]:
    global _rows, _read_at
    with _lock:
        if _read_at is None or time.monotonic() - _read_at > FRESH_SECONDS:
            rows: dict[str, list[ModelPrice]] = {}
            for row in ModelPrice.objects.order_by("model", "-effective_from"):
                rows.setdefault(row.model, []).append(row)
            _rows, _read_at = rows, time.monotonic()
        return _rows


def forget(**_kwargs) -> None:
    global _read_at
    with _lock:
        _read_at = None


post_save.connect(forget, sender=ModelPrice, dispatch_uid="agents.pricing.overrides")
post_delete.connect(forget, sender=ModelPrice, dispatch_uid="agents.pricing.overrides.delete")
