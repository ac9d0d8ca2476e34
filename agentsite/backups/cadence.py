"""When scheduled backups are taken and how many are kept, read from the environment when the settings load.

`AGENTSITE_BACKUP_SCHEDULE` is a 5-field cron expression in UTC (empty or `off`: no scheduled
backups); `AGENTSITE_BACKUP_KEEP` a count of at least 1. A value that does not parse raises
`BackupSettingInvalid` while the settings load, so every process refuses to start with a message
naming the setting, as the limits do (agentsite.limits). Nothing here imports a model: the settings
import it.
"""
from __future__ import annotations

from datetime import datetime

from croniter import CroniterBadDateError, croniter
from django.core.exceptions import ImproperlyConfigured

DEFAULT_KEEP = "7"
OFF = ("", "off", "none")


class BackupSettingInvalid(ImproperlyConfigured):
    """A scheduled backup's setting does not parse."""


def parse_schedule(name: str, value: str | None) -> str:
    """The cron expression, or "" for no scheduled backups. Raises BackupSettingInvalid naming `name`."""
    raw = " ".join((value or "").split())
    if raw.lower() in OFF:
        return ""
    if len(raw.split()) != 5 or not croniter.is_valid(raw):
        raise BackupSettingInvalid(f"{name}={value!r} is not a cron expression: write 5 fields (minute hour day "
                                   "month weekday, UTC) such as '0 3 * * *', or 'off'")
    try:
        # Valid syntax can still name no real time (February 30th): croniter finds out when asked.
        croniter(raw, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise BackupSettingInvalid(f"{name}={value!r} never fires (no such date): fix the day and month "
                                   "fields") from None
    return raw


def parse_keep(name: str, value: str | None) -> int:
    """How many scheduled archives to keep, at least 1. Raises BackupSettingInvalid naming `name`."""
    raw = (DEFAULT_KEEP if value is None else value).strip()
    if not raw.isdigit() or int(raw) < 1:
        raise BackupSettingInvalid(f"{name}={value!r} is not a count: write how many scheduled backups to keep, "
                                   f"at least 1, such as {DEFAULT_KEEP!r}")
    return int(raw)


def latest_slot(expression: str, now: datetime) -> datetime:
    """The schedule's last time at or before `now` (UTC in, UTC out)."""
    after = croniter(expression, now).get_next(datetime)
    return croniter(expression, after).get_prev(datetime)
