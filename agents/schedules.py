"""Schedules: `agent/schedules/<id>.md` (cron front matter; the body is a task
prompt) and `agent/schedules/<id>.py` (`schedule = Schedule(cron=..., run=...)`).
Cron is 5 fields in UTC with minute granularity, validated at discovery."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import frontmatter
from croniter import CroniterBadDateError, croniter

from agents.definitions import Schedule
from agents.modules import find_in_file

SCHEDULE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class LoadedSchedule:
    id: str
    kind: str  # "markdown" | "handler"
    cron: str
    title: str
    prompt: str = ""
    run: Callable[[Any], Any] | None = None


def cron_problem(expression: Any) -> str | None:
    """Why `expression` is not a 5-field cron expression, or None."""
    if not isinstance(expression, str) or not expression.strip():
        return "set `cron:` to a 5-field expression such as '*/15 * * * *' (minute hour day month weekday, UTC)"
    if len(expression.split()) != 5:
        return f"cron {expression!r} must have exactly 5 fields (minute hour day month weekday, UTC)"
    if not croniter.is_valid(expression):
        return f"cron {expression!r} is not a valid cron expression"
    try:
        # Valid syntax can still name no real time (February 30th); croniter
        # only finds out when asked for the next firing.
        croniter(expression, datetime.now(timezone.utc)).get_next(datetime)
    except CroniterBadDateError:
        return f"cron {expression!r} never fires (no such date): fix the day and month fields"
    return None


def next_after(expression: str, moment: datetime) -> datetime:
    """The first firing of `expression` strictly after `moment` (UTC in, UTC out)."""
    return croniter(expression, moment).get_next(datetime)


def load_schedules(folder: Path, namespace: str, problems: list[tuple[str, str]]) -> dict[str, LoadedSchedule]:
    schedules: dict[str, LoadedSchedule] = {}
    if not folder.is_dir():
        return schedules
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")) or path.name == "__pycache__":
            continue
        rel = f"agent/schedules/{path.name}"
        if not path.is_file() or path.suffix not in (".md", ".py"):
            problems.append((rel, "schedules are <id>.md (cron front matter + prompt) or <id>.py (schedule = Schedule(...))"))
            continue
        if not SCHEDULE_ID.match(path.stem):
            problems.append((rel, "rename it: schedule ids are lowercase letters, digits, '-' and '_'"))
            continue
        if path.stem in schedules:
            problems.append((rel, f"schedule {path.stem!r} is defined twice: keep the .md or the .py"))
            continue
        loaded = _markdown(path, rel, problems) if path.suffix == ".md" else _handler(path, rel, namespace, problems)
        if loaded:
            schedules[loaded.id] = loaded
    return schedules


def _markdown(path: Path, rel: str, problems: list[tuple[str, str]]) -> LoadedSchedule | None:
    try:
        post = frontmatter.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:
        problems.append((rel, f"cannot read the front matter: {exc}"))
        return None
    if problem := cron_problem(post.metadata.get("cron")):
        problems.append((rel, problem))
        return None
    if not post.content.strip():
        problems.append((rel, "empty body: write the task prompt below the front matter"))
        return None
    title = str(post.metadata.get("title") or path.stem)
    return LoadedSchedule(path.stem, "markdown", str(post.metadata["cron"]).strip(), title, prompt=post.content.strip())


def _handler(path: Path, rel: str, namespace: str, problems: list[tuple[str, str]]) -> LoadedSchedule | None:
    schedules = find_in_file(path, f"{namespace}.schedules.{path.stem.replace('-', '_')}", Schedule,
                             lambda message: problems.append((rel, message)), name="schedule")
    if schedules is None:
        return None
    if not schedules:
        problems.append((rel, "define `schedule = Schedule(cron=..., run=handler)` (from agents.sdk import Schedule)"))
        return None
    found = schedules[0]
    if problem := cron_problem(found.cron):
        problems.append((rel, problem))
        return None
    if not callable(found.run):
        problems.append((rel, "Schedule(run=...) must be a function taking one argument (the schedule context)"))
        return None
    return LoadedSchedule(path.stem, "handler", found.cron.strip(), found.title or path.stem, run=found.run)
