"""What the dashboard shows: the turns that ended in a window, counted, timed and costed.

Every query is bounded by the window on `Turn.ended_at` (the `turn_ended` index). Counts and
token sums are aggregated by the database; percentiles are not (SQLite has no percentile
function), so they are computed here over the window's `totalMs` and `queueMs` only, read
as JSON keys (never a turn's steps), newest first and at most `MAX_TIMED` rows: past that the
page says the percentiles are of the latest turns. The same queries run on SQLite and
PostgreSQL: JSON keys through `KeyTextTransform` and `Cast`, buckets through `Trunc`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone as dt_timezone
from typing import Any

from django.db.models import BigIntegerField, Count, F, FloatField, Max, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Substr, Trunc
from django.utils import timezone

from sessions.models import Turn

MAX_TIMED = 20_000  # turns whose timings are read for percentiles
SLOWEST = 15
FAILURE_GROUPS = 20
ERROR_CHARS = 160  # failures are grouped by the first characters of their error
ENDED = (Turn.Status.COMPLETED, Turn.Status.FAILED, Turn.Status.INTERRUPTED)


@dataclass(frozen=True)
class Window:
    key: str
    label: str
    span: timedelta
    trunc: str  # what the database truncates `ended_at` to
    bucket: timedelta  # a multiple of `trunc`: the database's buckets are folded into these

    def bucket_of(self, moment: datetime) -> datetime:
        """The start of the bucket holding `moment` (buckets divide a UTC day, so epoch-aligned)."""
        size = int(self.bucket.total_seconds())
        seconds = int(moment.timestamp()) // size * size
        return datetime.fromtimestamp(seconds, dt_timezone.utc)


WINDOWS = {w.key: w for w in (
    Window("1h", "last hour", timedelta(hours=1), "minute", timedelta(minutes=5)),
    Window("24h", "last 24 hours", timedelta(hours=24), "hour", timedelta(hours=1)),
    Window("7d", "last 7 days", timedelta(days=7), "hour", timedelta(hours=6)),
)}
DEFAULT_WINDOW = "24h"


def percentile(ordered: list[float], p: float) -> float | None:
    """The nearest-rank percentile of sorted values: an observed value, None for no values."""
    if not ordered:
        return None
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


@dataclass
class Spread:
    """p50 and p95 of some turns' total duration and queue wait (ms)."""

    totals: list[float] = field(default_factory=list)
    queues: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | None]:
        self.totals.sort()
        self.queues.sort()
        return {"totalP50": percentile(self.totals, 50), "totalP95": percentile(self.totals, 95),
                "queueP50": percentile(self.queues, 50), "queueP95": percentile(self.queues, 95),
                "timed": len(self.totals)}


@dataclass
class Bucket:
    start: datetime
    completed: int = 0
    failed: int = 0
    interrupted: int = 0
    spread: Spread = field(default_factory=Spread)

    @property
    def turns(self) -> int:
        return self.completed + self.failed + self.interrupted


def _ms(value: Any) -> float | None:
    """A stored millisecond value, or None when unknown (null, missing, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _json_number(key: str, column: str, kind=FloatField):
    return Cast(KeyTextTransform(key, column), kind())


def ended_between(since: datetime, until: datetime):
    # No ordering: Turn's default (created_at) would otherwise join every GROUP BY.
    return Turn.objects.filter(ended_at__gte=since, ended_at__lte=until, status__in=ENDED).order_by()


def over_time(window: Window, turns, since: datetime, now: datetime) -> dict[datetime, Bucket]:
    """Every bucket of the window, oldest first, with its turns counted by status."""
    buckets: dict[datetime, Bucket] = {}
    start = window.bucket_of(since)
    while start <= now:
        buckets[start] = Bucket(start)
        start += window.bucket
    counted = (turns.annotate(at=Trunc("ended_at", window.trunc, tzinfo=dt_timezone.utc))
               .values("at", "status").annotate(n=Count("id")))
    for row in counted:
        bucket = buckets.get(window.bucket_of(row["at"]))
        if bucket is not None:
            setattr(bucket, row["status"], getattr(bucket, row["status"]) + row["n"])
    return buckets


def by_agent(turns) -> dict[str, dict[str, Any]]:
    rows = (turns.values(agent=F("session__agent__slug"))
            .annotate(turns=Count("id"), failed=Count("id", filter=Q(status=Turn.Status.FAILED)),
                      interrupted=Count("id", filter=Q(status=Turn.Status.INTERRUPTED))).order_by("agent"))
    return {row["agent"]: {**row, "spread": Spread()} for row in rows}


def timed(turns, buckets: dict[datetime, Bucket], agents: dict[str, dict[str, Any]], window: Window,
          overall: Spread) -> int:
    """Spread the newest `MAX_TIMED` turns' durations over buckets and agents; how many were read."""
    rows = (turns.order_by("-ended_at")
            .values_list("ended_at", "session__agent__slug", KeyTextTransform("totalMs", "timings"),
                         KeyTextTransform("queueMs", "timings"))[:MAX_TIMED])
    read = 0
    for ended_at, agent, total, queue in rows:
        read += 1
        total, queue = _ms(total), _ms(queue)
        spreads = [overall, agents[agent]["spread"]] if agent in agents else [overall]
        bucket = buckets.get(window.bucket_of(ended_at))
        if bucket is not None:
            spreads.append(bucket.spread)
        for spread in spreads:
            if total is not None:
                spread.totals.append(total)
            if queue is not None:
                spread.queues.append(queue)
    return read


def tokens(turns) -> list[dict[str, Any]]:
    """Input and output tokens by agent and the model of its release, the largest total first.

    A turn whose provider reported no usage (null) counts as a turn, not as zero tokens.
    """
    rows = (turns.values(agent=F("session__agent__slug"),
                         model=KeyTextTransform("model", "session__deployment__manifest"))
            .annotate(turns=Count("id"),
                      input=Sum(_json_number("inputTokens", "usage", BigIntegerField)),
                      output=Sum(_json_number("outputTokens", "usage", BigIntegerField)),
                      reported=Count(_json_number("inputTokens", "usage", BigIntegerField))))
    found = [{**row, "model": row["model"] or "", "input": row["input"] or 0, "output": row["output"] or 0}
             for row in rows]
    found.sort(key=lambda r: (-(r["input"] + r["output"]), r["agent"], r["model"]))
    return found


def slowest(turns) -> list[dict[str, Any]]:
    """The turns with the longest `totalMs` in the window (their steps left unread)."""
    total = _json_number("totalMs", "timings")
    rows = (turns.annotate(total=total).filter(total__isnull=False).order_by(F("total").desc(), "-ended_at")
            .values("id", "session_id", "status", "error", "trace_id", "started_at", "ended_at", "total",
                    agent=F("session__agent__slug"), queue=KeyTextTransform("queueMs", "timings"))[:SLOWEST])
    return [{**row, "queue": _ms(row["queue"])} for row in rows]


def failures(turns) -> list[dict[str, Any]]:
    """Failed and interrupted turns grouped by status and the start of their error, the most first."""
    rows = (turns.filter(status__in=(Turn.Status.FAILED, Turn.Status.INTERRUPTED))
            .values("status", error_start=Substr("error", 1, ERROR_CHARS))
            .annotate(turns=Count("id"), agents=Count("session__agent", distinct=True), last=Max("ended_at"))
            .order_by("-turns", "-last")[:FAILURE_GROUPS])
    return list(rows)


def dashboard_figures(window: Window, now: datetime | None = None) -> dict[str, Any]:
    """Everything the page draws, for the turns that ended within `window` of `now`."""
    now = now or timezone.now()
    since = now - window.span
    turns = ended_between(since, now)
    buckets = over_time(window, turns, since, now)
    agents = by_agent(turns)
    overall = Spread()
    read = timed(turns, buckets, agents, window, overall)
    totals = {status: sum(getattr(b, status) for b in buckets.values()) for status in ENDED}
    return {
        "since": since, "now": now,
        "totals": {**totals, "turns": sum(totals.values())},
        "spread": overall.summary(),
        "read": read,
        "capped": read < sum(totals.values()),  # percentiles of the newest MAX_TIMED only
        "buckets": [{"start": b.start, "turns": b.turns, "completed": b.completed, "failed": b.failed,
                     "interrupted": b.interrupted, **b.spread.summary()} for b in buckets.values()],
        "agents": [{k: v for k, v in a.items() if k != "spread"} | a["spread"].summary() for a in agents.values()],
        "tokens": tokens(turns),
        "slowest": slowest(turns),
        "failures": failures(turns),
    }
