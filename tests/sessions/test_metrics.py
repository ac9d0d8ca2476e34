"""sessions.metrics.families in one process: the gauges read from the database, timer lateness,
no query for a worker's turn, and the files of processes that are gone."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.apps import apps
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.discovery import release
from sessions.metrics import families as metrics
from sessions.turn.admission import start_session, submit_message
from sessions.models import Event, EventType, Session, ToolCall, Turn
from sessions.principal import Principal
from sessions.timers.schedules import create_reminder, fire_due

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
CAROL = Principal(authenticator="bearer", principal_id="carol")


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return 0.0


def database_gauges() -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(metrics.DatabaseGauges())
    return registry


def test_queue_depth_counts_turns_handed_to_workers_not_those_queued_behind(support_agent):
    # In a test transaction nothing commits, so no worker is handed anything: the turn stays queued.
    admitted = start_session(support_agent, CAROL, "hello")
    assert sample(database_gauges(), "agentsite_queue_depth") == 1
    submit_message(admitted.session, "and then", admission=Turn.Admission.COALESCE)  # waits for its session
    assert Turn.objects.filter(session=admitted.session, status=Turn.Status.QUEUED).count() == 2
    assert sample(database_gauges(), "agentsite_queue_depth") == 1
    Turn.objects.filter(pk=admitted.turn.pk).update(status=Turn.Status.RUNNING)
    assert sample(database_gauges(), "agentsite_queue_depth") == 0


def test_approvals_pending_counts_the_calls_of_parked_turns(support_agent):
    admitted = start_session(support_agent, CAROL, "cancel it")
    turn = admitted.turn
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.AWAITING_APPROVAL)
    for n, status in enumerate((ToolCall.Status.AWAITING_APPROVAL, ToolCall.Status.AWAITING_APPROVAL,
                                ToolCall.Status.APPROVED)):
        ToolCall.objects.create(session=admitted.session, turn=turn, call_id=f"call_{n}", tool="cancel_order",
                                status=status)
    registry = database_gauges()
    assert sample(registry, "agentsite_approvals_pending") == 2
    assert sample(registry, "agentsite_queue_depth") == 0


def test_a_worker_records_a_turn_without_a_query(support_agent, django_assert_num_queries):
    started = start_session(support_agent, CAROL, "hello").session
    # As a worker holds it (engine.load_turn): read alone, with its release (read once per process, with its agent).
    session = Session.objects.get(pk=started.pk)
    session.deployment = release(session.deployment_id, support_agent.active_deployment.content_hash)
    row = ToolCall(tool="lookup_order", status=ToolCall.Status.DONE)
    before = metrics.TURNS.labels("support", "completed", "live")._value.get()
    with django_assert_num_queries(0):
        metrics.turn_ended(session, "completed", {"queueMs": 12.0, "totalMs": 80.0})
        metrics.model_called(session, "scripted:echo", 0.01, {"inputTokens": 5, "outputTokens": 3})
        metrics.model_called(session, "scripted:echo", None, None)  # unknown usage counts nothing
        metrics.tool_call_ended(session, row)
    assert metrics.TURNS.labels("support", "completed", "live")._value.get() == before + 1


def scraped(client) -> dict[tuple[str, tuple], float]:
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.content
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.content.decode()) for s in family.samples}


def total(samples: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (any model, kind or outcome)."""
    return sum(value for (found, have), value in samples.items()
               if found == name and set(labels.items()) <= set(have))


# Every family counting turns, sessions, model or tool calls, tokens or their time.
BY_PURPOSE = ("agentsite_turns_total", "agentsite_sessions_total", "agentsite_turn_duration_seconds_count",
              "agentsite_turn_duration_seconds_sum", "agentsite_turn_queue_seconds_count",
              "agentsite_model_first_token_seconds_count", "agentsite_tokens_total", "agentsite_tool_calls_total")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("purpose", ["eval", "live"])
def test_a_turn_counts_under_its_sessions_purpose_in_every_family(support_agent, local, sync_turns, purpose):
    before = scraped(local)
    body = {"message": '/call lookup_order {"order_id": "A100"}', **({"purpose": "eval"} if purpose == "eval" else {})}
    created = local.post("/support/v1/session", body, content_type="application/json")
    assert created.status_code == 201, created.content
    assert Turn.objects.get(session_id=created.json()["sessionId"]).status == Turn.Status.COMPLETED
    after = scraped(local)
    other = "live" if purpose == "eval" else "eval"
    for name in BY_PURPOSE:
        assert total(after, name, agent="support", purpose=purpose) > total(before, name, agent="support",
                                                                            purpose=purpose), name
        assert total(after, name, agent="support", purpose=other) == total(before, name, agent="support",
                                                                           purpose=other), name
    assert total(after, "agentsite_tool_calls_total", tool="lookup_order", outcome="done", purpose=purpose) == total(
        before, "agentsite_tool_calls_total", tool="lookup_order", outcome="done", purpose=purpose) + 1
    assert not [key for key in after if key[0] in BY_PURPOSE and "purpose" not in dict(key[1])]


@pytest.mark.django_db(transaction=True)
def test_an_app_made_ready_twice_still_counts_a_turn_once(support_agent, local, sync_turns):
    apps.get_app_config("agent_sessions").ready()  # as a second django.setup() in one process would
    before = scraped(local)
    created = local.post("/support/v1/session", {"message": '/call lookup_order {"order_id": "A100"}'},
                         content_type="application/json")
    assert created.status_code == 201, created.content
    after = scraped(local)

    def counted(name: str) -> float:
        return total(after, name, agent="support") - total(before, name, agent="support")

    steps = Event.objects.filter(session_id=created.json()["sessionId"], type=EventType.STEP_STARTED).count()
    assert steps >= 2  # the tool's call, then the reply: one model call each
    assert (counted("agentsite_sessions_total"), counted("agentsite_turns_total"),
            counted("agentsite_tool_calls_total"), counted("agentsite_model_first_token_seconds_count")) == (
        1, 1, 1, steps)


def test_timer_lateness_is_how_long_after_its_due_time_a_reminder_fired(support_agent):
    session = start_session(support_agent, CAROL, "hello").session
    create_reminder(session, delay="20m", prompt="Follow up.", now=T0)
    late = metrics.TIMER_LATENESS.labels("reminder")
    count, total = late._sum.get(), sum(b.get() for b in late._buckets)
    assert fire_due(now=T0 + timedelta(minutes=20, seconds=7)) == 1
    assert late._sum.get() - count == 7.0
    assert sum(b.get() for b in late._buckets) - total == 1


def a_dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def test_a_scrape_drops_live_gauges_of_processes_gone_and_serve_drops_all_their_files(tmp_path):
    dead, alive = a_dead_pid(), os.getpid()
    names = [f"counter_{dead}.db", f"histogram_{dead}.db", f"gauge_livesum_{dead}.db", f"gauge_all_{dead}.db",
             f"counter_{alive}.db", f"gauge_livesum_{alive}.db", "notes.txt"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert metrics.drop_dead_live_gauges(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(set(names) - {f"gauge_livesum_{dead}.db"})
    assert metrics.clear_dead_processes(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"counter_{alive}.db", f"gauge_livesum_{alive}.db", "notes.txt"])


def test_a_metric_that_cannot_be_recorded_fails_nothing(monkeypatch, caplog):
    class Broken:
        def labels(self, *values):
            raise OSError("No space left on device")

    monkeypatch.setattr(metrics, "HTTP_REQUESTS", Broken())
    monkeypatch.setattr(metrics, "_failed_once", set())
    metrics.request_answered("metrics", 200)
    metrics.request_answered("metrics", 200)
    assert [r.getMessage() for r in caplog.records].count(
        "metrics: request_answered could not be recorded (said once per process)") == 1


@pytest.mark.parametrize("inherited", ["/nowhere", None])
def test_every_process_writes_under_its_own_state_root_even_if_the_library_was_imported_first(tmp_path, inherited):
    """A qcluster or web process started on its own: an inherited folder is replaced, and a
    prometheus_client imported before the settings still ends up in multiprocess mode."""
    script = (
        "import prometheus_client, django, os\n"
        "django.setup()\n"
        "from sessions.metrics import families as metrics\n"
        "from prometheus_client import values\n"
        "metrics.request_answered('metrics', 200)\n"
        "print(os.environ['PROMETHEUS_MULTIPROC_DIR'], values.ValueClass._multiprocess, os.getpid())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTSITE_TEST_DB", "PROMETHEUS_MULTIPROC_DIR")}
    env.update(AGENTSITE_STATE_ROOT=str(tmp_path), DJANGO_SETTINGS_MODULE="agentsite.settings",
               **({"PROMETHEUS_MULTIPROC_DIR": inherited} if inherited else {}))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out[:2] == [str(tmp_path / "metrics"), "True"]
    assert (tmp_path / "metrics" / f"counter_{out[2]}.db").exists()


WRITER = """
import sys
from prometheus_client import Counter, Histogram
turns = Counter("agentsite_turns", "Turns.", ["agent", "status"])
lengths = Histogram("agentsite_turn_duration_seconds", "Lengths.", ["agent"], buckets=(1, 5))
for seconds in map(float, sys.argv[1:]):
    turns.labels("support", "completed").inc()
    lengths.labels("support").observe(seconds)
"""


def a_process_that_recorded(folder, *seconds: float) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    subprocess.run([sys.executable, "-c", WRITER, *map(str, seconds)], env=env, check=True)


def summed(folder) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    metrics.SummedFiles(registry, path=str(folder))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode()) for s in family.samples}


def test_dead_processes_counts_are_folded_into_one_archive_without_changing_a_sum(tmp_path):
    for seconds in ((0.5,), (2, 7), (0.2,)):
        a_process_that_recorded(tmp_path, *seconds)
    before = summed(tmp_path)
    assert before[("agentsite_turns_total", (("agent", "support"), ("status", "completed")))] == 4
    assert before[("agentsite_turn_duration_seconds_bucket", (("agent", "support"), ("le", "5.0")))] == 3
    assert metrics.fold_dead_processes(tmp_path, at_least=4) == 0  # not yet worth it
    assert metrics.fold_dead_processes(tmp_path, at_least=2) == 6
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["counter_archive.db", "histogram_archive.db"]
    assert summed(tmp_path) == before

    a_process_that_recorded(tmp_path, 10)
    after = summed(tmp_path)
    assert after[("agentsite_turns_total", (("agent", "support"), ("status", "completed")))] == 5
    assert after[("agentsite_turn_duration_seconds_count", (("agent", "support"),))] == 5
    assert after[("agentsite_turn_duration_seconds_sum", (("agent", "support"),))] == pytest.approx(19.7)
    assert metrics.fold_dead_processes(tmp_path, at_least=1) == 2
    assert summed(tmp_path) == after
    assert metrics.clear_dead_processes(tmp_path) == 2  # a new server: the archive goes too
    assert summed(tmp_path) == {}
