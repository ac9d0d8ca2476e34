"""How an instant is written for clients and pages: ISO 8601 in UTC with a `Z`."""
from __future__ import annotations

from datetime import datetime


def iso_z(moment: datetime | None, timespec: str = "auto") -> str | None:
    """`2024-03-01T12:00:00.250000Z`; None stays None. `timespec` as `datetime.isoformat`."""
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z") if moment else None
