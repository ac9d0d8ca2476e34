"""Prometheus metrics of the server, summed over all its processes.

Every process writes its own files under `settings.METRICS_DIR` (prometheus_client's
multiprocess mode, switched on by `PROMETHEUS_MULTIPROC_DIR`, which the settings
set before anything imports the library), and a scrape of any web process reads
them all (`channels_app.metrics`): counters and histograms of every web and worker
process, and of workers django-q2 replaced since the server started, so counters
never go backwards. What is recorded rides on what the code already holds where
it happens (a settling turn's timings, a model call's usage, the release's agent):
no query is made for a metric, except the three gauges read from the database at
scrape time (`DatabaseGauges`), and a settle of a turn whose session came without
its agent (a lost worker's turn, a parked direct call). Recording never raises
(`never_fails`): a metric is not worth a failed turn.

Dead processes: django-q2's sentinel calls `mark_process_dead` itself when it
replaces a worker (`Sentinel.reincarnate`, whenever `PROMETHEUS_MULTIPROC_DIR`
is set), which drops that worker's live gauges and keeps its counters. Nothing
does that for a web process another process manager restarted, so a scrape also
drops live-gauge files of processes that are gone (`drop_dead_live_gauges`) and
folds their counters and histograms into one archive per kind (`fold_dead_processes`),
and `serve` clears every file of processes gone at its start (`clear_dead_processes`).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator, ParamSpec

from django.conf import settings
from django.db import DatabaseError
from django.db.models import F
from prometheus_client import Counter, Gauge, Histogram, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from agents.models import Deployment
from sessions.models import BackupRun, Session, ToolCall, Turn
from sessions.turn.usage import Usage

log = logging.getLogger(__name__)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and not values.ValueClass._multiprocess:
    # Imported before the settings set the folder (a library that imports it early): pick the
    # multiprocess value class now, as the library would have, for every metric made from here on.
    values.ValueClass = values.get_value_class()

# Every family that counts sessions, turns, model or tool calls, tokens or their time carries `purpose`:
# `eval` for an eval run's session, `live` for every other, so regression runs never pass for traffic.
TURNS = Counter("agentsite_turns", "Turns that ended, by agent, how they ended (completed, failed, interrupted) "
                "and the session's purpose (`eval` for an eval run's, else `live`).", ["agent", "status", "purpose"])
SESSIONS = Counter("agentsite_sessions", "Sessions started, by agent and purpose (`eval` for an eval run's, "
                   "else `live`).", ["agent", "purpose"])
TURN_DURATION = Histogram(
    "agentsite_turn_duration_seconds", "A turn's length, from its creation to its settle (parked time included), "
    "by agent and purpose.", ["agent", "purpose"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600))
TURN_QUEUE = Histogram(
    "agentsite_turn_queue_seconds", "A turn's wait for a worker (after an approval, its second wait included), "
    "by agent and purpose.", ["agent", "purpose"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
FIRST_TOKEN = Histogram(
    "agentsite_model_first_token_seconds", "A model call's time to its first output, by agent, model and purpose.",
    ["agent", "model", "purpose"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60))
TOKENS = Counter("agentsite_tokens", "Tokens the providers reported, by kind (input, output, cache_read, "
                 "cache_write) and purpose; calls whose usage is unknown count nothing.",
                 ["agent", "model", "kind", "purpose"])
COST = Counter("agentsite_cost_usd", "US dollars the model calls cost (agents.pricing), by agent and model; "
               "calls whose price is unknown count nothing here and one each in agentsite_unpriced_calls.",
               ["agent", "model"])
UNPRICED = Counter("agentsite_unpriced_calls", "Model calls whose model has no known price, by agent and model.",
                   ["agent", "model"])
TOOL_CALLS = Counter("agentsite_tool_calls", "Tool calls a model loop ran or had denied, by outcome (done, failed, "
                     "denied, interrupted, stubbed) and purpose.", ["agent", "tool", "outcome", "purpose"])
STREAMS_OPEN = Gauge("agentsite_streams_open", "Event streams open now, by transport (websocket, sse, ndjson).",
                     ["transport"], multiprocess_mode="livesum")
TIMER_LATENESS = Histogram(
    "agentsite_timer_lateness_seconds", "How late a schedule or reminder fired after its due time.",
    ["kind"], buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600))
HTTP_REQUESTS = Counter("agentsite_http_requests", "HTTP requests answered, by the URL pattern they matched "
                        "(`unmatched` for none) and status code.", ["route", "status"])
AUTH_FAILURES = Counter("agentsite_auth_failures", "Failed logins and refused bearer tokens, by surface (`login`, "
                        "`admin_login`, `bearer` over HTTP, `websocket`).", ["surface"])
AUTH_LOCKED_OUT = Counter("agentsite_auth_locked_out", "Logins and bearer tokens refused with 429 after too many "
                          "failures, by surface and by the limit that was spent (`account`, `address`).",
                          ["surface", "limit"])
BACKUP_FAILURES = Counter("agentsite_backup_failures", "Scheduled backups that failed (the error is on the "
                          "dashboard and in the run's row).")

TOKEN_KINDS = (("inputTokens", "input"), ("outputTokens", "output"), ("cacheReadTokens", "cache_read"),
               ("cacheWriteTokens", "cache_write"))
UNMATCHED = "unmatched"


def agent_of(session: Session) -> str:
    """The session's agent's slug, from what came loaded with it.

    A worker's session carries its release (`agents.discovery.release`), read with its
    agent once per process; anything else reads the agent once per session object.
    """
    if Session.deployment.is_cached(session):
        deployment = session.deployment
        if Deployment.agent.is_cached(deployment):
            return deployment.agent.slug
    return session.agent.slug


def purpose_of(session: Session) -> str:
    """The session's purpose as a label: "eval" or "live", so the label's values stay two."""
    return "eval" if session.run_options.purpose == "eval" else "live"


def _seconds(timings: dict[str, Any], key: str) -> float | None:
    value = timings.get(key)
    return value / 1000 if isinstance(value, (int, float)) else None


# --- recording: one call where each thing happens ----------------------------

_P = ParamSpec("_P")
_failed_once: set[str] = set()


def never_fails(record: Callable[_P, None]) -> Callable[_P, None]:
    """A metric that cannot be recorded (its folder gone, a full disk) must not fail the turn,
    the request or the stream that records it: said once per process, then dropped."""

    @functools.wraps(record)
    def recorded(*args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            record(*args, **kwargs)
        except Exception:
            if record.__name__ not in _failed_once:
                _failed_once.add(record.__name__)
                log.exception("metrics: %s could not be recorded (said once per process)", record.__name__)

    return recorded


@never_fails
def turn_ended(session: Session, status: str, timings: dict[str, Any] | None) -> None:
    """A turn settled (`lifecycle.settle`): its outcome, and its length and queue wait from its timings."""
    agent, purpose = agent_of(session), purpose_of(session)
    TURNS.labels(agent, status, purpose).inc()
    if timings:
        if (total := _seconds(timings, "totalMs")) is not None:
            TURN_DURATION.labels(agent, purpose).observe(total)
        if (queue := _seconds(timings, "queueMs")) is not None:
            TURN_QUEUE.labels(agent, purpose).observe(queue)


@never_fails
def session_started(session: Session) -> None:
    """A session was created (`admission.start_session`, after commit)."""
    SESSIONS.labels(agent_of(session), purpose_of(session)).inc()


@never_fails
def model_called(session: Session, model: str, first_output_seconds: float | None, usage: Usage) -> None:
    """One model call ended (its observer, `observer.Counted`): its time to first output and its tokens."""
    agent, purpose = agent_of(session), purpose_of(session)
    if first_output_seconds is not None:
        FIRST_TOKEN.labels(agent, model, purpose).observe(max(first_output_seconds, 0.0))
    if usage:  # None: the provider reported nothing, which is not zero
        for key, kind in TOKEN_KINDS:
            if count := usage.get(key):
                TOKENS.labels(agent, model, kind, purpose).inc(count)
        if usage.get("costUsd") is not None:
            COST.labels(agent, model).inc(usage["costUsd"])
        elif usage.get("unpricedCalls"):
            UNPRICED.labels(agent, model).inc(usage["unpricedCalls"])


@never_fails
def tool_call_ended(session: Session, row: ToolCall) -> None:
    """A call's `action.result` was emitted by a model loop (`observer.Counted`): count it by its outcome."""
    outcome = "stubbed" if row.stubbed else row.status
    TOOL_CALLS.labels(agent_of(session), row.tool, outcome, purpose_of(session)).inc()


@never_fails
def timer_fired(kind: str, lateness_seconds: float) -> None:
    """A schedule's or reminder's firing was claimed (`timers.fire_due`) this long after its due time."""
    TIMER_LATENESS.labels(kind).observe(max(lateness_seconds, 0.0))


@never_fails
def stream_opened(transport: str) -> None:
    STREAMS_OPEN.labels(transport).inc()


@never_fails
def stream_closed(transport: str) -> None:
    STREAMS_OPEN.labels(transport).dec()


@never_fails
def request_answered(route: str | None, status: int) -> None:
    """An HTTP request was answered: by its URL pattern, never its path, so the labels stay few."""
    HTTP_REQUESTS.labels(route if route is not None else UNMATCHED, str(status)).inc()


@never_fails
def auth_failed(surface: str) -> None:
    """A password or a bearer token was refused (`channels_app.lockout.failed`)."""
    AUTH_FAILURES.labels(surface).inc()


@never_fails
def auth_locked_out(surface: str, limit: str) -> None:
    """An attempt was refused unchecked, its client over a failure limit (`channels_app.lockout.check`)."""
    AUTH_LOCKED_OUT.labels(surface, limit).inc()


@never_fails
def backup_failed() -> None:
    """A scheduled backup's run failed (`agentsite.backups.scheduled`)."""
    BACKUP_FAILURES.inc()


# --- read at scrape time -----------------------------------------------------


def waiting_for_worker() -> int:
    """Turns handed to the workers and not yet claimed: queued and their session's active turn.

    Turns queued behind another turn of their session, or under the running-turn cap,
    wait for their session or a slot, not for a worker. One count over the queued turns
    (the `turn_recovery` index leads with the status), each joined to its session by key.
    """
    return Turn.objects.filter(status=Turn.Status.QUEUED, session__active_turn=F("pk")).count()


def approvals_pending() -> int:
    """Tool calls waiting for a person's decision. From the parked turns (their status is
    indexed) to their calls, rather than a scan of every call ever made for its status."""
    return ToolCall.objects.filter(turn__status=Turn.Status.AWAITING_APPROVAL,
                                   status=ToolCall.Status.AWAITING_APPROVAL).count()


def last_backup_success() -> float | None:
    """When the newest successful scheduled backup finished, as Unix time; None before the first.

    Read from its row, not kept in a process's gauge file: the worker that took it may be on another
    host or gone, and a restarted server clears the files of gone processes, while an alert on this
    gauge's age must hold across both."""
    run = BackupRun.last_success()
    return run.finished_at.timestamp() if run and run.finished_at else None


class DatabaseGauges(Collector):
    """`agentsite_queue_depth`, `agentsite_approvals_pending` and `agentsite_backup_last_success_timestamp_seconds`,
    read from the database at each scrape (so the same on every web process and host, whoever wrote them)."""

    def describe(self) -> list:
        return []  # nothing to read when registered

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            depth, pending, backup = waiting_for_worker(), approvals_pending(), last_backup_success()
        except DatabaseError:  # the rest of the scrape is still worth answering
            log.exception("metrics: the database gauges could not be read")
            return
        yield GaugeMetricFamily("agentsite_queue_depth", "Turns queued for a worker and not yet claimed.", value=depth)
        yield GaugeMetricFamily("agentsite_approvals_pending", "Tool calls waiting for a person to approve or deny them, "
                                "or to answer the model's question.",
                                value=pending)
        if backup is not None:  # no sample before the first success: `absent()` says so
            yield GaugeMetricFamily("agentsite_backup_last_success_timestamp_seconds", "When the last scheduled "
                                    "backup that succeeded finished (Unix time).", value=backup)


# --- the files, and those of processes that are gone -------------------------

# The sums of counters and histograms of processes that are gone: `counter_archive.db`, `histogram_archive.db`.
ARCHIVE = "archive"
# Dead processes' files folded into the archive once there are this many of a kind: a scrape reads
# every file, so without folding a server whose workers are replaced reads more at each scrape.
FOLD_AFTER = 20
FOLDED_TYPES = ("counter", "histogram")


def metrics_dir() -> Path:
    return Path(settings.METRICS_DIR)


def _pid_of(name: str) -> int | None:
    """The process id in a metrics file's name (`counter_1234.db`, `gauge_livesum_1234.db`)."""
    if not name.endswith(".db"):
        return None
    pid = name[:-3].rpartition("_")[2]
    return int(pid) if pid.isascii() and pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


@contextlib.contextmanager
def _files_lock(folder: Path, *, exclusive: bool) -> Iterator[bool]:
    """Readers of the files share it; folding takes it alone, without waiting (False: someone else has it).

    So no scrape sees a dead process's counts twice (in its file and in the archive) or not at
    all: the archive is replaced and the folded files deleted while no one reads.
    """
    with open(folder / ".lock", "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SummedFiles(MultiProcessCollector):
    """Every process's files summed (prometheus_client's collector), read under the folder's shared lock."""

    def collect(self):
        with _files_lock(Path(self._path), exclusive=False):
            return super().collect()


def _remove_dead(folder: Path, live_gauges_only: bool) -> int:
    removed = 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    for name in names:
        pid = _pid_of(name)
        if live_gauges_only:
            gone = name.startswith("gauge_live") and pid is not None and not _alive(pid)
        else:
            gone = name.endswith(f"_{ARCHIVE}.db") or (pid is not None and not _alive(pid))
        if not gone:
            continue
        try:
            (folder / name).unlink()
            removed += 1
        except FileNotFoundError:  # another scrape took it first
            pass
    return removed


def drop_dead_live_gauges(folder: Path | None = None) -> int:
    """What `mark_process_dead` does, for every process that is gone: its live gauges
    (streams open) no longer count; its counters and histograms stay."""
    return _remove_dead(folder or metrics_dir(), live_gauges_only=True)


def clear_dead_processes(folder: Path | None = None) -> int:
    """Every file of processes that are gone, and the archive (`serve` at its start: a new server counts from zero)."""
    return _remove_dead(folder or metrics_dir(), live_gauges_only=False)


def fold_dead_processes(folder: Path | None = None, at_least: int = FOLD_AFTER) -> int:
    """Sum the counters and histograms of processes that are gone into the archive and delete their files.

    1. Take the folder's lock alone, or leave it to whoever holds it.
    2. For each kind with `at_least` dead processes' files: merge them and the archive, as
       stored (histogram buckets not yet cumulative), into a new file.
    3. Put it in the archive's place (a rename), then delete the files it holds.
    Returns how many files were folded.
    """
    folder = folder or metrics_dir()
    folded = 0
    with _files_lock(folder, exclusive=True) as alone:
        if not alone:
            return 0
        for kind in FOLDED_TYPES:
            dead = [p for p in folder.glob(f"{kind}_*.db")
                    if (pid := _pid_of(p.name)) is not None and not _alive(pid)]
            if len(dead) < at_least:
                continue
            archive = folder / f"{kind}_{ARCHIVE}.db"
            merged = MultiProcessCollector.merge([str(p) for p in [*dead, archive] if p.exists()], accumulate=False)
            written = folder / f"{kind}_{ARCHIVE}.new"  # not *.db: no reader globs it
            written.unlink(missing_ok=True)
            out = MmapedDict(str(written))
            try:
                for metric in merged:
                    for sample in metric.samples:
                        key = mmap_key(metric.name, sample.name, list(sample.labels), list(sample.labels.values()),
                                       metric.documentation)
                        out.write_value(key, sample.value, 0.0)
            finally:
                out.close()
            os.replace(written, archive)
            for path in dead:
                path.unlink(missing_ok=True)
            folded += len(dead)
    return folded
