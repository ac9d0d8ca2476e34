"""The running-turn cap (AGENTSITE_MAX_RUNNING_TURNS) through each move of a turn: a
turn parked for approval gives its slot back and takes one again, in order, once
decided; stopping a session ends its turns waiting for a slot at once; a preempting
follow-up supersedes them; a turn held back is told so with `turn.queued`; a slot
freed by deleting a session, or by raising the cap, goes to the next waiting turn.

Turns are handed to a worker played by the test: each enqueued turn is noted, and
`work` runs them through the engine's own task (`run_turn`), in the order handed,
so which turn got a slot when is exact.
"""
from __future__ import annotations

import json

import pytest

from sessions.turn import lifecycle
from sessions.turn.admission import interrupt
from sessions.turn.engine import run_turn
from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from sessions.turn.recovery import sweep
from tests.sessions.test_approvals import PAY_5, decide, gated, lines, post_json  # noqa: F401 (gated: a fixture)

transactional = pytest.mark.django_db(transaction=True)
HELD = {"waitingFor": "running_turns_cap", "runningTurnsCap": 1}


class Worker:
    """The turns enqueued so far, run on demand through `sessions.turn.engine.run_turn`."""

    def __init__(self) -> None:
        self.handed: list[str] = []
        self.ran: list[str] = []

    def work(self, only: str | None = None) -> None:
        """Run every handed turn (and those they hand on), oldest first; or just `only`'s session's."""
        while True:
            todo = [t for t in self.handed if only is None or Turn.objects.get(pk=t).session_id == only]
            if not todo:
                return
            self.handed.remove(todo[0])
            self.ran.append(Turn.objects.get(pk=todo[0]).session_id)
            run_turn(todo[0])


@pytest.fixture
def worker(monkeypatch, settings) -> Worker:
    settings.AGENTSITE_MAX_RUNNING_TURNS = 1
    found = Worker()
    monkeypatch.setattr(lifecycle, "enqueue", lambda task, turn_id, **options: found.handed.append(turn_id))
    return found


def start(client, message: str) -> dict:
    response = post_json(client, "/gated/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()


def types(session_id: str) -> list[str]:
    return [e["type"] for e in read_events(session_id)]


def held_back(session_id: str) -> list[dict]:
    """The `turn.queued` events of a session: (turn id, data) as dicts."""
    return [{"turnId": e["turnId"], **e["data"]} for e in read_events(session_id) if e["type"] == "turn.queued"]


def status(session_id: str) -> str:
    return Session.objects.get(pk=session_id).status


def last_turn(session_id: str) -> Turn:
    return Turn.objects.filter(session_id=session_id).order_by("-created_at").first()


@transactional
def test_a_parked_turn_gives_its_slot_back_and_takes_one_again_in_order(alice, gated, worker):
    ledger, _ = gated
    parked = start(alice, PAY_5)["sessionId"]
    worker.work()
    assert status(parked) == "awaiting_approval"

    # The parked turn holds no slot: another session's turn starts at once.
    second = start(alice, "hi")
    assert second["status"] == "running" and held_back(second["sessionId"]) == []

    # Decided while that turn holds the slot: the parked turn waits for one, and says so.
    call_id = [e for e in read_events(parked) if e["type"] == "action.approval_requested"][0]["data"]["callId"]
    assert decide(alice, parked, call_id, "approve").status_code == 200
    assert held_back(parked) == [{"turnId": last_turn(parked).id, **HELD}]
    assert last_turn(parked).status == Turn.Status.AWAITING_APPROVAL and status(parked) == "running"
    assert lines(ledger) == []

    third = start(alice, "hi")["sessionId"]
    assert status(third) == "idle" and held_back(third) == [{"turnId": last_turn(third).id, **HELD}]

    worker.work()

    # The oldest first: the resumed turn was sent before the third session's.
    assert worker.ran == [parked, second["sessionId"], parked, third]
    assert lines(ledger) == ["5"]
    for session_id in (parked, second["sessionId"], third):
        assert types(session_id)[-2:] == ["turn.completed", "session.waiting"]
        assert status(session_id) == "waiting"


@transactional
def test_a_turn_decided_while_the_principal_is_below_the_cap_resumes_at_once(alice, gated, worker):
    parked = start(alice, PAY_5)["sessionId"]
    worker.work()
    call_id = [e for e in read_events(parked) if e["type"] == "action.approval_requested"][0]["data"]["callId"]

    assert decide(alice, parked, call_id, "approve").status_code == 200

    assert worker.handed == [last_turn(parked).id] and held_back(parked) == []
    worker.work()
    assert types(parked)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_stopping_a_session_ends_its_turn_waiting_for_a_slot_now(alice, gated, worker):
    running = start(alice, "hi")["sessionId"]
    waiting = start(alice, "hi")["sessionId"]
    assert status(waiting) == "idle" and held_back(waiting)

    stopped = alice.post(f"/gated/v1/session/{waiting}/stop")
    assert stopped.status_code == 202, stopped.content

    # It winds down without waiting for the running session's slot, and never reaches the model.
    worker.work(only=waiting)
    assert last_turn(running).status == Turn.Status.QUEUED
    failed = [e for e in read_events(waiting) if e["type"] == "turn.failed"]
    assert [f["data"]["error"] for f in failed] == ["turn interrupted"]
    assert types(waiting)[-2:] == ["turn.failed", "session.waiting"] and "message.completed" not in types(waiting)
    assert status(waiting) == "waiting"
    assert alice.post(f"/gated/v1/session/{waiting}/stop").status_code == 409

    worker.work()
    assert types(running)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_stopping_one_waiting_turn_as_the_admin_does_ends_it_now(alice, gated, worker):
    start(alice, "hi")
    waiting = start(alice, "hi")["sessionId"]

    assert interrupt(last_turn(waiting).id)

    worker.work(only=waiting)
    assert types(waiting)[-2:] == ["turn.failed", "session.waiting"] and status(waiting) == "waiting"


@transactional
def test_stopping_a_session_ends_the_follow_ups_behind_its_turn_before_other_waiting_turns(alice, gated, worker):
    stopped = start(alice, "hi")
    follow = post_json(alice, f"/gated/v1/session/{stopped['sessionId']}/message",
                       {"message": "later", "admission": "coalesce", "continuationToken": stopped["continuationToken"]})
    assert follow.status_code == 202, follow.content
    other = start(alice, "hi")["sessionId"]

    assert alice.post(f"/gated/v1/session/{stopped['sessionId']}/stop").status_code == 202
    worker.work()

    # The follow-up wound down first, then the other session's turn had the slot.
    assert worker.ran == [stopped["sessionId"], stopped["sessionId"], other]
    assert [e["data"]["error"] for e in read_events(stopped["sessionId"]) if e["type"] == "turn.failed"] == [
        "turn interrupted"] * 2
    assert types(other)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_a_preempting_follow_up_supersedes_the_turn_waiting_for_a_slot(alice, gated, worker):
    start(alice, "hi")
    waiting = start(alice, "first")

    sent = post_json(alice, f"/gated/v1/session/{waiting['sessionId']}/message",
                     {"message": "second", "continuationToken": waiting["continuationToken"]})
    assert sent.status_code == 202, sent.content
    worker.work()

    found = read_events(waiting["sessionId"])
    first, second = Turn.objects.filter(session_id=waiting["sessionId"]).order_by("created_at")
    assert [e["data"]["text"] for e in found if e["type"] == "message.completed"] == ["You said: second"]
    assert [(e["turnId"], e["data"]["error"]) for e in found if e["type"] == "turn.failed"] == [
        (first.id, "turn interrupted")]
    assert [e["turnId"] for e in found if e["type"] == "turn.queued"] == [first.id]
    assert (first.status, second.status) == (Turn.Status.INTERRUPTED, Turn.Status.COMPLETED)
    assert status(waiting["sessionId"]) == "waiting"


@transactional
def test_a_follow_up_to_a_free_session_beyond_the_cap_is_told_it_waits(alice, gated, worker):
    first = start(alice, "hi")
    worker.work()
    start(alice, "hi")  # holds the slot

    sent = post_json(alice, f"/gated/v1/session/{first['sessionId']}/message",
                     {"message": "again", "continuationToken": first["continuationToken"]})

    assert sent.status_code == 202 and sent.json()["status"] == "waiting"
    assert held_back(first["sessionId"]) == [{"turnId": sent.json()["turnId"], **HELD}]
    worker.work()
    assert types(first["sessionId"])[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_deleting_the_session_holding_the_slot_starts_the_next_waiting_turn(alice, gated, worker):
    holding = start(alice, "hi")["sessionId"]
    waiting = start(alice, "hi")["sessionId"]

    assert alice.delete(f"/gated/v1/session/{holding}").status_code == 204

    assert worker.handed[-1] == last_turn(waiting).id and status(waiting) == "running"


@transactional
def test_the_sweep_starts_waiting_turns_once_the_cap_is_raised(alice, gated, worker, settings):
    start(alice, "hi")
    waiting = start(alice, "hi")["sessionId"]
    settings.AGENTSITE_MAX_RUNNING_TURNS = 2

    sweep()

    assert worker.handed[-1] == last_turn(waiting).id and status(waiting) == "running"


@transactional
def test_under_the_cap_no_turn_is_told_it_waits(alice, gated, worker, settings):
    settings.AGENTSITE_MAX_RUNNING_TURNS = 3
    started = [start(alice, "hi")["sessionId"] for _ in range(3)]
    worker.work()
    assert all("turn.queued" not in types(s) for s in started)
    assert json.dumps(worker.ran) == json.dumps(started)
