"""Handing a session's next turn to the worker process that ran its last one (sessions.turn.affinity):
who the keeper is, and what becomes of the turn when the keeper takes it, ignores it, or is not there."""
from __future__ import annotations

import os
import subprocess
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from sessions.eventlog import doorbell
from sessions.models import Turn
from sessions.plumbing.processes import host_id, process_id
from sessions.turn import affinity

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def elsewhere():
    """A live process of this machine, standing in for another worker."""
    process = subprocess.Popen(["sleep", "60"])
    yield process.pid
    process.kill()
    process.wait()


@pytest.fixture
def follow_up(local, support_agent, sync_turns, settings, tmp_path):
    """A session whose first turn completed, and its follow-up claimed by this process."""
    settings.STATE_ROOT = tmp_path
    response = local.post("/support/v1/session", {"message": "hello"}, content_type="application/json")
    assert response.status_code == 201, response.content
    session_id = response.json()["sessionId"]
    first = Turn.objects.get(session_id=session_id)
    assert first.status == Turn.Status.COMPLETED
    turn = Turn.objects.create(session_id=session_id, message="again", status=Turn.Status.RUNNING,
                               claimed_by=process_id(), lease_until=timezone.now() + timedelta(seconds=30))
    return first, turn


def ran_last_in(first: Turn, claimed_by: str, **changes) -> None:
    Turn.objects.filter(pk=first.pk).update(claimed_by=claimed_by, **changes)


@transactional
def test_the_keeper_is_the_other_live_process_that_completed_the_last_turn_lately(follow_up, elsewhere):
    first, turn = follow_up
    ran_last_in(first, f"{host_id()}:{elsewhere}")
    assert affinity.keeper_of(turn, within=180) == elsewhere
    assert affinity.keeper_of(turn, within=0) is None  # nothing is kept

    ran_last_in(first, process_id())
    assert affinity.keeper_of(turn, within=180) is None  # this process: it runs the turn itself
    ran_last_in(first, f"another-host:{elsewhere}")
    assert affinity.keeper_of(turn, within=180) is None  # no doorbell reaches another machine
    ran_last_in(first, f"{host_id()}:{elsewhere}", ended_at=timezone.now() - timedelta(seconds=200))
    assert affinity.keeper_of(turn, within=180) is None  # its child is closed by now
    ran_last_in(first, f"{host_id()}:{elsewhere}", ended_at=timezone.now(), status=Turn.Status.FAILED)
    assert affinity.keeper_of(turn, within=180) is None  # a failed turn keeps no child


@transactional
def test_with_nobody_listening_the_worker_runs_the_turn_itself_at_once(follow_up, elsewhere):
    _, turn = follow_up
    assert affinity.hand_over(turn, elsewhere) is False
    turn.refresh_from_db()
    assert (turn.status, turn.claimed_by) == (Turn.Status.RUNNING, process_id())


@transactional
def test_the_keeper_claims_what_it_is_handed(follow_up, monkeypatch):
    _, turn = follow_up
    bell = doorbell.Bell(affinity.BELL)  # this process's own, standing in for the keeper's
    taken: list[str] = []

    def keeper() -> None:
        said = bell.receive(10.0)
        taken.extend(one.decode() for one in said)
        Turn.claim(taken[0], "keeper-host:4242", 30.0)
        connection.close()

    listening = threading.Thread(target=keeper)
    listening.start()
    try:
        assert affinity.hand_over(turn, pid=os.getpid()) is True
    finally:
        listening.join(10)
        bell.sock.close()
    assert taken == [turn.id]
    turn.refresh_from_db()
    assert (turn.status, turn.claimed_by) == (Turn.Status.RUNNING, "keeper-host:4242")


@transactional
def test_a_keeper_that_does_not_claim_in_time_leaves_the_turn_to_its_sender(follow_up, monkeypatch):
    _, turn = follow_up
    monkeypatch.setattr(affinity, "WAIT_SECONDS", 0.3)
    bell = doorbell.Bell(affinity.BELL)  # rung, never answered
    try:
        assert affinity.hand_over(turn, pid=os.getpid()) is False
        assert bell.receive(0.1) == [turn.id.encode()]
    finally:
        bell.sock.close()
    turn.refresh_from_db()
    assert (turn.status, turn.claimed_by) == (Turn.Status.RUNNING, process_id())


@transactional
def test_a_turn_no_longer_this_workers_is_not_handed_or_run(follow_up, elsewhere):
    _, turn = follow_up
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.FAILED, claimed_by=process_id())
    assert affinity.hand_over(turn, elsewhere) is True
    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.FAILED
